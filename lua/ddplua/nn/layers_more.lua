-- PyTorch's smaller layers and functions that ported code calls, composed from the tensor ops (autograd runs
-- through the composition). Dims are 1-based (negative from the end), so PyTorch's default dim=1 is 2 here:
--
--   nn.Softmax(dim) nn.LogSoftmax(dim) nn.Softmin(dim), F.softmin(x, dim): without a dim, PyTorch's legacy choice
--     (the first dim of a 0-, 1- or 3-D input, else the second) with its deprecation warning.
--   nn.GLU(dim = -1), F.glu(x, dim = -1): a * sigmoid(b) of the two halves along dim.
--   nn.PReLU(num_parameters = 1, init = 0.25), F.prelu(x, weight): max(0, x) + weight * min(0, x), one weight or one
--     per channel (dim 2).
--   nn.Unflatten(dim, sizes): dim reshaped into sizes (one may be -1).
--   nn.CosineSimilarity(dim = 2, eps = 1e-8), F.cosine_similarity(x1, x2, dim = 2, eps = 1e-8): PyTorch 1.13's
--     formula: each input divided by its norm, the squared norm clamped at eps^2 out of the graph, then the sum of
--     the products; inputs broadcast.
--   nn.PairwiseDistance(p = 2, eps = 1e-6, keepdim = false), F.pairwise_distance(x1, x2, p, eps, keepdim): the p-norm
--     of x1 - x2 + eps over the last dim.
--   F.normalize(x, p = 2, dim = 2, eps = 1e-12): x / max(norm_p(x, dim), eps).
--   F.one_hot(idx, num_classes = -1): int64 class positions, 1-based as every class index here (cross_entropy's
--     targets), to int64 rows [..., num_classes] with a 1 at each position; -1 takes the largest position.
--   nn.EmbeddingBag(num_embeddings, dim [, ..., mode = "mean", ..., include_last_offset, padding_idx]),
--     bag(input [, offsets [, per_sample_weights]]), F.embedding_bag(input, weight, offsets, ...): each bag's rows
--     summed, averaged or maxed ("sum", "mean", "max"); a 2-D input is a bag a row, a 1-D one is cut at offsets,
--     1-based starts (the first is 1; PyTorch's are 0-based); padding_idx rows left out; an empty bag gives zeros.
--   nn.Parameter(t [, requires_grad = true]): t's storage as a leaf that requires grad (a module registers any
--     leaf that requires grad as a parameter when assigned, so this is PyTorch's spelling of that).
-- Every setting also by name in an options table after the positional ones (nn.Softmax({dim = 2})).
local ddp = require "ddplua"
local Module = require "ddplua.nn.module"
local util = require "ddplua.nn.util"
local E = require "ddplua.errors"

local M = { modules = {}, F = {} }
local F = M.F

local function list_str(t)
  local parts = {}
  for i, v in ipairs(t) do parts[i] = tostring(v) end
  return "[" .. table.concat(parts, ", ") .. "]"
end

local function check_tensor(who, what, x)
  if not ddp.is_tensor(x) then E.raise(string.format("%s: expected a tensor %s, got %s", who, what, type(x))) end
end

local function check_dim(who, dim, x)
  local nd = math.max(x:dim(), 1)
  if math.type(dim) ~= "integer" or dim == 0 or dim > nd or dim < -nd then
    E.raise(string.format("%s: dim must be an integer in 1..%d or -%d..-1 for an input of shape %s, got %s", who, nd,
      nd, util.shape_str(x), tostring(dim)))
  end
  return dim < 0 and dim + nd + 1 or dim
end

local function check_number(who, what, v, positive)
  if type(v) ~= "number" or v ~= v or (positive and not (v > 0)) then
    E.raise(string.format("%s: %s must be a %snumber, got %s", who, what, positive and "positive " or "", tostring(v)))
  end
end

-- ---- softmax modules -----------------------------------------------------------------------------------------

local warned = false
-- PyTorch's _get_softmax_dim (1-based): the first dim of a 0-, 1- or 3-D input, else the second, with its warning
local function implicit_dim(who, x)
  local nd = x:dim()
  local d = (nd == 0 or nd == 1 or nd == 3) and 1 or 2
  if not warned then
    warned = true
    io.stderr:write(string.format("ddplua: warning: %s: implicit dimension choice for softmax has been deprecated " ..
      "(as in PyTorch); give the dim, e.g. dim=%d\n", who, d))
  end
  return d
end

local function softmax_module(name, fn)
  local cls = Module:extend(name)
  function cls:__init(...)
    local o = util.args(name, { "dim" }, ...)
    if o.dim ~= nil and (math.type(o.dim) ~= "integer" or o.dim == 0) then
      E.raise(string.format("%s: dim must be a nonzero integer (1-based; negative from the end) or nil, got %s", name,
        tostring(o.dim)))
    end
    self.dim = o.dim
  end
  function cls:forward(x)
    check_tensor(tostring(self), "input", x)
    return fn(x, self.dim or implicit_dim(tostring(self), x))
  end
  function cls:extra_repr() return self.dim and string.format("dim=%d", self.dim) or "dim=None" end
  M.modules[name] = cls
end

--- F.softmin(x, dim): softmax of -x.
function F.softmin(x, dim)
  check_tensor("softmin", "input", x)
  return ddp.softmax(-x, dim or implicit_dim("softmin", x))
end

softmax_module("Softmax", function(x, d) return ddp.softmax(x, d) end)
softmax_module("LogSoftmax", function(x, d) return ddp.log_softmax(x, d) end)
softmax_module("Softmin", F.softmin)

-- ---- GLU, PReLU ----------------------------------------------------------------------------------------------

local function glu(who, x, dim)
  check_tensor(who, "input", x)
  if x:dim() == 0 then E.raise(who .. ": glu does not support 0-dimensional (scalar) tensors") end
  local d = check_dim(who, dim == nil and -1 or dim, x)
  if x:size(d) % 2 ~= 0 then
    E.raise(string.format("%s: halving dimension must be even, but dimension %d of shape %s is size %d", who, d,
      util.shape_str(x), x:size(d)))
  end
  local a, b = x:chunk(2, d)
  return a * b:sigmoid()
end

--- F.glu(x, dim = -1)
function F.glu(x, dim) return glu("glu", x, dim) end

local GLU = Module:extend("GLU")
function GLU:__init(...) self.dim = util.args("GLU", { "dim" }, ...).dim or -1 end
function GLU:forward(x) return glu(tostring(self), x, self.dim) end
function GLU:extra_repr() return string.format("dim=%d", self.dim) end
M.modules.GLU = GLU

local function prelu(who, x, w)
  check_tensor(who, "input", x)
  check_tensor(who, "weight", w)
  local C = w:numel()
  if w:dim() > 1 then
    E.raise(string.format("%s: weight must be 1-D (or a scalar), got shape %s", who, util.shape_str(w)))
  end
  if C ~= 1 then
    local channels = x:dim() >= 2 and x:size(2) or 1
    if channels ~= C then
      E.raise(string.format("%s: mismatch of parameter numbers and input channel size: %d weights for an input of " ..
        "shape %s (%d channels, dim 2)", who, C, util.shape_str(x), channels))
    end
    local shape = { C }
    for d = 3, x:dim() do shape[d - 1] = 1 end
    w = w:view(shape)
  elseif w:dim() == 1 then
    w = w:view({}) -- one weight for every element
  end
  -- max(0, x) + w min(0, x): PyTorch's values, its gradients at 0 (w * gy for x, 0 for w) and no 0 * inf
  return x:relu() + w * x:clamp_max(0)
end

--- F.prelu(x, weight)
function F.prelu(x, weight) return prelu("prelu", x, weight) end

local PReLU = Module:extend("PReLU")
function PReLU:__init(...)
  local o = util.args("PReLU", { "num_parameters", "init", "device", "dtype" }, ...)
  self.num_parameters = util.check_int("PReLU", "num_parameters", o.num_parameters or 1)
  local init = o.init == nil and 0.25 or o.init
  check_number("PReLU", "init", init)
  self:register_parameter("weight", util.parameter(function()
    return ddp.full({ self.num_parameters }, init, util.tensor_opts(o))
  end))
end
function PReLU:forward(x) return prelu(tostring(self), x, self.weight) end
function PReLU:extra_repr() return string.format("num_parameters=%d", self.num_parameters) end
M.modules.PReLU = PReLU

-- ---- Unflatten -----------------------------------------------------------------------------------------------

local Unflatten = Module:extend("Unflatten")
function Unflatten:__init(dim, sizes)
  if math.type(dim) ~= "integer" or dim == 0 then
    E.raise("Unflatten: dim must be a nonzero integer (1-based; negative from the end), got " .. tostring(dim))
  end
  if type(sizes) ~= "table" or #sizes == 0 then
    E.raise("Unflatten: unflattened_size must be a non-empty list of sizes, got " .. tostring(sizes))
  end
  local free = 0
  for i, s in ipairs(sizes) do
    if math.type(s) ~= "integer" or s < -1 then
      E.raise(string.format("Unflatten: size %d of unflattened_size must be an integer >= 0 or -1, got %s", i,
        tostring(s)))
    end
    if s == -1 then free = free + 1 end
  end
  if free > 1 then E.raise("Unflatten: only one size of unflattened_size can be -1") end
  self.dim, self.unflattened_size = dim, { table.unpack(sizes) }
end
function Unflatten:forward(x)
  local who = tostring(self)
  check_tensor(who, "input", x)
  local d = check_dim(who, self.dim, x)
  local shape, known, free = {}, 1, false
  for _, s in ipairs(self.unflattened_size) do
    if s == -1 then free = true else known = known * s end
  end
  local n = x:size(d)
  if (free and (known == 0 or n % known ~= 0)) or (not free and known ~= n) then
    E.raise(string.format("%s: unflattened_size %s does not multiply to the size %d of dim %d of the input %s", who,
      list_str(self.unflattened_size), n, d, util.shape_str(x)))
  end
  for i = 1, d - 1 do shape[#shape + 1] = x:size(i) end
  for _, s in ipairs(self.unflattened_size) do shape[#shape + 1] = s == -1 and n // known or s end
  for i = d + 1, x:dim() do shape[#shape + 1] = x:size(i) end
  return x:reshape(shape)
end
function Unflatten:extra_repr()
  return string.format("dim=%d, unflattened_size=%s", self.dim, list_str(self.unflattened_size))
end
M.modules.Unflatten = Unflatten

-- ---- similarities and distances ------------------------------------------------------------------------------

local function cosine_similarity(who, x1, x2, dim, eps)
  check_tensor(who, "x1", x1)
  check_tensor(who, "x2", x2)
  check_number(who, "eps", eps)
  local function unit(x)
    local sq = (x * x):sum(dim, true)
    ddp.no_grad(function() sq:copy_(sq:clamp_min(eps * eps)) end) -- clamped out of the graph, as PyTorch 1.13
    return x / sq:sqrt()
  end
  return (unit(x1) * unit(x2)):sum(dim)
end

--- F.cosine_similarity(x1, x2, dim = 2, eps = 1e-8)
function F.cosine_similarity(x1, x2, ...)
  local o = util.args("cosine_similarity", { "dim", "eps" }, ...)
  return cosine_similarity("cosine_similarity", x1, x2, o.dim or 2, o.eps or 1e-8)
end

local CosineSimilarity = Module:extend("CosineSimilarity")
function CosineSimilarity:__init(...)
  local o = util.args("CosineSimilarity", { "dim", "eps" }, ...)
  self.dim, self.eps = o.dim or 2, o.eps or 1e-8
  check_number("CosineSimilarity", "eps", self.eps)
end
function CosineSimilarity:forward(x1, x2) return cosine_similarity(tostring(self), x1, x2, self.dim, self.eps) end
function CosineSimilarity:extra_repr() return string.format("dim=%d, eps=%g", self.dim, self.eps) end
M.modules.CosineSimilarity = CosineSimilarity

local function pairwise_distance(who, x1, x2, p, eps, keepdim)
  check_tensor(who, "x1", x1)
  check_tensor(who, "x2", x2)
  check_number(who, "p", p)
  check_number(who, "eps", eps)
  local d = math.max(x1:dim(), x2:dim())
  if d == 0 then E.raise(who .. ": expected inputs of at least 1 dimension, got 0-dimensional tensors") end
  return (x1 - x2 + eps):norm(p, d, keepdim == true)
end

--- F.pairwise_distance(x1, x2, p = 2, eps = 1e-6, keepdim = false)
function F.pairwise_distance(x1, x2, ...)
  local o = util.args("pairwise_distance", { "p", "eps", "keepdim" }, ...)
  return pairwise_distance("pairwise_distance", x1, x2, o.p or 2, o.eps or 1e-6, o.keepdim)
end

local PairwiseDistance = Module:extend("PairwiseDistance")
function PairwiseDistance:__init(...)
  local o = util.args("PairwiseDistance", { "p", "eps", "keepdim" }, ...)
  self.norm, self.eps, self.keepdim = o.p or 2, o.eps or 1e-6, o.keepdim == true
  check_number("PairwiseDistance", "p", self.norm)
  check_number("PairwiseDistance", "eps", self.eps)
end
function PairwiseDistance:forward(x1, x2)
  return pairwise_distance(tostring(self), x1, x2, self.norm, self.eps, self.keepdim)
end
M.modules.PairwiseDistance = PairwiseDistance

--- F.normalize(x, p = 2, dim = 2, eps = 1e-12)
function F.normalize(x, ...)
  local o = util.args("normalize", { "p", "dim", "eps" }, ...)
  check_tensor("normalize", "input", x)
  local p, eps = o.p or 2, o.eps or 1e-12
  check_number("normalize", "p", p)
  check_number("normalize", "eps", eps)
  local d = check_dim("normalize", o.dim or 2, x)
  return x / x:norm(p, d, true):clamp_min(eps)
end

--- F.one_hot(idx, num_classes = -1): 1-based class positions to int64 one-hot rows.
function F.one_hot(idx, num_classes)
  check_tensor("one_hot", "input", idx)
  if idx:dtype() ~= "int64" then
    E.raise("one_hot: expected an int64 tensor of class positions, got " .. idx:dtype())
  end
  num_classes = num_classes == nil and -1 or num_classes
  if math.type(num_classes) ~= "integer" or num_classes < -1 then
    E.raise("one_hot: num_classes must be a non-negative integer or -1, got " .. tostring(num_classes))
  end
  local lo, hi = 1, 0
  if idx:numel() > 0 then lo, hi = idx:min():item(), idx:max():item() end
  if num_classes == -1 then
    if idx:numel() == 0 then E.raise("one_hot: can not infer the number of classes from an empty tensor") end
    num_classes = hi
  end
  if idx:numel() > 0 and (lo < 1 or hi > num_classes) then
    E.raise(string.format("one_hot: class positions must be in 1..%d (1-based), got %d..%d", num_classes, lo, hi))
  end
  local shape = idx:size()
  shape[#shape + 1] = num_classes
  local out = ddp.zeros(shape, { dtype = "int64", device = idx:device() })
  if idx:numel() == 0 or num_classes == 0 then return out end
  return out:scatter(#shape, idx:unsqueeze(-1), 1)
end

-- ---- EmbeddingBag --------------------------------------------------------------------------------------------

-- [n, d] zeros with the rows of src [N, d] added at the 1-based positions idx [N] (core.index_add: rows added in one
-- pass, with its gradient a gather; the tensor method elsewhere)
local function index_rows(n, d, idx, src, opts)
  local z = ddp.zeros(n, d, opts)
  if opts.device == "cpu" and (opts.dtype == "float32" or opts.dtype == "float64") then
    return ddp.core.index_add(z, 1, idx, src)
  end
  return z:index_add(1, idx, src)
end

-- bags: ids [B, N] (a bag a row, offsets nil) or ids [N] cut at offsets (1-based starts, the first 1; with
-- include_last_offset one more entry, N + 1); each bag reduced by mode over its rows of weight, padding_idx rows
-- left out (an empty bag gives zeros), per_sample_weights (ids' shape, mode "sum") scaling each row
local function embedding_bag(who, ids, weight, offsets, mode, per_sample_weights, include_last_offset, padding_idx)
  check_tensor(who, "input", ids)
  check_tensor(who, "weight", weight)
  if ids:dtype() ~= "int64" then E.raise(who .. ": expected an int64 tensor of ids, got " .. ids:dtype()) end
  if weight:dim() ~= 2 then
    E.raise(who .. ": weight must be 2-D [num_embeddings, dim], got " .. util.shape_str(weight))
  end
  mode = mode == nil and "mean" or mode
  if mode ~= "mean" and mode ~= "sum" and mode ~= "max" then
    E.raise(string.format("%s: mode must be \"mean\", \"sum\" or \"max\", got %s", who, tostring(mode)))
  end
  if per_sample_weights ~= nil then
    check_tensor(who, "per_sample_weights", per_sample_weights)
    if mode ~= "sum" then
      E.raise(string.format("%s: per_sample_weights are only supported with mode \"sum\", got mode \"%s\"", who, mode))
    end
    if table.concat(per_sample_weights:size(), ",") ~= table.concat(ids:size(), ",") then
      E.raise(string.format("%s: per_sample_weights of shape %s must have the input's shape %s", who,
        util.shape_str(per_sample_weights), util.shape_str(ids)))
    end
  end
  local N, B, starts = ids:numel(), nil, nil
  if ids:dim() == 2 then
    if offsets ~= nil then E.raise(who .. ": offsets must be nil for a 2-D input (each row is a bag)") end
    B = ids:size(1)
    starts = {}
    for b = 1, B do starts[b] = (b - 1) * ids:size(2) + 1 end
  elseif ids:dim() == 1 then
    check_tensor(who, "offsets", offsets)
    if offsets:dtype() ~= "int64" or offsets:dim() ~= 1 then
      E.raise(string.format("%s: offsets must be a 1-D int64 tensor, got %s of shape %s", who, offsets:dtype(),
        util.shape_str(offsets)))
    end
    starts = offsets:totable()
    if include_last_offset then
      if #starts == 0 then E.raise(who .. ": include_last_offset needs at least one offset") end
      starts[#starts] = nil
    end
    B = #starts
    for b = 1, B do
      local nxt = starts[b + 1] or N + 1
      if starts[b] < 1 or starts[b] > N + 1 or nxt < starts[b] or (b == 1 and starts[b] ~= 1) then
        E.raise(string.format("%s: offsets must be non-decreasing 1-based starts in 1..%d beginning at 1, got %d at " ..
          "position %d", who, N + 1, starts[b], b))
      end
    end
  else
    E.raise(who .. ": expected a 1-D (with offsets) or 2-D input, got shape " .. util.shape_str(ids))
  end
  local D = weight:size(2)
  local flat = ids:reshape(N)
  local rows = ddp.embedding(flat, weight) -- [N, D]
  local keep = padding_idx and flat:ne(padding_idx) or nil -- uint8 [N]
  local opts = { dtype = weight:dtype(), device = weight:device() }
  if B == 0 then return ddp.zeros(0, D, opts) end
  local scale = per_sample_weights and per_sample_weights:reshape(N, 1):to(weight:dtype()) or nil
  -- L: the longest bag; equal: every bag L rows (a 2-D input, or offsets in steps of L), then [B, L, D] is a view;
  -- otherwise bag_t: the bag (1-based) of each row (the count of starts at or before it)
  local L, equal, lengths, bag_t, st = nil, true, {}, nil, nil
  local iopts = { dtype = "int64", device = ids:device() }
  if ids:dim() == 2 then
    L = ids:size(2)
  else
    L = 0
    for b = 1, B do
      lengths[b] = (starts[b + 1] or N + 1) - starts[b]
      L, equal = math.max(L, lengths[b]), equal and (b == 1 or lengths[b] == L)
    end
  end
  if not equal then
    st = ddp.tensor(starts, iopts)
    bag_t = ddp.zeros(N + 1, iopts):scatter_add(1, st, ddp.ones(B, iopts)):narrow(1, 1, N):cumsum(1)
  end
  if mode == "max" then
    local inf = ddp.full({ 1, 1 }, -math.huge, opts)
    if keep then rows = ddp.where(keep:view(N, 1), rows, inf) end -- padding rows never win
    local padded = rows
    if not equal then
      if B * L > 4 * N + 4096 then -- bags too uneven to pad: each its own max
        local out = {}
        for b = 1, B do
          out[b] = lengths[b] > 0 and rows:narrow(1, starts[b], lengths[b]):max(1, true) or inf:expand(1, D)
        end
        local m = ddp.cat(out, 1)
        return ddp.where(m:eq(-math.huge), ddp.zeros(1, 1, opts), m)
      end
      -- the rows at their places in [B, L] (index_add: each place once); the places past a bag's length at -inf
      local pos = (bag_t - 1) * L + ddp.arange(1, N + 1, iopts) - st:index_select(1, bag_t) + 1
      local filled = ddp.arange(0, L, iopts):view(1, L):lt(ddp.tensor(lengths, iopts):view(B, 1)):view(B * L, 1)
      padded = ddp.where(filled, index_rows(B * L, D, pos, rows, opts), inf)
    end
    local m = L > 0 and (padded:view(B, L, D):max(2)) or inf:expand(B, D)
    return ddp.where(m:eq(-math.huge), ddp.zeros(1, 1, opts), m) -- an empty (or all-padding) bag: zeros
  end
  if keep then
    local k = keep:to(weight:dtype()):view(N, 1)
    scale = scale and scale * k or k
  end
  if scale then rows = rows * scale end
  local sum, count
  if equal then -- a sum along each bag
    sum = rows:view(B, L, D):sum(2)
    count = keep and keep:view(B, L):to(weight:dtype()):sum(2, true) or L
  else
    sum = index_rows(B, D, bag_t, rows, opts)
    if mode == "mean" then
      count = ddp.zeros(B, opts):index_add(1, bag_t, keep and keep:to(weight:dtype()) or ddp.ones(N, opts)):view(B, 1)
    end
  end
  if mode == "sum" then return sum end
  if type(count) == "number" then return sum / math.max(count, 1) end
  return sum / count:clamp_min(1)
end

--- F.embedding_bag(input, weight, offsets, max_norm, norm_type, scale_grad_by_freq, mode, sparse,
--- per_sample_weights, include_last_offset, padding_idx) (PyTorch's order), or an options table after weight
--- (and offsets).
local BAG_ARGS = { "offsets", "max_norm", "norm_type", "scale_grad_by_freq", "mode", "sparse", "per_sample_weights",
  "include_last_offset", "padding_idx" }
function F.embedding_bag(input, weight, ...)
  local o = util.args("embedding_bag", BAG_ARGS, ...)
  util.unsupported("embedding_bag", "max_norm", o.max_norm, nil, "rows are never renormalised")
  util.unsupported("embedding_bag", "scale_grad_by_freq", o.scale_grad_by_freq, false, "gradients are not rescaled")
  util.unsupported("embedding_bag", "sparse", o.sparse, false, "gradients are dense")
  return embedding_bag("embedding_bag", input, weight, o.offsets, o.mode, o.per_sample_weights,
    o.include_last_offset, o.padding_idx)
end

local EmbeddingBag = Module:extend("EmbeddingBag")
function EmbeddingBag:__init(num_embeddings, embedding_dim, ...)
  local who = "EmbeddingBag"
  local o = util.args(who, { "max_norm", "norm_type", "scale_grad_by_freq", "mode", "sparse", "_weight",
    "include_last_offset", "padding_idx", "device", "dtype" }, ...)
  util.unsupported(who, "max_norm", o.max_norm, nil, "rows are never renormalised")
  util.unsupported(who, "scale_grad_by_freq", o.scale_grad_by_freq, false, "gradients are not rescaled")
  util.unsupported(who, "sparse", o.sparse, false, "gradients are dense")
  util.unsupported(who, "_weight", o._weight, nil, "assign m.weight after construction")
  self.num_embeddings = util.check_int(who, "num_embeddings", num_embeddings)
  self.embedding_dim = util.check_int(who, "embedding_dim", embedding_dim)
  self.mode = o.mode or "mean"
  if self.mode ~= "mean" and self.mode ~= "sum" and self.mode ~= "max" then
    E.raise(string.format("%s: mode must be \"mean\", \"sum\" or \"max\", got %s", who, tostring(self.mode)))
  end
  local pad = o.padding_idx
  if pad ~= nil then
    if math.type(pad) ~= "integer" or pad == 0 or pad > num_embeddings or pad < -num_embeddings then
      E.raise(string.format("%s: padding_idx must be an integer in 1..%d or -%d..-1, got %s", who, num_embeddings,
        num_embeddings, tostring(pad)))
    end
    if pad < 0 then pad = num_embeddings + 1 + pad end
  end
  self.padding_idx, self.include_last_offset = pad, o.include_last_offset == true
  self:register_parameter("weight", util.parameter(function()
    local w = ddp.randn(num_embeddings, embedding_dim, util.tensor_opts(o))
    if pad then w[pad]:zero_() end
    return w
  end))
end
function EmbeddingBag:forward(input, offsets, per_sample_weights)
  return embedding_bag(tostring(self), input, self.weight, offsets, self.mode, per_sample_weights,
    self.include_last_offset, self.padding_idx)
end
function EmbeddingBag:extra_repr()
  local s = string.format("%d, %d, mode='%s'", self.num_embeddings, self.embedding_dim, self.mode)
  return self.padding_idx and s .. string.format(", padding_idx=%d", self.padding_idx) or s
end
M.modules.EmbeddingBag = EmbeddingBag

-- ---- Parameter -----------------------------------------------------------------------------------------------

--- nn.Parameter(t [, requires_grad = true]): a leaf sharing t's storage that requires grad (PyTorch's Parameter).
function M.Parameter(t, requires_grad)
  check_tensor("Parameter", "data", t)
  if requires_grad ~= nil and type(requires_grad) ~= "boolean" then
    E.raise("Parameter: requires_grad must be a boolean, got " .. type(requires_grad))
  end
  local p = t:detach()
  if requires_grad ~= false then
    if not p:is_floating_point() then
      E.raise("Parameter: only floating-point tensors can require gradients, got " .. p:dtype())
    end
    p:requires_grad_()
  end
  return p
end
M.modules.Parameter = M.Parameter

return M
