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

function Layer:_sa_block(x, mask, kpm, causal)
  local y = self.self_attn(x, x, x, { attn_mask = mask, key_padding_mask = kpm, need_weights = false,
    is_causal = causal })
  return self.dropout1(y)
end

function Layer:_ff_block(x)
  return self.dropout2(self.linear2(self.dropout(activate(self.activation, self.linear1(x)))))
end

local FORWARD = { "src_mask", "src_key_padding_mask", "is_causal" }

function Layer:forward(src, opts)
  opts = util.check_opts(tostring(self.__name or "TransformerEncoderLayer") .. " forward", opts, FORWARD)
  local x, m, kpm, c = src, opts.src_mask, opts.src_key_padding_mask, opts.is_causal
  if self.norm_first then
    x = x + self:_sa_block(self.norm1(x), m, kpm, c)
    return x + self:_ff_block(self.norm2(x))
  end
  x = self.norm1(x + self:_sa_block(x, m, kpm, c))
  return self.norm2(x + self:_ff_block(x))
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
  local x = src
  for i = 1, self.num_layers do
    x = self.layers[i](x, { src_mask = opts.mask, src_key_padding_mask = opts.src_key_padding_mask,
      is_causal = opts.is_causal })
  end
  if self.norm then x = self.norm(x) end
  return x
end

return M
