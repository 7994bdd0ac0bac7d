-- nn.TransformerDecoderLayer, nn.TransformerDecoder and nn.Transformer with PyTorch 1.13's structure, parameter
-- names (self_attn.*, multihead_attn.*, linear1, linear2, norm1..3; layers.0...., norm; encoder.*, decoder.*) and
-- order of operations, so their state_dicts load:
--
--   nn.TransformerDecoderLayer(d_model, nhead [, dim_feedforward [, dropout [, activation ...]]] [,
--       {dim_feedforward=2048, dropout=0.1, activation="relu"|"gelu"|function, layer_norm_eps=1e-5,
--        batch_first=false, norm_first=false, device=, dtype=}])
--   layer(tgt, memory [, {tgt_mask=, memory_mask=, tgt_key_padding_mask=, memory_key_padding_mask=,
--        tgt_is_causal=, memory_is_causal=}])
--   nn.TransformerDecoder(layer, num_layers [, {norm=}])   -- num_layers copies of layer
--   decoder(tgt, memory [, the layer's options])
--   nn.Transformer([d_model=512 [, nhead=8 [, num_encoder_layers=6 [, num_decoder_layers=6 [, dim_feedforward=2048
--       [, dropout=0.1 [, activation ...]]]]]]] [, {..., custom_encoder=, custom_decoder=, layer_norm_eps=,
--        batch_first=, norm_first=, device=, dtype=}])   -- every weight matrix xavier-uniform, as PyTorch's
--   transformer(src, tgt [, {src_mask=, tgt_mask=, memory_mask=, src_key_padding_mask=, tgt_key_padding_mask=,
--        memory_key_padding_mask=}])
--   nn.Transformer.generate_square_subsequent_mask(sz): float [sz, sz], -inf above the diagonal, 0 elsewhere
--
-- Masks follow nn.MultiheadAttention's convention (true masks a position out; float masks are added). Attention
-- runs through the fused scaled_dot_product_attention (need_weights=false, as PyTorch's layers ask).
local ddp = require "ddplua"
local Module = require "ddplua.nn.module"
local Linear = require "ddplua.nn.linear"
local LayerNorm = require "ddplua.nn.layernorm"
local Dropout = require "ddplua.nn.dropout"
local MHA = require "ddplua.nn.attention"
local transformer = require "ddplua.nn.transformer"
local init = require "ddplua.nn.initializers"
local util = require "ddplua.nn.util"
local E = require "ddplua.errors"

local M = { modules = {}, F = {} }

local LAYER_OPTIONS = { "dim_feedforward", "dropout", "activation", "layer_norm_eps", "batch_first", "norm_first",
  "device", "dtype" }

local function check_activation(who, act)
  if act ~= "relu" and act ~= "gelu" and type(act) ~= "function" then
    E.raise(string.format("%s: activation should be \"relu\", \"gelu\" or a function, got %s", who, tostring(act)))
  end
  return act
end

local function activate(act, x)
  if act == "relu" then return x:relu() elseif act == "gelu" then return x:gelu() end
  return act(x)
end

-- ---- TransformerDecoderLayer ----
local Layer = Module:extend("TransformerDecoderLayer")
M.modules.TransformerDecoderLayer = Layer

function Layer:__init(d_model, nhead, ...)
  local o = util.args("TransformerDecoderLayer", LAYER_OPTIONS, ...)
  local dff = o.dim_feedforward or 2048
  local p = o.dropout == nil and 0.1 or o.dropout
  local eps = o.layer_norm_eps or 1e-5
  local dev = { dtype = o.dtype, device = o.device }
  local mha = { dropout = p, batch_first = o.batch_first == true, dtype = o.dtype, device = o.device }
  self.self_attn = MHA(d_model, nhead, mha)
  self.multihead_attn = MHA(d_model, nhead, mha)
  self.linear1 = Linear(d_model, dff, dev)
  self.dropout = Dropout(p)
  self.linear2 = Linear(dff, d_model, dev)
  self.norm_first = o.norm_first == true
  for i = 1, 3 do
    self["norm" .. i] = LayerNorm(d_model, { eps = eps, dtype = o.dtype, device = o.device })
  end
  for i = 1, 3 do self["dropout" .. i] = Dropout(p) end
  self.activation = check_activation("TransformerDecoderLayer", o.activation or "relu")
  self.batch_first = o.batch_first == true
end

function Layer:_sa_block(x, mask, kpm, causal)
  return self.dropout1(self.self_attn(x, x, x, { attn_mask = mask, key_padding_mask = kpm, need_weights = false,
    is_causal = causal }))
end

function Layer:_mha_block(x, mem, mask, kpm, causal)
  return self.dropout2(self.multihead_attn(x, mem, mem, { attn_mask = mask, key_padding_mask = kpm,
    need_weights = false, is_causal = causal }))
end

function Layer:_ff_block(x)
  return self.dropout3(self.linear2(self.dropout(activate(self.activation, self.linear1(x)))))
end

local FORWARD = { "tgt_mask", "memory_mask", "tgt_key_padding_mask", "memory_key_padding_mask", "tgt_is_causal",
  "memory_is_causal" }

function Layer:forward(tgt, memory, opts)
  opts = util.check_opts(tostring(self) .. " forward", opts, FORWARD)
  if not ddp.is_tensor(tgt) or not ddp.is_tensor(memory) then
    E.raise(string.format("%s: expected tensors tgt and memory, got %s and %s", tostring(self), type(tgt),
      type(memory)))
  end
  local o, x = opts, tgt
  if self.norm_first then
    x = x + self:_sa_block(self.norm1(x), o.tgt_mask, o.tgt_key_padding_mask, o.tgt_is_causal)
    x = x + self:_mha_block(self.norm2(x), memory, o.memory_mask, o.memory_key_padding_mask, o.memory_is_causal)
    return x + self:_ff_block(self.norm3(x))
  end
  x = self.norm1(x + self:_sa_block(x, o.tgt_mask, o.tgt_key_padding_mask, o.tgt_is_causal))
  x = self.norm2(x + self:_mha_block(x, memory, o.memory_mask, o.memory_key_padding_mask, o.memory_is_causal))
  return self.norm3(x + self:_ff_block(x))
end

function Layer:extra_repr() return "" end

-- ---- TransformerDecoder ----
local Decoder = Module:extend("TransformerDecoder")
M.modules.TransformerDecoder = Decoder

function Decoder:__init(layer, num_layers, opts)
  if not Module.is_module(layer) then
    E.raise("TransformerDecoder: decoder_layer must be a module (nn.TransformerDecoderLayer), got " .. type(layer))
  end
  if type(opts) ~= "table" and opts ~= nil then opts = { norm = opts } end -- PyTorch's positional norm
  opts = util.check_opts("TransformerDecoder", opts, { "norm" })
  self.num_layers = util.check_int("TransformerDecoder", "num_layers", num_layers)
  transformer.check_copies("TransformerDecoder", layer, num_layers)
  local layers = {}
  for i = 1, num_layers do layers[i] = transformer.deepcopy(layer) end
  self.layers = require("ddplua.nn.container").ModuleList(layers) -- children named 0, 1, ... as PyTorch's
  self.norm = opts.norm
end

function Decoder:forward(tgt, memory, opts)
  opts = util.check_opts("TransformerDecoder forward", opts, FORWARD)
  local x = tgt
  for i = 1, self.num_layers do x = self.layers[i](x, memory, opts) end
  if self.norm then x = self.norm(x) end
  return x
end

-- ---- Transformer ----
local Transformer = Module:extend("Transformer")
M.modules.Transformer = Transformer

local TRANSFORMER_OPTIONS = { "d_model", "nhead", "num_encoder_layers", "num_decoder_layers", "dim_feedforward",
  "dropout", "activation", "custom_encoder", "custom_decoder", "layer_norm_eps", "batch_first", "norm_first", "device",
  "dtype" }

function Transformer:__init(...)
  local o = util.args("Transformer", TRANSFORMER_OPTIONS, ...)
  local d = util.check_int("Transformer", "d_model", o.d_model or 512)
  local nhead = util.check_int("Transformer", "nhead", o.nhead or 8)
  local layer_opts = { dim_feedforward = o.dim_feedforward or 2048, dropout = o.dropout == nil and 0.1 or o.dropout,
    activation = o.activation or "relu", layer_norm_eps = o.layer_norm_eps or 1e-5, batch_first = o.batch_first,
    norm_first = o.norm_first, device = o.device, dtype = o.dtype }
  local norm_opts = { eps = layer_opts.layer_norm_eps, device = o.device, dtype = o.dtype }
  self.encoder = o.custom_encoder or transformer.TransformerEncoder(transformer.TransformerEncoderLayer(d, nhead,
    layer_opts), o.num_encoder_layers or 6, { norm = LayerNorm(d, norm_opts) })
  self.decoder = o.custom_decoder or Decoder(Layer(d, nhead, layer_opts), o.num_decoder_layers or 6,
    { norm = LayerNorm(d, norm_opts) })
  self.d_model, self.nhead, self.batch_first = d, nhead, o.batch_first == true
  -- PyTorch's _reset_parameters: every parameter of more than one dim xavier-uniform
  for _, p in ipairs(self:parameters()) do
    if p:dim() > 1 then init.xavier_uniform_(p) end
  end
end

local T_FORWARD = { "src_mask", "tgt_mask", "memory_mask", "src_key_padding_mask", "tgt_key_padding_mask",
  "memory_key_padding_mask" }

function Transformer:forward(src, tgt, opts)
  opts = util.check_opts("Transformer forward", opts, T_FORWARD)
  if not ddp.is_tensor(src) or not ddp.is_tensor(tgt) then
    E.raise(string.format("Transformer: expected tensors src and tgt, got %s and %s", type(src), type(tgt)))
  end
  local batched = src:dim() == 3
  local bdim = self.batch_first and 1 or 2
  if batched and tgt:dim() == 3 and src:size(bdim) ~= tgt:size(bdim) then
    E.raise(string.format("Transformer: the batch number of src (%d) and tgt (%d) must be equal", src:size(bdim),
      tgt:size(bdim)))
  end
  if src:size(-1) ~= self.d_model or tgt:size(-1) ~= self.d_model then
    E.raise(string.format("Transformer: the feature number of src and tgt must be equal to d_model (%d), got %d and %d",
      self.d_model, src:size(-1), tgt:size(-1)))
  end
  local memory = self.encoder(src, { mask = opts.src_mask, src_key_padding_mask = opts.src_key_padding_mask })
  return self.decoder(tgt, memory, { tgt_mask = opts.tgt_mask, memory_mask = opts.memory_mask,
    tgt_key_padding_mask = opts.tgt_key_padding_mask, memory_key_padding_mask = opts.memory_key_padding_mask })
end

--- nn.Transformer.generate_square_subsequent_mask(sz [, {device=, dtype=}]): -inf above the diagonal, 0 elsewhere.
function Transformer.generate_square_subsequent_mask(sz, opts)
  util.check_int("generate_square_subsequent_mask", "sz", sz, true)
  opts = util.check_opts("generate_square_subsequent_mask", opts, { "device", "dtype" })
  return ddp.full({ sz, sz }, -math.huge, { dtype = opts.dtype or "float32", device = opts.device }):triu(1)
end

return M
