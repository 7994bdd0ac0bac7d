-- nn.MultiheadAttention(embed_dim, num_heads [, dropout [, bias ...]] [, {dropout=0, bias=true, batch_first=false,
-- dtype=, device=}]) (positional settings, then the rest by name) with PyTorch's parameters (in_proj_weight [3E, E],
-- xavier-uniform; in_proj_bias [3E], zero; out_proj.weight, out_proj.bias, zero), so its state_dicts load:
--
--   out, weights = mha(query, key, value [, {key_padding_mask=, need_weights=true, attn_mask=,
--                                            average_attn_weights=true, is_causal=false}])
--
-- query [L, N, E] ([N, L, E] with batch_first, [L, E] unbatched), key and value [S, N, E]. attn_mask [L, S] or
-- [N * heads, L, S] and key_padding_mask [N, S] follow PyTorch's MHA convention: true (nonzero) masks a
-- position out; float masks are added. With need_weights=false the heads run through the fused
-- scaled_dot_product_attention (no [L, S] matrix) and weights is nil; with need_weights=true (PyTorch's
-- default) the scores are made explicitly to return the weights (averaged over heads unless
-- average_attn_weights=false). is_causal without attn_mask applies the causal mask (with one, attn_mask is
-- used, as PyTorch's hint). kdim / vdim different from embed_dim, add_bias_kv and add_zero_attn are not
-- supported (errors say so).
local ddp = require "ddplua"
local Module = require "ddplua.nn.module"
local Linear = require "ddplua.nn.linear"
local util = require "ddplua.nn.util"
local init = require "ddplua.nn.initializers"
local F = require "ddplua.nn.functional"

local MHA = Module:extend("MultiheadAttention")

local OPTIONS = { "dropout", "bias", "add_bias_kv", "add_zero_attn", "kdim", "vdim", "batch_first", "dtype", "device" }

function MHA:__init(embed_dim, num_heads, ...)
  local o = util.args("MultiheadAttention", OPTIONS, ...) -- positional settings, then the rest by name
  self.embed_dim = util.check_int("MultiheadAttention", "embed_dim", embed_dim)
  self.num_heads = util.check_int("MultiheadAttention", "num_heads", num_heads)
  if embed_dim % num_heads ~= 0 then
    error(string.format("MultiheadAttention: embed_dim (%d) must be divisible by num_heads (%d)", embed_dim,
      num_heads), 3)
  end
  for _, k in ipairs({ "kdim", "vdim" }) do
    if o[k] ~= nil and o[k] ~= embed_dim then
      error(string.format("MultiheadAttention: %s different from embed_dim is not supported", k), 3)
    end
  end
  for _, k in ipairs({ "add_bias_kv", "add_zero_attn" }) do
    if o[k] then error("MultiheadAttention: " .. k .. "=true is not supported", 3) end
  end
  if embed_dim > (1 << 59) // 3 then -- 3 * embed_dim would wrap around before any shape check saw it
    error(string.format("MultiheadAttention: embed_dim %d is too large: in_proj_weight is [3 * embed_dim, embed_dim]",
      embed_dim), 3)
  end
  self.head_dim = embed_dim // num_heads
  self.dropout = o.dropout or 0
  if type(self.dropout) ~= "number" or self.dropout < 0 or self.dropout >= 1 then
    error("MultiheadAttention: dropout must be a number in [0, 1), got " .. tostring(o.dropout), 3)
  end
  self.batch_first = o.batch_first == true
  local bias = o.bias ~= false
  local topts = util.tensor_opts(o)
  local E = embed_dim
  local bound = math.sqrt(6 / (E + 3 * E)) -- xavier_uniform_ on [3E, E]
  self:register_parameter("in_proj_weight", util.parameter(function()
    return init.uniform_(ddp.empty(3 * E, E, topts), -bound, bound)
  end))
  self:register_parameter("in_proj_bias", bias and util.parameter(function() return ddp.zeros(3 * E, topts) end) or nil)
  self.out_proj = Linear(E, E, { bias = bias, dtype = o.dtype, device = o.device })
  if bias then ddp.no_grad(function() self.out_proj.bias:zero_() end) end
end

local FORWARD_OPTIONS = { "key_padding_mask", "need_weights", "attn_mask", "average_attn_weights", "is_causal" }

-- the masks in sdpa's convention, as one mask broadcastable to [N, H, L, S]
-- (bool: nonzero takes part; float: added), or nil
local function merged_mask(self, attn_mask, kpm, N, L, S, dt)
  local H = self.num_heads
  local parts = {}
  if attn_mask then
    if attn_mask:dim() == 2 then attn_mask = attn_mask:view(1, 1, L, S)
    elseif attn_mask:dim() == 3 then attn_mask = attn_mask:view(N, H, L, S)
    else error(string.format("%s: attn_mask must be [L, S] or [N * num_heads, L, S], got %s", tostring(self),
      util.shape_str(attn_mask)), 4) end
    parts[#parts + 1] = attn_mask
  end
  if kpm then
    if kpm:dim() ~= 2 or kpm:size(1) ~= N or kpm:size(2) ~= S then
      error(string.format("%s: key_padding_mask must be [%d, %d], got %s", tostring(self), N, S, util.shape_str(kpm)), 4)
    end
    parts[#parts + 1] = kpm:view(N, 1, 1, S)
  end
  if #parts == 0 then return nil end
  local all_bool = true
  for _, p in ipairs(parts) do all_bool = all_bool and p:dtype() == "uint8" end
  if all_bool then
    local keep = parts[1]:eq(0)
    for i = 2, #parts do keep = keep:byte() * parts[i]:eq(0) end
    return keep:byte()
  end
  local m
  for _, p in ipairs(parts) do
    local f = p:dtype() == "uint8" and ddp.zeros(p:size(), { dtype = dt, device = p:device() }):masked_fill(p, -math.huge)
      or p:to(dt)
    m = m and m + f or f
  end
  return m
end

function MHA:forward(query, key, value, opts)
  opts = util.check_opts(tostring(self) .. " forward", opts, FORWARD_OPTIONS)
  local E, H, hd = self.embed_dim, self.num_heads, self.head_dim
  key, value = key or query, value or key or query
  local unbatched = query:dim() == 2
  if unbatched then
    query, key, value = query:unsqueeze(2), key:unsqueeze(2), value:unsqueeze(2)
  elseif self.batch_first then -- the computation below is in PyTorch's [L, N, E]
    query, key, value = query:transpose(1, 2), key:transpose(1, 2), value:transpose(1, 2)
  end
  if query:dim() ~= 3 or query:size(3) ~= E or key:size(3) ~= E or value:size(3) ~= E then
    error(string.format("%s: expected query, key and value with %d features, got %s, %s and %s", tostring(self), E,
      util.shape_str(query), util.shape_str(key), util.shape_str(value)), 2)
  end
  local L, N, S = query:size(1), query:size(2), key:size(1)
  local kpm = opts.key_padding_mask
  if kpm and unbatched then kpm = kpm:unsqueeze(1) end
  -- when this module and its children are the library's, each intermediate below goes once read (util.release:
  -- the collector would hold it, and its storage, past backward; a view holds its base's)
  local free = util.is_library(self)
  local w, b = self.in_proj_weight, self.in_proj_bias
  local q, k, v, qkv
  -- self-attention in the [L, N, E] form the caller passed: one GEMM for the three projections. The batch_first and
  -- unbatched forms reach here with three views (distinct tensors), so they run three projections: made to take
  -- the one GEMM (2026-12-07), MultiheadAttention 256/8 [32, 64] forward + backward measured 33.1-34.1 ms against
  -- 29.2-30.7 (bench/module_survey.lua first=15 last=15, alternated three times): the fused attention reads the
  -- split's strided views slower than three contiguous projections
  if key == query and value == query then
    qkv = ddp.linear(query, w, b)
    q, k, v = qkv:split(E, 3)
  else
    local wq, wk, wv = w:split(E, 1)
    local bq, bk, bv
    if b then bq, bk, bv = b:split(E, 1) end
    q, k, v = ddp.linear(query, wq, bq), ddp.linear(key, wk, bk), ddp.linear(value, wv, bv)
  end
  -- [T, N, E] -> [N, H, T, hd]: strided views, which the fused op reads as they are
  local function heads(t, T)
    local t4 = t:view(T, N, H, hd)
    local h = t4:permute(2, 3, 1, 4)
    util.release(free, t4, h)
    util.release(free, t, h)
    return h
  end
  q, k, v = heads(q, L), heads(k, S), heads(v, S)
  util.release(free, qkv, q, k, v)
  local mask = merged_mask(self, opts.attn_mask, kpm, N, L, S, query:dtype())
  local causal = opts.is_causal == true and mask == nil
  local p = self.training and self.dropout or 0
  local out, weights
  if opts.need_weights == false then
    out = F.scaled_dot_product_attention(q, k, v, { attn_mask = mask, is_causal = causal, dropout_p = p })
  else
    local s = q:matmul(k:transpose(3, 4)) * (1 / math.sqrt(hd))
    if causal then mask = ddp.ones(L, S, { device = query:device() }):tril():byte() end
    if mask and mask:dtype() == "uint8" then s = s:masked_fill(mask:eq(0), -math.huge) elseif mask then s = s + mask end
    weights = s:softmax(4)
    if p > 0 then weights = ddp.dropout(weights, p, true) end
    out = weights:matmul(v)
    if opts.average_attn_weights ~= false then weights = weights:mean(2) end
    if unbatched then weights = weights:squeeze(1) end
  end
  util.release(free, q, out, weights)
  util.release(free, k, out, weights, q)
  util.release(free, v, out, weights, q, k)
  -- the heads merged, projected
  local perm = out:permute(3, 1, 2, 4)
  local merged = perm:reshape(L, N, E)
  util.release(free, perm, merged)
  util.release(free, out, merged)
  out = self.out_proj(merged)
  util.release(free, merged, out)
  if unbatched or self.batch_first then
    local made = unbatched and out:squeeze(2) or out:transpose(1, 2)
    util.release(free, out, made)
    out = made
    -- the views of the caller's query, key and value made above (each would hold its storage)
    util.release(free, query, out)
    util.release(free, key, query, out)
    util.release(free, value, query, key, out)
  end
  return out, weights
end

function MHA:extra_repr()
  return string.format("embed_dim=%d, num_heads=%d%s", self.embed_dim, self.num_heads,
    self.batch_first and ", batch_first=True" or "")
end

return MHA
