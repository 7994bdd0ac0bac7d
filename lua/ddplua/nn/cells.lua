-- One step of a recurrent network, PyTorch's cells, and (from nn/conv1d.lua) the 1-d convolutions and pools:
--
--   nn.RNNCell(input_size, hidden_size [, bias = true [, nonlinearity = "tanh" | "relu"]])
--   nn.LSTMCell(input_size, hidden_size [, bias = true])
--   nn.GRUCell(input_size, hidden_size [, bias = true])
--   (or the settings as one options table after the sizes: nn.RNNCell(3, 4, {nonlinearity = "relu"}))
--
--   h = rnn_cell(x [, h])      h = gru_cell(x [, h])      h, c = lstm_cell(x [, {h, c}])  (or lstm_cell(x, h, c))
--
-- x is [N, input_size] or unbatched [input_size]; the states [N, hidden_size] (or [hidden_size]), zeros when not
-- given. PyTorch's parameters (weight_ih [gates * H, I], weight_hh [gates * H, H], bias_ih, bias_hh [gates * H]),
-- gate order (LSTM i, f, g, o; GRU r, z, n with n = tanh(W_in x + b_in + r * (W_hn h + b_hn))) and init
-- U(-1/sqrt(H), 1/sqrt(H)), so PyTorch's state_dicts load. Each step is composed of linear, sigmoid, tanh / relu
-- and chunk, so every gradient (and autocast) is the ops' own. PyTorch returns LSTMCell's state as the tuple (h, c);
-- here it is two values.
local ddp = require "ddplua"
local Module = require "ddplua.nn.module"
local util = require "ddplua.nn.util"
local init = require "ddplua.nn.initializers"
local E = require "ddplua.errors"
local conv1d = require "ddplua.nn.conv1d"

local GATES = { RNNCell = 1, LSTMCell = 4, GRUCell = 3 }
local SETTINGS = {
  RNNCell = { "bias", "nonlinearity", "device", "dtype" },
  LSTMCell = { "bias", "device", "dtype" },
  GRUCell = { "bias", "device", "dtype" },
}

-- a state argument: [N, H] for a batched input, [H] for an unbatched one (returned as [1, H])
local function check_state(self, s, what, batched, N)
  local H = self.hidden_size
  if not ddp.is_tensor(s) or s:dim() ~= (batched and 2 or 1) or s:size(1) ~= (batched and N or H) or
      (batched and s:size(2) ~= H) then
    local want = batched and string.format("[%d, %d]", N, H) or string.format("[%d]", H)
    E.raise(string.format("%s: %s must be %s (for an input of %s), got %s", tostring(self), what, want,
      batched and string.format("%d rows", N) or "one unbatched row",
      ddp.is_tensor(s) and util.shape_str(s) or type(s)))
  end
  return batched and s or s:unsqueeze(1)
end

