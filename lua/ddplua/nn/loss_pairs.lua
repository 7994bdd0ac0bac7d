-- PyTorch 1.13's pair, ranking, margin and likelihood losses, composed in Lua from the tensor ops (autograd runs
-- through the composition), each a module and a functional form (opts keys other than the listed ones are an error;
-- every setting has PyTorch's default):
--   nn.MarginRankingLoss{margin=0, reduction=}        F.margin_ranking_loss(x1, x2, y, {margin=, reduction=})
--   nn.HingeEmbeddingLoss{margin=1, reduction=}       F.hinge_embedding_loss(x, y, {margin=, reduction=})
--   nn.SoftMarginLoss{reduction=}                     F.soft_margin_loss(x, y, {reduction=})
--   nn.CosineEmbeddingLoss{margin=0, reduction=}      F.cosine_embedding_loss(x1, x2, y, {margin=, reduction=})
--   nn.TripletMarginLoss{margin=1, p=2, eps=1e-6, swap=false, reduction=}
--                                                     F.triplet_margin_loss(anchor, positive, negative, {...})
--   nn.MultiLabelSoftMarginLoss{weight=, reduction=}  F.multilabel_soft_margin_loss(x, y, {weight=, reduction=})
--   nn.PoissonNLLLoss{log_input=true, full=false, eps=1e-8, reduction=}
--                                                     F.poisson_nll_loss(input, target, {...})
--   nn.GaussianNLLLoss{full=false, eps=1e-6, reduction=}
--                                                     F.gaussian_nll_loss(input, target, var, {...})
--   nn.MultiMarginLoss{p=1, margin=1, weight=, reduction=}
--                                                     F.multi_margin_loss(x, target, {...})
-- reduction is "mean" (the default), "sum" or "none"; the mean of an empty loss is NaN, as PyTorch's. Inputs are
-- floating tensors; a target may be an integer tensor (+-1 labels, counts), used as the input's dtype
-- (multi_margin_loss's must be int64 class indices). The formulas are PyTorch 1.13's, max(0, z) passing the gradient
-- at z = 0 as its clamp_min does:
--   margin_ranking: max(0, -y (x1 - x2) + margin); x1, x2 and y have the same number of dims and broadcast.
--   hinge_embedding: (x where y ~= -1, else 0) + (max(0, margin - x) where y ~= 1, else 0); x and y broadcast.
--   soft_margin: log(1 + exp(-y x)), as softplus(z = -y x) = max(z, 0) + log1p(exp(-|z|)); y broadcasts to x.
--   cosine_embedding: cos = sum(x1 x2) / sqrt((sum(x1^2) + E) (sum(x2^2) + E)) (E = 1e-12 as a float32, PyTorch's
--     EPSILON) over the last dim of [N, D] inputs with a [N] target, or of [D] inputs with a 0-dim target (inputs
--     broadcast); the loss is 1 - cos where y == 1, max(0, cos - margin) where y == -1, else 0.
--   triplet_margin: max(0, margin + d(a, p) - d(a, n)), d = F.pairwise_distance(u, v, p, eps) (the p-norm of
--     u - v + eps over the last dim); swap takes min(d(a, n), d(p, n)) for d(a, n) (a tie splits the gradient, as
--     torch.min). Same number of dims (0-dim too), broadcast.
--   multilabel_soft_margin: the mean over the last dim (the classes) of -w (y logsigmoid(x) + (1 - y)
--     logsigmoid(-x)), logsigmoid(x) = -softplus(-x) as above (its gradient 1/2 at 0).
--   poisson_nll: exp(x) - y x (log_input), else x - y log(x + eps); full adds y log y - y + log(2 pi y) / 2 where
--     y > 1 (0 elsewhere); input and target broadcast.
--   gaussian_nll: (log v + (x - y)^2 / v) / 2 (+ log(2 pi) / 2 with full), v = max(var, eps) clamped out of the
--     graph (var's gradient as if unclamped, as PyTorch 1.13); var has the input's shape, or that without its last
--     dim, or with a last dim of 1 (homoscedastic); a negative var is an error.
--   multi_margin: x [N, C] (or [C], or 0-dim: one sample) and target [N] (or [1] or 0-dim for one sample: "none"
--     gives that shape) of int64 1-BASED class indices t: sum over d ~= t of w[t] max(0, margin - x[t] + x[d])^p / C,
--     p 1 or 2, weight [C] (the gradient is 0 at z = 0 here, as PyTorch's kernel).
--
-- Deliberate differences from PyTorch: errors for bad arguments are ddplua's (naming the loss); multi_margin_loss's
-- class indices are 1-based (every class index in ddplua is) and its weight must have C entries (PyTorch 1.13 does
-- not check its size); its empty batch gives NaN for "mean" and 0 for "sum" (PyTorch 1.13 returns uninitialized
-- memory), and its float32 sums run in float32 (PyTorch's CPU kernel uses double); soft_margin_loss is finite for any
-- finite y x, its gradient -y sigmoid(-y x) (PyTorch's log1p(exp(-y x)) overflows to inf past -y x ~ 88 in float32,
-- ~ 709 in float64, with a NaN gradient); poisson_nll_loss's target gradient is 0 where target <= 1 with full
-- (PyTorch's is NaN at target 0, from 0 log 0); multilabel_soft_margin_loss's target and weight must broadcast to the
-- input's shape without growing it (PyTorch lets them grow the loss, then sums the dim counted from the input's); a
-- soft_margin_loss target and a multi_margin_loss weight get gradients (PyTorch refuses them when they require grad);
-- eps must be a non-negative number.
local ddp = require "ddplua"
local Module = require "ddplua.nn.module"
local util = require "ddplua.nn.util"
local layers = require "ddplua.nn.layers_more"
local E = require "ddplua.errors"

local M = { modules = {}, F = {} }

local fmt, shape_str = string.format, util.shape_str
-- PyTorch's EPSILON (Loss.cpp) in cosine_embedding_loss's squared magnitudes: 1e-12 as a float32
local EPS = string.unpack("<f", string.pack("<f", 1e-12))

local function check_reduction(who, r)
  if r == nil or r == "mean" or r == "sum" or r == "none" then return r or "mean" end
  E.raise(fmt('%s: reduction must be "mean", "sum" or "none", got %s', who, tostring(r)))
end

local function reduce(loss, reduction)
  if reduction == "sum" then return loss:sum() end
  if reduction == "mean" then return loss:mean() end
  return loss
end

local function check_tensor(who, what, x)
  if not ddp.is_tensor(x) then E.raise(fmt("%s: %s must be a tensor, got %s", who, what, type(x))) end
  return x
end

local function check_float(who, what, x)
  check_tensor(who, what, x)
  if not x:is_floating_point() then
    E.raise(fmt("%s: %s must be a floating point tensor, got %s (convert with :float())", who, what, x:dtype()))
  end
  return x
end

-- a target: a tensor, cast to the input's dtype when it is not floating (+-1 labels or counts as int64)
local function as_target(who, y, x)
  check_tensor(who, "target", y)
  if not y:is_floating_point() then y = y:to(x:dtype()) end
  return y
end

local function named_shapes(list)
  local parts = {}
  for i, e in ipairs(list) do parts[i] = e[1] .. " " .. shape_str(e[2]) end
  return table.concat(parts, ", ")
end

-- named tensors ({name, t}, ...) that must broadcast together
local function broadcast(who, ...)
  local list, n = { ... }, 0
  for _, e in ipairs(list) do n = math.max(n, e[2]:dim()) end
  for i = 1, n do
    local size = 1
    for _, e in ipairs(list) do
      local s = e[2]:size()
      local d = s[i - n + #s] or 1
      if d ~= 1 and size ~= 1 and d ~= size then
        E.raise(fmt("%s: the shapes of %s do not broadcast", who, named_shapes(list)))
      end
      if d ~= 1 then size = d end
    end
  end
end

-- named tensors that must have the same number of dims (PyTorch's check before broadcasting)
local function same_dims(who, ...)
  local list = { ... }
  for _, e in ipairs(list) do
    if e[2]:dim() ~= list[1][2]:dim() then
      E.raise(fmt("%s: all inputs must have the same number of dimensions, got %s", who, named_shapes(list)))
    end
  end
end

-- t (named what) broadcasts to x's shape without growing it
local function fits(who, what, t, x)
  local st, sx = t:size(), x:size()
  local ok = #st <= #sx
  for i = 0, #st - 1 do ok = ok and (st[#st - i] == 1 or st[#st - i] == sx[#sx - i]) end
  if not ok then
    E.raise(fmt("%s: %s of shape %s does not broadcast to the input's shape %s", who, what, shape_str(t),
      shape_str(x)))
  end
end

-- softplus(z) = log(1 + exp(z)) as max(z, 0) + log1p(exp(-|z|)), -|z| written z - 2 max(z, 0): finite for any
-- finite z, its gradient sigmoid(z) everywhere (1/2 at 0, whichever side relu's gradient takes)
local function softplus(z)
  local m = z:relu()
  return (z - m * 2):exp():log1p() + m
end

-- ---- the losses (who: the name errors give; o: reduction and the settings, a module passes itself) ----------------

local function margin_ranking(who, o, x1, x2, y)
  check_float(who, "input1", x1)
  check_float(who, "input2", x2)
  y = as_target(who, y, x1)
  local list = { { "input1", x1 }, { "input2", x2 }, { "target", y } }
  same_dims(who, table.unpack(list))
  broadcast(who, table.unpack(list))
  return reduce((y:neg() * (x1 - x2) + o.margin):clamp_min(0), o.reduction)
end

local function hinge_embedding(who, o, x, y)
  check_float(who, "input", x)
  check_tensor(who, "target", y)
  broadcast(who, { "input", x }, { "target", y })
  local loss = ddp.where(y:ne(1), (o.margin - x):clamp_min(0), 0) + ddp.where(y:ne(-1), x, 0)
  return reduce(loss, o.reduction)
end

local function soft_margin(who, o, x, y)
  check_float(who, "input", x)
  y = as_target(who, y, x)
  fits(who, "target", y, x)
  return reduce(softplus(x:neg() * y), o.reduction)
end

local function cosine_embedding(who, o, x1, x2, y)
  check_float(who, "input1", x1)
  check_float(who, "input2", x2)
  check_tensor(who, "target", y)
  local td = y:dim()
  if td > 1 then
    E.raise(fmt("%s: expected a 0-D or 1-D target (multi-target is not supported), got shape %s", who, shape_str(y)))
  end
  if x1:dim() ~= td + 1 or x2:dim() ~= td + 1 then
    E.raise(fmt("%s: a %d-D target expects %d-D inputs, got input1 %s and input2 %s", who, td, td + 1,
      shape_str(x1), shape_str(x2)))
  end
  broadcast(who, { "input1", x1 }, { "input2", x2 })
  local d = td + 1
  local m1, m2 = (x1 * x1):sum(d) + EPS, (x2 * x2):sum(d) + EPS
  local cos = (x1 * x2):sum(d) / (m1 * m2):sqrt()
  broadcast(who, { "similarities", cos }, { "target", y })
  local loss = ddp.where(y:eq(1), 1 - cos, 0) + ddp.where(y:eq(-1), (cos - o.margin):clamp_min(0), 0)
  return reduce(loss, o.reduction)
end

local function triplet_margin(who, o, a, pos, neg)
  local list = { { "anchor", a }, { "positive", pos }, { "negative", neg } }
  for _, e in ipairs(list) do check_float(who, e[1], e[2]) end
  same_dims(who, table.unpack(list))
  broadcast(who, table.unpack(list))
  if a:dim() == 0 then a, pos, neg = a:reshape({ 1 }), pos:reshape({ 1 }), neg:reshape({ 1 }) end
  local function dist(u, v) return layers.F.pairwise_distance(u, v, o.p, o.eps) end
  local dp, dn = dist(a, pos), dist(a, neg)
  if o.swap then dn = ddp.minimum(dn, dist(pos, neg)) end
  return reduce((o.margin + dp - dn):clamp_min(0), o.reduction)
end

local function multilabel_soft_margin(who, o, x, y)
  check_float(who, "input", x)
  if x:dim() == 0 then
    E.raise(who .. ": expected an input of at least 1 dimension (the classes along the last), got a 0-dim tensor")
  end
  y = as_target(who, y, x)
  fits(who, "target", y, x)
  -- -(y logsigmoid(x) + (1 - y) logsigmoid(-x)), logsigmoid(x) = -softplus(-x)
  local loss = y * softplus(x:neg()) + (1 - y) * softplus(x)
  local w = o.weight
  if w then
    fits(who, "weight", w, x)
    loss = loss * (w:dtype() == x:dtype() and w or w:to(x:dtype()))
  end
  local d = x:dim()
  return reduce(loss:sum(d) / x:size(d), o.reduction)
end

local function poisson_nll(who, o, x, y)
  check_float(who, "input", x)
  y = as_target(who, y, x)
  broadcast(who, { "input", x }, { "target", y })
  local loss
  if o.log_input then loss = x:exp() - y * x else loss = x - y * (x + o.eps):log() end
  if o.full then
    -- Stirling's term where target > 1, computed on a safe value elsewhere (no 0 log 0 in the gradient)
    local big = y:gt(1)
    local t = ddp.where(big, y, 2)
    loss = loss + ddp.where(big, t * t:log() - t + 0.5 * (2 * math.pi * t):log(), 0)
  end
  return reduce(loss, o.reduction)
end

local function same_sizes(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do if a[i] ~= b[i] then return false end end
  return true
end

local function gaussian_nll(who, o, x, y, var)
  check_float(who, "input", x)
  y = as_target(who, y, x)
  check_float(who, "var", var)
  local sx, sv = x:size(), var:size()
  if not same_sizes(sx, sv) then
    local lead = { table.unpack(sx, 1, #sx - 1) }
    if same_sizes(lead, sv) then
      var = var:unsqueeze(-1) -- homoscedastic: one variance for the last dim
    elseif not (#sv > 0 and sv[#sv] == 1 and same_sizes(lead, { table.unpack(sv, 1, #sv - 1) })) then
      E.raise(fmt("%s: var of shape %s is of incorrect size: expected the input's shape %s, or that without its " ..
        "last dim, or with a last dim of 1", who, shape_str(var), shape_str(x)))
    end
  end
  broadcast(who, { "input", x }, { "target", y })
  if var:lt(0):any():item() ~= 0 then E.raise(who .. ": var has negative entries (variances must be >= 0)") end
  local v = var:clone()
  ddp.no_grad(function() v:copy_(v:clamp_min(o.eps)) end) -- clamped out of the graph, as PyTorch 1.13
  local loss = 0.5 * (v:log() + (x - y):square() / v)
  if o.full then loss = loss + 0.5 * math.log(2 * math.pi) end
  return reduce(loss, o.reduction)
end

local function multi_margin(who, o, x, t)
  check_float(who, "input", x)
  check_tensor(who, "target", t)
  if t:dtype() ~= "int64" then
    E.raise(fmt("%s: target must be an int64 tensor of class indices (1-based), got %s", who, t:dtype()))
  end
  local nd = x:dim()
  if nd > 2 or (nd > 0 and x:size(nd) == 0) then
    E.raise(fmt("%s: expected a non-empty vector [C] or matrix [N, C] (N may be 0) as input, got shape %s", who,
      shape_str(x)))
  end
  local N, C = nd == 2 and x:size(1) or 1, nd == 0 and 1 or x:size(nd)
  if t:dim() > 1 or t:numel() ~= N then
    E.raise(fmt("%s: expected a target of %d class index(es) (shape [%d], or 0-dim for one sample) for an input " ..
      "of shape %s, got shape %s", who, N, N, shape_str(x), shape_str(t)))
  end
  local w = o.weight
  if w and (w:dim() ~= 1 or w:numel() ~= C) then
    E.raise(fmt("%s: weight must be 1-D with one entry per class (%d), got shape %s", who, C, shape_str(w)))
  end
  if N > 0 then
    local lo, hi = t:min():item(), t:max():item()
    if lo < 1 or hi > C then
      E.raise(fmt("%s: target class indices must be in 1..%d (1-based), got %d..%d", who, C, lo, hi))
    end
  end
  local x2, t1 = x:reshape({ N, C }), t:reshape({ N })
  local h = ((o.margin - x2:gather(2, t1:unsqueeze(2))) + x2):relu()
  if o.p == 2 then h = h:square() end
  h = ddp.where(layers.F.one_hot(t1, C):eq(1), 0, h) -- every class but the target's
  if w then h = h * (w:dtype() == x:dtype() and w or w:to(x:dtype())):index_select(1, t1):unsqueeze(2) end
  local loss = h:sum(2) / C
  if o.reduction == "none" then return loss:reshape(t:dim() == 0 and {} or { N }) end
  return reduce(loss, o.reduction)
end

-- ---- functional forms and modules ---------------------------------------------------------------------------------

-- a setting's value (kind: "number", "eps" (non-negative), "p12" (1 or 2), "boolean", "weight" (nil or a tensor))
local function check_setting(who, key, kind, v)
  if kind == "boolean" then
    if type(v) ~= "boolean" then E.raise(fmt("%s: %s must be a boolean, got %s", who, key, tostring(v))) end
  elseif kind == "weight" then
    if v ~= nil then check_float(who, key, v) end
  elseif kind == "p12" then
    if v ~= 1 and v ~= 2 then E.raise(fmt("%s: only p = 1 and p = 2 are supported, got %s", who, tostring(v))) end
  elseif type(v) ~= "number" or v ~= v or (kind == "eps" and v < 0) then
    E.raise(fmt("%s: %s must be a %snumber, got %s", who, key, kind == "eps" and "non-negative " or "", tostring(v)))
  end
  return v
end

-- a loss as F[fname](<nargs tensors> [, opts]) and as the module class name{opts}; settings: { {key, default, kind},
-- ... }; loss(who, o, tensors...) reads o.reduction and o[key]
local function define(name, fname, nargs, settings, loss)
  local keys = { "reduction" }
  for i, s in ipairs(settings) do keys[i + 1] = s[1] end
  local function read(who, opts, into)
    opts = util.check_opts(who, opts, keys)
    into.reduction = check_reduction(who, opts.reduction)
    for _, s in ipairs(settings) do
      local v = opts[s[1]]
      if v == nil then v = s[2] end
      into[s[1]] = check_setting(who, s[1], s[3], v)
    end
    return into
  end

  M.F[fname] = function(...)
    local n, opts = select("#", ...), select(nargs + 1, ...)
    if n > nargs + 1 then
      E.raise(fmt("%s: too many arguments (%d): expected %d tensors and an options table", fname, n, nargs))
    end
    if ddp.is_tensor(opts) then
      E.raise(fmt("%s: expected %d tensors, then the options as a table (%s); got a tensor as argument %d", fname,
        nargs, table.concat(keys, ", "), nargs + 1))
    end
    return loss(fname, read(fname, opts, {}), ...)
  end

  local C = Module:extend(name)
  function C:__init(opts)
    local o = read(name, opts, {})
    self.reduction = o.reduction
    for _, s in ipairs(settings) do
      if s[3] == "weight" then self:register_buffer(s[1], o[s[1]]) else self[s[1]] = o[s[1]] end
    end
  end
  function C:forward(...) return loss(name, self, ...) end
  function C:extra_repr()
    local parts = {}
    for _, s in ipairs(settings) do
      local v = self[s[1]]
      if s[3] ~= "weight" and v ~= s[2] then
        parts[#parts + 1] = fmt("%s=%s", s[1], math.type(v) == "float" and fmt("%g", v) or tostring(v))
      end
    end
    if self.reduction ~= "mean" then parts[#parts + 1] = "reduction=" .. self.reduction end
    return table.concat(parts, ", ")
  end
  M.modules[name] = C
end

define("MarginRankingLoss", "margin_ranking_loss", 3, { { "margin", 0, "number" } }, margin_ranking)
define("HingeEmbeddingLoss", "hinge_embedding_loss", 2, { { "margin", 1, "number" } }, hinge_embedding)
define("SoftMarginLoss", "soft_margin_loss", 2, {}, soft_margin)
define("CosineEmbeddingLoss", "cosine_embedding_loss", 3, { { "margin", 0, "number" } }, cosine_embedding)
define("TripletMarginLoss", "triplet_margin_loss", 3, { { "margin", 1, "number" }, { "p", 2, "number" },
  { "eps", 1e-6, "eps" }, { "swap", false, "boolean" } }, triplet_margin)
define("MultiLabelSoftMarginLoss", "multilabel_soft_margin_loss", 2, { { "weight", nil, "weight" } },
  multilabel_soft_margin)
define("PoissonNLLLoss", "poisson_nll_loss", 2, { { "log_input", true, "boolean" }, { "full", false, "boolean" },
  { "eps", 1e-8, "eps" } }, poisson_nll)
define("GaussianNLLLoss", "gaussian_nll_loss", 3, { { "full", false, "boolean" }, { "eps", 1e-6, "eps" } },
  gaussian_nll)
define("MultiMarginLoss", "multi_margin_loss", 2, { { "p", 1, "p12" }, { "margin", 1, "number" },
  { "weight", nil, "weight" } }, multi_margin)

return M
