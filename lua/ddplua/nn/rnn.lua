-- nn.RNN, nn.LSTM, nn.GRU with PyTorch's arguments, parameter names, gate
-- order (LSTM i, f, g, o; GRU r, z, n) and initialisation U(-1/sqrt(H),
-- 1/sqrt(H)), so PyTorch's state_dicts load:
--
--   nn.LSTM(input_size, hidden_size [, num_layers [, bias [, batch_first [, dropout [, bidirectional]]]]])
--   nn.LSTM(input_size, hidden_size, {num_layers=1, bias=true, batch_first=false, dropout=0, bidirectional=false})
--   nn.LSTM(input_size, hidden_size, num_layers, {dropout=0.2})   (positional settings, then a table)
--   nn.RNN(... [, num_layers [, nonlinearity = "tanh"|"relu" [, bias ...]]]) (PyTorch's positional order)
--   out, h_n = rnn(x [, h_0])         out, {h_n, c_n} = lstm(x [, {h_0, c_0}])
--
-- x is [T, N, input] ([N, T, input] with batch_first; [T, input] without a
-- batch); out [T, N, D * hidden] (D = 2 when bidirectional); h_n, c_n
-- [num_layers * D, N, hidden]. Per layer and direction the input
-- projection of every step is one GEMM (linear), and the recurrence one
-- fused op (core._rnn_layer: per step one GEMM and one gate kernel,
-- forward and backward). dropout applies between layers while training.
local ddp = require "ddplua"
local Module = require "ddplua.nn.module"
local util = require "ddplua.nn.util"
local init = require "ddplua.nn.initializers"

local core = ddp.core
local M = {}

local SETTINGS = { "num_layers", "bias", "batch_first", "dropout", "bidirectional" }
local RNN_SETTINGS = { "num_layers", "nonlinearity", "bias", "batch_first", "dropout", "bidirectional" }

-- the settings: PyTorch's positional order, then optionally one options
-- table (which may also name dtype and device, keyword-only in PyTorch), as
-- nn.LSTM(ninp, nhid, nlayers, {dropout = 0.2}) writes LSTM(ninp, nhid, nlayers, dropout=0.2)
local function settings(who, names, ...)
  local args, n = { ... }, select("#", ...)
  local opts = {}
  if n > 0 and type(args[n]) == "table" then
    local valid = { table.unpack(names) }
    valid[#valid + 1], valid[#valid + 2] = "dtype", "device"
    for k, v in pairs(util.check_opts(who, args[n], valid)) do opts[k] = v end
    n = n - 1
  end
  if n > #names then
    error(string.format("%s: too many arguments (%d after input_size and hidden_size; the settings are %s)", who, n,
      table.concat(names, ", ")), 4)
  end
  for i = 1, n do
    if opts[names[i]] ~= nil then
      error(string.format("%s: %s given both positionally and in the options table", who, names[i]), 4)
    end
    opts[names[i]] = args[i]
  end
  return opts
end

local function check_bool(who, name, v, dflt)
  if v == nil then return dflt end
  if type(v) ~= "boolean" then error(string.format("%s: %s must be true or false, got %s", who, name, tostring(v)), 4) end
  return v
end

local function make(name, mode_of, gates, names)
  local cls = Module:extend(name)

  function cls:__init(input_size, hidden_size, ...)
    local o = settings(name, names, ...)
    if o.proj_size then error(name .. ": proj_size is not supported", 3) end
    self.input_size = util.check_int(name, "input_size", input_size)
    self.hidden_size = util.check_int(name, "hidden_size", hidden_size)
    self.num_layers = util.check_int(name, "num_layers", o.num_layers or 1)
    self.bias = check_bool(name, "bias", o.bias, true)
    self.batch_first = check_bool(name, "batch_first", o.batch_first, false)
    self.bidirectional = check_bool(name, "bidirectional", o.bidirectional, false)
    self.dropout = o.dropout or 0
    if type(self.dropout) ~= "number" or not (self.dropout >= 0 and self.dropout <= 1) then
      error(string.format("%s: dropout must be a number in [0, 1], got %s", name, tostring(o.dropout)), 3)
    end
    self.mode = mode_of(o)
    if self.mode == nil then
      error(string.format("%s: unknown nonlinearity '%s' (expected \"tanh\" or \"relu\")", name,
        tostring(o.nonlinearity)), 3)
    end
    self.nonlinearity = o.nonlinearity or (names == RNN_SETTINGS and "tanh" or nil)
    local topts = util.tensor_opts(o)
    local H, D = hidden_size, self.bidirectional and 2 or 1
    -- all the weights at once must be possible before the layers are made one by one (hidden_size or num_layers
    -- at math.maxinteger wrapped the gates' sizes negative, or made layers until the process was killed)
    local per_dir = gates * H * (math.max(input_size, H * D) + H + 2)
    if H > (1 << 40) // gates or per_dir // (gates * H) ~= math.max(input_size, H * D) + H + 2 or
        self.num_layers > (1 << 40) // (D * per_dir) then
      error(string.format("%s: %d layers of hidden_size %d (input_size %d) are too many weights", name,
        self.num_layers, H, input_size), 3)
    end
    local total = self.num_layers * D * per_dir
    if total > 1 << 26 then -- past 256 MB of float32, one trial block first (smaller sets of weights need none)
      local ok, trial = pcall(ddp.empty, { total }, topts)
      if not ok then
        error(string.format("%s: the weights of %d layers of hidden_size %d cannot be made: %s", name,
          self.num_layers, H, (tostring(trial):gsub("^.-: ", ""))), 3)
      end
      trial:free()
    end
    local bound = 1 / math.sqrt(H)
    local function param(...)
      local shape = { ... }
      return util.parameter(function() return init.uniform_(ddp.empty(shape, topts), -bound, bound) end)
    end
    for layer = 0, self.num_layers - 1 do
      for d = 0, D - 1 do
        local sfx = string.format("_l%d%s", layer, d == 1 and "_reverse" or "")
        local in_k = layer == 0 and input_size or H * D
        self:register_parameter("weight_ih" .. sfx, param(gates * H, in_k))
        self:register_parameter("weight_hh" .. sfx, param(gates * H, H))
        if self.bias then
          self:register_parameter("bias_ih" .. sfx, param(gates * H))
          self:register_parameter("bias_hh" .. sfx, param(gates * H))
        end
      end
    end
  end

  --- PyTorch's cuDNN weight compaction; nothing to do here.
  function cls:flatten_parameters() end

  local function check_state(self, s, what, n)
    local L = self.num_layers * (self.bidirectional and 2 or 1)
    if not ddp.is_tensor(s) or s:dim() ~= 3 or s:size(1) ~= L or s:size(2) ~= n or s:size(3) ~= self.hidden_size then
      error(string.format("%s: %s must be [%d, %d, %d], got %s", tostring(self), what, L, n, self.hidden_size,
        ddp.is_tensor(s) and util.shape_str(s) or type(s)), 4)
    end
  end

  function cls:forward(x, hx)
    local unbatched = x:dim() == 2
    if x:dim() ~= 3 and not unbatched then
      error(string.format("%s: expected a 2- or 3-dimensional input, got shape %s", tostring(self), util.shape_str(x)), 2)
    end
    if unbatched then x = x:unsqueeze(2) elseif self.batch_first then x = x:transpose(1, 2) end
    if x:size(3) ~= self.input_size then
      error(string.format("%s: expected input with %d features, got shape %s", tostring(self), self.input_size,
        util.shape_str(x)), 2)
    end
    local N = x:size(2)
    local h0, c0
    if hx ~= nil then
      if self.mode == "LSTM" then
        if type(hx) ~= "table" or ddp.is_tensor(hx) then
          error(tostring(self) .. ": the state must be a table {h_0, c_0}", 2)
        end
        h0, c0 = hx[1], hx[2]
        if unbatched then h0, c0 = h0 and h0:unsqueeze(2), c0 and c0:unsqueeze(2) end
        check_state(self, h0, "h_0", N)
        check_state(self, c0, "c_0", N)
      else
        h0 = unbatched and hx:unsqueeze(2) or hx
        check_state(self, h0, "h_0", N)
      end
    end
    local D = self.bidirectional and 2 or 1
    local hs, cs, inp = {}, {}, x
    for layer = 0, self.num_layers - 1 do
      local outs = {}
      for d = 0, D - 1 do
        local sfx = string.format("_l%d%s", layer, d == 1 and "_reverse" or "")
        local k = layer * D + d + 1
        local xp = ddp.linear(inp, self["weight_ih" .. sfx], self["bias_ih" .. sfx])
        local y, h, c = core._rnn_layer(self.mode, xp, self["weight_hh" .. sfx], self["bias_hh" .. sfx],
          h0 and h0:select(1, k), c0 and c0:select(1, k), d == 1)
        outs[d + 1], hs[k], cs[k] = y, h, c
      end
      inp = D == 2 and ddp.cat(outs, 3) or outs[1]
      if layer < self.num_layers - 1 and self.dropout > 0 and self.training then
        inp = ddp.dropout(inp, self.dropout, true)
      end
    end
    local out, h_n = inp, ddp.stack(hs)
    local c_n = self.mode == "LSTM" and ddp.stack(cs) or nil
    if unbatched then
      out, h_n, c_n = out:squeeze(2), h_n:squeeze(2), c_n and c_n:squeeze(2)
    elseif self.batch_first then
      out = out:transpose(1, 2)
    end
    if self.mode == "LSTM" then return out, { h_n, c_n } end
    return out, h_n
  end

  function cls:extra_repr()
    local s = string.format("%d, %d", self.input_size, self.hidden_size)
    if self.num_layers ~= 1 then s = s .. ", num_layers=" .. self.num_layers end
    if self.nonlinearity and self.nonlinearity ~= "tanh" then s = s .. ", nonlinearity=" .. self.nonlinearity end
    if not self.bias then s = s .. ", bias=False" end
    if self.batch_first then s = s .. ", batch_first=True" end
    if self.dropout ~= 0 then s = s .. string.format(", dropout=%g", self.dropout) end
    if self.bidirectional then s = s .. ", bidirectional=True" end
    return s
  end
  return cls
end

M.RNN = make("RNN", function(o)
  local nl = o.nonlinearity or "tanh"
  return nl == "tanh" and "RNN_TANH" or nl == "relu" and "RNN_RELU" or nil
end, 1, RNN_SETTINGS)
M.LSTM = make("LSTM", function() return "LSTM" end, 4, SETTINGS)
M.GRU = make("GRU", function() return "GRU" end, 3, SETTINGS)

return M