local function make(name)
  local cls = Module:extend(name)
  local G = GATES[name]

  function cls:__init(input_size, hidden_size, ...)
    local o = util.args(name, SETTINGS[name], ...)
    self.input_size = util.check_int(name, "input_size", input_size)
    self.hidden_size = util.check_int(name, "hidden_size", hidden_size)
    if o.bias ~= nil and type(o.bias) ~= "boolean" then
      E.raise(name .. ": bias must be true or false, got " .. tostring(o.bias))
    end
    self.bias = o.bias ~= false
    if name == "RNNCell" then
      local nl = o.nonlinearity == nil and "tanh" or o.nonlinearity
      if nl ~= "tanh" and nl ~= "relu" then
        E.raise(string.format("RNNCell: unknown nonlinearity '%s' (expected \"tanh\" or \"relu\")", tostring(nl)))
      end
      self.nonlinearity = nl
    end
    if hidden_size > (1 << 40) // G then -- (G * hidden_size wrapped negative at math.maxinteger)
      E.raise(string.format("%s: hidden_size %d is too large (%d gates of it are more than 2^40 weights)", name,
        hidden_size, G))
    end
    local topts = util.tensor_opts(o)
    local bound = 1 / math.sqrt(hidden_size)
    local function param(...)
      local shape = { ... }
      return util.parameter(function() return init.uniform_(ddp.empty(shape, topts), -bound, bound) end)
    end
    self:register_parameter("weight_ih", param(G * hidden_size, input_size))
    self:register_parameter("weight_hh", param(G * hidden_size, hidden_size))
    if self.bias then
      self:register_parameter("bias_ih", param(G * hidden_size))
      self:register_parameter("bias_hh", param(G * hidden_size))
    else
      self:register_parameter("bias_ih", nil)
      self:register_parameter("bias_hh", nil)
    end
  end

  -- forward(x [, h]); LSTMCell: forward(x [, {h, c}]) or forward(x, h, c)
  function cls:forward(x, hx, c_arg)
    local I, H = self.input_size, self.hidden_size
    if not ddp.is_tensor(x) or (x:dim() ~= 1 and x:dim() ~= 2) or x:size(-1) ~= I then
      E.raise(string.format("%s: expected input of shape [N, %d] or [%d], got %s", tostring(self), I, I,
        ddp.is_tensor(x) and util.shape_str(x) or type(x)))
    end
    local batched = x:dim() == 2
    if not batched then x = x:unsqueeze(1) end
    local N = x:size(1)
    local h, c
    if name == "LSTMCell" then
      if hx ~= nil then
        if ddp.is_tensor(hx) then
          if c_arg == nil then
            E.raise(tostring(self) .. ": the state must be a table {h, c} (or h and c as two arguments), got one " ..
              "tensor")
          end
          h, c = hx, c_arg
        elseif type(hx) == "table" then
          h, c = hx[1], hx[2]
        else
          E.raise(tostring(self) .. ": the state must be a table {h, c}, got " .. type(hx))
        end
        h, c = check_state(self, h, "h", batched, N), check_state(self, c, "c", batched, N)
      end
    else
      if c_arg ~= nil then E.raise(tostring(self) .. ": takes one state tensor h, got a second state argument") end
      if hx ~= nil then h = check_state(self, hx, "h", batched, N) end
    end
    local function zeros() return ddp.zeros({ N, H }, { dtype = x:dtype(), device = x:device() }) end
    h = h or zeros()
    local gi = ddp.linear(x, self.weight_ih, self.bias_ih)
    local gh = ddp.linear(h, self.weight_hh, self.bias_hh)
    if name == "LSTMCell" then
      c = c or zeros()
      local i, f, g, o = (gi + gh):chunk(4, 2)
      c = f:sigmoid() * c + i:sigmoid() * g:tanh()
      h = o:sigmoid() * c:tanh()
    elseif name == "GRUCell" then
      local ir, iz, inn = gi:chunk(3, 2)
      local hr, hz, hn = gh:chunk(3, 2)
      local r, z = (ir + hr):sigmoid(), (iz + hz):sigmoid()
      local n = (inn + r * hn):tanh()
      h = n + z * (h - n) -- (1 - z) * n + z * h
    elseif self.nonlinearity == "relu" then
      h = (gi + gh):relu()
    else
      h = (gi + gh):tanh()
    end
    if not batched then h, c = h:squeeze(1), c and c:squeeze(1) end
    if name == "LSTMCell" then return h, c end
    return h
  end

  function cls:extra_repr()
    local s = string.format("%d, %d", self.input_size, self.hidden_size)
    if not self.bias then s = s .. ", bias=False" end
    if self.nonlinearity and self.nonlinearity ~= "tanh" then s = s .. ", nonlinearity=" .. self.nonlinearity end
    return s
  end
  return cls
end

local modules = { RNNCell = make("RNNCell"), LSTMCell = make("LSTMCell"), GRUCell = make("GRUCell") }
for k, v in pairs(conv1d.modules) do modules[k] = v end

return { modules = modules, F = conv1d.F }
