-- nn.TransformerEncoderLayer and nn.TransformerEncoder with PyTorch's
-- structure and parameter names (self_attn.*, linear1, linear2, norm1,
-- norm2; layers.0...., norm), so their state_dicts load:
--
--   nn.TransformerEncoderLayer(d_model, nhead [, dim_feedforward [, dropout [, activation ...]]] [,
--       {dim_feedforward=2048, dropout=0.1, activation="relu"|"gelu"|function, layer_norm_eps=1e-5,
--        batch_first=false, norm_first=false, dtype=, device=}])   (positional settings, then the rest by name)
--   layer(src [, {src_mask=, src_key_padding_mask=, is_causal=}])
--   nn.TransformerEncoder(layer, num_layers [, {norm=}])   -- num_layers copies of layer (PyTorch's deepcopy)
--   encoder(src [, {mask=, src_key_padding_mask=, is_causal=}])
--
-- Self-attention runs through the fused scaled_dot_product_attention
-- (need_weights=false, as PyTorch's layer asks).
local ddp = require "ddplua"
local Module = require "ddplua.nn.module"
local Linear = require "ddplua.nn.linear"
local LayerNorm = require "ddplua.nn.layernorm"
local Dropout = require "ddplua.nn.dropout"
local MHA = require "ddplua.nn.attention"
local util = require "ddplua.nn.util"

local M = {}

-- ---- TransformerEncoderLayer ----
local Layer = Module:extend("TransformerEncoderLayer")
M.TransformerEncoderLayer = Layer

local LAYER_OPTIONS = { "dim_feedforward", "dropout", "activation", "layer_norm_eps", "batch_first", "norm_first",
  "dtype", "device" }

function Layer:__init(d_model, nhead, ...)
  local o = util.args("TransformerEncoderLayer", LAYER_OPTIONS, ...)
  local dff = o.dim_feedforward or 2048
  local p = o.dropout == nil and 0.1 or o.dropout
  local act = o.activation or "relu"
  if act ~= "relu" and act ~= "gelu" and type(act) ~= "function" then
    error(string.format("TransformerEncoderLayer: activation should be \"relu\", \"gelu\" or a function, got %s",
      tostring(act)), 3)
  end
  local eps = o.layer_norm_eps or 1e-5
  local dev = { dtype = o.dtype, device = o.device }
  self.self_attn = MHA(d_model, nhead, { dropout = p, batch_first = o.batch_first == true, dtype = o.dtype,
    device = o.device })
  self.linear1 = Linear(d_model, dff, dev)
  self.dropout = Dropout(p)
  self.linear2 = Linear(dff, d_model, dev)
  self.norm_first = o.norm_first == true
  self.norm1 = LayerNorm(d_model, { eps = eps, dtype = o.dtype, device = o.device })
  self.norm2 = LayerNorm(d_model, { eps = eps, dtype = o.dtype, device = o.device })
  self.dropout1 = Dropout(p)
  self.dropout2 = Dropout(p)
  self.activation = act
  self.batch_first = o.batch_first == true
end

local function activate(act, x)
  if act == "relu" then return x:relu() elseif act == "gelu" then return x:gelu() end
  return act(x)
end

-- free: the layer and its children are the library's (util.is_library): each intermediate goes once read. A
-- module may return its input as it came (an nn.Identity for a norm), so every release keeps the block's input and
-- what was just made.
function Layer:_sa_block(x, mask, kpm, causal, free)
  local y = self.self_attn(x, x, x, { attn_mask = mask, key_padding_mask = kpm, need_weights = false,
    is_causal = causal })
  local z = self.dropout1(y)
  util.release(free, y, z, x)
  return z
end

function Layer:_ff_block(x, free)
  local user_act = type(self.activation) == "function" -- a function of the user's may keep what it reads or makes
  local h = self.linear1(x)
  local a = activate(self.activation, h)
  util.release(free and not user_act, h, a, x)
  local d = self.dropout(a)
  util.release(free and not user_act, a, d, x)
  local y = self.linear2(d)
  util.release(free and not (user_act and rawequal(d, a)), d, y, x)
  local z = self.dropout2(y)
  util.release(free, y, z, x)
  return z
end

local FORWARD = { "src_mask", "src_key_padding_mask", "is_causal" }

function Layer:forward(src, opts)
  opts = util.check_opts(tostring(self.__name or "TransformerEncoderLayer") .. " forward", opts, FORWARD)
  local x, m, kpm, c = src, opts.src_mask, opts.src_key_padding_mask, opts.is_causal
  -- (a block replaced on the instance is the user's code: it may keep what it reads)
  local free = util.is_library(self) and rawget(self, "_sa_block") == nil and rawget(self, "_ff_block") == nil
  local function release(t, ...) util.release(free, t, x, ...) end -- never the caller's src
  if self.norm_first then
    local h = self.norm1(x)
    local a = self:_sa_block(h, m, kpm, c, free)
    release(h, a)
    local x1 = x + a
    release(a, x1)
    local h2 = self.norm2(x1)
    local f = self:_ff_block(h2, free)
    release(h2, f, x1)
    local out = x1 + f
    release(x1, out, f)
    release(f, out)
    return out
  end
  local a = self:_sa_block(x, m, kpm, c, free)
  local s1 = x + a
  release(a, s1)
  local x1 = self.norm1(s1)
  release(s1, x1)
  local f = self:_ff_block(x1, free)
  local s2 = x1 + f
  release(x1, s2, f)
  release(f, s2)
  local out = self.norm2(s2)
  release(s2, out)
  return out
end

function Layer:extra_repr() return "" end

-- ---- deep copies of a module (PyTorch's copy.deepcopy): new parameters and
-- buffers with the same values, shared ones shared within the copy ----
local function deepcopy(v, memo)
  if memo[v] then return memo[v] end
  if ddp.is_tensor(v) then
    local c = ddp.no_grad(function() return v:detach():clone() end)
    if v.requires_grad then c:requires_grad_() end
    memo[v] = c
    return c
  end
  if type(v) ~= "table" then return v end
  local c = {}
  memo[v] = c
  for k, x in pairs(v) do rawset(c, deepcopy(k, memo), deepcopy(x, memo)) end
  return setmetatable(c, getmetatable(v)) -- classes are shared, not copied
end
M.deepcopy = function(m) return deepcopy(m, {}) end

-- Before num_layers copies of layer are made: an error naming who when all their weights at once could not exist
-- (num_layers at math.maxinteger copied layers until the process was killed). A copy counts at least 2^10 elements
-- (its Lua tables), so a layer without weights cannot be copied without end either.
function M.check_copies(who, layer, num_layers)
  local per = 0
  for _, t in ipairs(layer:parameters()) do per = per + t:numel() end
  for _, t in ipairs(layer:buffers()) do per = per + t:numel() end
  per = math.max(per, 1 << 10)
  if num_layers > (1 << 40) // per then
    error(string.format("%s: %d copies of a layer of %d weights are too many weights", who, num_layers, per), 4)
  end
  local total = num_layers * per
  if total > 1 << 26 then -- past 256 MB of float32, one trial block first (as nn.LSTM)
    local ok, trial = pcall(ddp.empty, { total })
    if not ok then
      error(string.format("%s: the weights of %d copies of the layer cannot be made: %s", who, num_layers,
        (tostring(trial):gsub("^.-: ", ""))), 4)
    end
    trial:free()
  end
end

-- ---- TransformerEncoder ----
local Encoder = Module:extend("TransformerEncoder")
M.TransformerEncoder = Encoder

function Encoder:__init(layer, num_layers, opts)
  if not Module.is_module(layer) then
    error("TransformerEncoder: encoder_layer must be a module (nn.TransformerEncoderLayer), got " .. type(layer), 3)
  end
  if type(opts) ~= "table" and opts ~= nil then opts = { norm = opts } end -- PyTorch's positional norm
  opts = util.check_opts("TransformerEncoder", opts, { "norm", "enable_nested_tensor", "mask_check" })
  self.num_layers = util.check_int("TransformerEncoder", "num_layers", num_layers)
  M.check_copies("TransformerEncoder", layer, num_layers)
  local layers = {}
  for i = 1, num_layers do layers[i] = deepcopy(layer, {}) end
  -- children named 0, 1, ... as PyTorch's ModuleList
  self.layers = require("ddplua.nn.container").ModuleList(layers)
  self.norm = opts.norm
end

function Encoder:forward(src, opts)
  opts = util.check_opts("TransformerEncoder forward", opts, { "mask", "src_key_padding_mask", "is_causal" })
  local free = util.is_library(self)
  local x = src
  for i = 1, self.num_layers do
    local y = self.layers[i](x, { src_mask = opts.mask, src_key_padding_mask = opts.src_key_padding_mask,
      is_causal = opts.is_causal })
    util.release(free and i > 1, x, y, src) -- the previous layer's output, not the caller's input
    x = y
  end
  if self.norm then
    local y = self.norm(x)
    util.release(free and self.num_layers > 0, x, y, src)
    x = y
  end
  return x
end

return M
