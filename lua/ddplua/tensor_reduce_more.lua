-- PyTorch's remaining reductions, scans and indexing functions, composed from ddplua's ops with PyTorch's argument
-- order and 1-based dims (negative from the end) and 1-based positions (the sort-based ones, mode, unique,
-- searchsorted, quantile, histograms, live in tensor_order.lua):
--   t:nansum([dim [, keepdim]]), t:nanmean(...)       NaN left out (nanmean: floating tensors only)
--   ddp.std_mean(t [, dim] [, {unbiased=, correction=, keepdim=}]), ddp.var_mean(...) -> std (var), mean
--   t:aminmax([{dim=, keepdim=}]) -> min, max         (the gradient of amin / amax, split evenly among ties)
--   t:cummax(dim), t:cummin(dim) -> values, positions  on ties the later position, NaN sticks (as PyTorch's); the
--                                                     positions from core.cum_extreme, one pass in C
--   t:logcumsumexp(dim)                               core.logcumsumexp: one pass of log-add-exps in C
--   t:diff([n [, dim [, prepend [, append]]]]) or t:diff({n=, dim=, prepend=, append=})
--   ddp.cdist(x1, x2 [, p | {p=, compute_mode=}])    [B..,] P, M and [B..,] R, M -> [B..,] P, R
--   t:index_add(dim, index, source [, alpha | {alpha=}]), t:index_copy(dim, index, source), t:index_fill(dim, index,
--   value) and their in-place forms index_add_, index_copy_, index_fill_ (no autograd, as scatter_: an error on a
--   tensor that requires grad while grad mode is on); t:masked_scatter(mask, source); t:argwhere(); ddp.cross(a, b
--   [, dim]) (also t:cross)
-- All are methods but std_mean, var_mean and cdist (ddp. functions only); all are ddp. functions but the in-place
-- forms (methods only). Gradients flow through every composition (aminmax included, which PyTorch 1.13 lacks).
-- cdist follows PyTorch's compute modes: for p=2 the matmul identity where P or R is over 25 (or with
-- compute_mode="use_mm_for_euclid_dist"; zero distances then read about 1e-15, as PyTorch's), else the differences;
-- at zero distance the gradient is 0, as PyTorch's.
--
-- Deliberate differences from PyTorch:
--  * positions are 1-based: cummax's and cummin's positions, argwhere's rows; index arguments are 1-based int64
--    positions;
--  * aminmax has a gradient (amin's and amax's), where PyTorch 1.13 has none;
--  * diff: a negative n is an error (PyTorch 1.13 returns the input); uint8 is subtracted as unsigned bytes, as
--    torch.uint8 (PyTorch's bool diff is a logical xor: ddplua has no separate bool);
--  * index_add on an integer tensor with a fractional alpha is an error (as ddplua's add_; PyTorch truncates).
local core = require "ddplua.core"
local E = require "ddplua.errors"
local T = core.Tensor
local M = package.loaded["ddplua"]

local checks = require "ddplua.tensor_checks"
local FLOATS, check_tensor, shape = checks.FLOATS, checks.check_tensor, checks.shape

local INF = math.huge

-- a 1-based dim of t (a 0-dim tensor takes 1 and -1, as PyTorch takes 0 and -1)
local norm_dim = checks.norm_dim

-- dims as an integer or a table of integers, checked; nil stays nil (every dim)
local function dims_arg(who, t, dim)
  if dim == nil then return nil end
  if math.type(dim) == "integer" then
    norm_dim(who, t, dim)
    return dim
  end
  if type(dim) ~= "table" then
    E.raise(string.format("%s: dim must be an integer or a table of integers, got %s", who, type(dim)))
  end
  local seen = {}
  for _, d in ipairs(dim) do
    local r = norm_dim(who, t, d)
    if seen[r] then E.raise(string.format("%s: dim %d appears more than once in the dims", who, d)) end
    seen[r] = true
  end
  return dim
end

-- an options table with only the keys in `valid` (a list); nil is {}
local options = checks.check_opts

local bool_opt, check_float, squeeze_if = checks.bool_opt, checks.check_float, checks.squeeze_if

-- ---- NaN-ignoring reductions, std_mean / var_mean, aminmax ------------------------------------------------------

--- t:nansum([dim [, keepdim]]): the sum with NaN counted as 0 (integers: the sum, in int64)
function T.nansum(t, dim, keepdim)
  check_tensor("nansum", t)
  dim = dims_arg("nansum", t, dim)
  local x = FLOATS[t:dtype()] and core.where(t:isnan(), 0, t) or t
  if t:dim() == 0 then return x:sum() end
  if dim == nil then return keepdim and x:sum(nil, true) or x:sum() end
  return x:sum(dim, keepdim == true)
end

--- t:nanmean([dim [, keepdim]]): the mean of the values that are not NaN (NaN where there are none); floats only
function T.nanmean(t, dim, keepdim)
  check_tensor("nanmean", t)
  check_float("nanmean", t)
  dim = dims_arg("nanmean", t, dim)
  local isnan = t:isnan()
  local x = core.where(isnan, 0, t)
  local count = isnan:logical_not():to(t:dtype())
  if t:dim() == 0 then return x / count end
  return x:sum(dim, keepdim == true) / count:sum(dim, keepdim == true)
end

-- (t [, dim] [, opts]) of std_mean / var_mean
local function stat_mean(who, stat, t, dim, opts)
  check_tensor(who, t)
  if type(dim) == "table" and #dim == 0 and opts == nil then dim, opts = nil, dim end
  dim = dims_arg(who, t, dim)
  local o = options(who, opts, { "unbiased", "correction", "keepdim" })
  bool_opt(who, o.unbiased, "unbiased", true)
  local keepdim = bool_opt(who, o.keepdim, "keepdim", false)
  if o.correction ~= nil and type(o.correction) ~= "number" then
    E.raise(who .. ": correction must be a number, got " .. type(o.correction))
  end
  if o.unbiased ~= nil and o.correction ~= nil then E.raise(who .. ": pass unbiased or correction, not both") end
  local s = t[stat](t, dim, { unbiased = o.unbiased, correction = o.correction, keepdim = keepdim })
  return s, t:mean(dim, keepdim)
end

--- ddp.std_mean(t [, dim] [, {unbiased=true | correction=, keepdim=false}]) -> std, mean over dim (nil: all)
function M.std_mean(t, dim, opts) return stat_mean("std_mean", "std", t, dim, opts) end
--- ddp.var_mean(...) -> var, mean
function M.var_mean(t, dim, opts) return stat_mean("var_mean", "var", t, dim, opts) end

--- t:aminmax([{dim=, keepdim=}]) -> min, max (over dim, or all values); NaN where a slice holds one
function T.aminmax(t, opts)
  check_tensor("aminmax", t)
  local o = options("aminmax", opts, { "dim", "keepdim" })
  local keepdim = bool_opt("aminmax", o.keepdim, "keepdim", false)
  local dim = o.dim
  if dim ~= nil then
    if math.type(dim) ~= "integer" then E.raise("aminmax: dim must be an integer (1-based), got " .. tostring(dim)) end
    local d = norm_dim("aminmax", t, dim)
    if t:dim() > 0 and t:size(d) == 0 then
      E.raise(string.format("aminmax: cannot reduce over dim %d of size 0 (shape %s): there is no identity", dim,
        shape(t)))
    end
    if t:dim() == 0 then return t:clone(), t:clone() end
    return t:amin(d, keepdim), t:amax(d, keepdim)
  end
  if t:numel() == 0 then E.raise("aminmax: cannot reduce an empty tensor (shape " .. shape(t) .. "): there is no identity") end
  if t:dim() == 0 then return t:clone(), t:clone() end
  return t:amin(nil, keepdim), t:amax(nil, keepdim)
end

-- ---- scans: cummax / cummin / logcumsumexp, diff -------------------------------------------------------------------

local function cum_extreme(who, t, dim, is_max)
  check_tensor(who, t)
  if dim == nil then E.raise(who .. ": expected dim (an integer, 1-based), as torch." .. who) end
  local d = norm_dim(who, t, dim)
  if t:dim() == 0 then return t:clone(), core.ones({}, { dtype = "int64", device = t:device() }) end
  if t:numel() == 0 then return t:clone(), core.zeros(t:size(), { dtype = "int64", device = t:device() }) end
  if core.is_grad_enabled() and t.requires_grad then
    local i = core.cum_extreme(t:detach(), d, is_max)
    return t:gather(d, i), i -- the gradient goes to the positions, as PyTorch's
  end
  local i, v = core.cum_extreme(t, d, is_max, true)
  return v, i
end

--- t:cummax(dim) -> the running maxima along dim and their 1-based positions (the latest among equal values; NaN
--- from the first NaN on, at the latest NaN's position)
function T.cummax(t, dim) return cum_extreme("cummax", t, dim, true) end
--- t:cummin(dim) -> the running minima and their positions (as cummax)
function T.cummin(t, dim) return cum_extreme("cummin", t, dim, false) end

--- t:logcumsumexp(dim): log(cumsum(exp(t))) along dim without overflow or underflow (one pass in C of
--- log-add-exps in double); floats only
function T.logcumsumexp(t, dim, ...)
  check_tensor("logcumsumexp", t)
  check_float("logcumsumexp", t)
  if dim == nil then E.raise("logcumsumexp: expected dim (an integer, 1-based), as torch.logcumsumexp") end
  if select("#", ...) > 0 then
    E.raise("logcumsumexp: expected only dim, got " .. (select("#", ...) + 2) .. " arguments")
  end
  return core.logcumsumexp(t, norm_dim("logcumsumexp", t, dim))
end

--- t:diff([n=1 [, dim=-1 [, prepend [, append]]]]) or t:diff({n=, dim=, prepend=, append=}): the n-th forward
--- differences along dim, after prepend and append (tensors shaped as t but along dim) are joined on
function T.diff(t, n, dim, prepend, append)
  check_tensor("diff", t)
  if type(n) == "table" then
    if dim ~= nil then E.raise("diff: expected diff(n, dim, prepend, append) or diff({n=, dim=, prepend=, append=})") end
    local o = options("diff", n, { "n", "dim", "prepend", "append" })
    n, dim, prepend, append = o.n, o.dim, o.prepend, o.append
  end
  n = n == nil and 1 or n
  if math.type(n) ~= "integer" or n < 0 then E.raise("diff: n must be a non-negative integer, got " .. tostring(n)) end
  if t:dim() == 0 then E.raise("diff: expected a tensor of at least one dimension, got a 0-dimensional one") end
  local d = norm_dim("diff", t, dim or -1)
  local parts = {}
  for _, p in ipairs({ { "prepend", prepend }, { "self" }, { "append", append } }) do
    local v = p[2]
    if p[1] == "self" then
      parts[#parts + 1] = t
    elseif v ~= nil then
      check_tensor("diff", v, " as " .. p[1])
      local ok = v:dim() == t:dim()
      for k = 1, t:dim() do ok = ok and (k == d or v:size(k) == t:size(k)) end
      if not ok then
        E.raise(string.format("diff: %s must have the shape of the input except along dim %d: got %s for %s", p[1], d,
          shape(v), shape(t)))
      end
      if v:dtype() ~= t:dtype() then
        E.raise(string.format("diff: %s must have the input's dtype %s, got %s", p[1], t:dtype(), v:dtype()))
      end
      parts[#parts + 1] = v
    end
  end
  local x = #parts > 1 and core.cat(parts, d) or t
  for _ = 1, n do
    local len = x:size(d)
    if len == 0 then break end
    x = x:narrow(d, 2, len - 1) - x:narrow(d, 1, len - 1)
  end
  if rawequal(x, t) then x = t:clone() end
  return x
end

-- ---- cdist ------------------------------------------------------------------------------------------------------

-- the p=2 distances by |a|^2 + |b|^2 - 2 a.b (PyTorch's mm path), clamped at 1e-30 before the square root (the
-- gradient 0 there)
local function euclid_mm(x1, x2)
  local n1 = (x1 * x1):sum(-1, true)
  local n2 = (x2 * x2):sum(-1, true):transpose(-1, -2)
  local d2 = core.matmul(x1 * -2, x2:transpose(-1, -2)) + n1 + n2
  return core.where(d2:gt(1e-30), d2, 1e-30):sqrt()
end

local function pairwise(x1, x2, p)
  local diff = x1:unsqueeze(-2) - x2:unsqueeze(-3) -- [.., P, R, M]
  local a = diff:abs()
  if p == 0 then -- counts; a zero gradient (the count is chosen, the sum only keeps the graph)
    local all = core.ones({}, { dtype = "uint8", device = a:device() })
    return core.where(all, a:ne(0):to(a:dtype()):sum(-1), diff:sum(-1))
  elseif p == 1 then
    return a:sum(-1)
  elseif p == INF then -- each of equal largest differences gets the whole gradient, as PyTorch's
    local m = a:detach():amax(-1, true)
    return (m + core.where(a:detach():eq(m), a - m, 0):sum(-1, true)):squeeze(-1)
  end
  local pos = a:detach():gt(0)
  local ap = core.where(pos, core.where(pos, a, 1) ^ p, 0) -- a^p, its gradient 0 at 0 for every p
  if p == 2 then ap = core.where(pos, a * a, 0) end
  local s = ap:sum(-1)
  local spos = s:detach():gt(0)
  local safe = core.where(spos, s, 1)
  local r = p == 2 and safe:sqrt() or safe ^ (1 / p)
  return core.where(spos, r, 0) -- 0 at zero distance, its gradient 0 (PyTorch's)
end

local CDIST_MODES = { use_mm_for_euclid_dist_if_necessary = true, use_mm_for_euclid_dist = true,
  donot_use_mm_for_euclid_dist = true }

--- ddp.cdist(x1, x2 [, p=2 | {p=, compute_mode=}]): the p-norm distances between the rows of x1 [B.., P, M] and
--- x2 [B.., R, M] (batch dims broadcast) -> [B.., P, R]; p >= 0 (math.huge for the largest difference)
function M.cdist(x1, x2, p)
  check_tensor("cdist", x1, " as x1")
  check_tensor("cdist", x2, " as x2")
  local mode = "use_mm_for_euclid_dist_if_necessary"
  if type(p) == "table" then
    local o = options("cdist", p, { "p", "compute_mode" })
    p, mode = o.p, o.compute_mode or mode
    if not CDIST_MODES[mode] then
      E.raise("cdist: compute_mode must be use_mm_for_euclid_dist_if_necessary, use_mm_for_euclid_dist or " ..
        "donot_use_mm_for_euclid_dist, got " .. tostring(mode))
    end
  end
  p = p == nil and 2 or p
  if type(p) ~= "number" or p < 0 or p ~= p then E.raise("cdist: p must be a non-negative number, got " .. tostring(p)) end
  for _, x in ipairs({ { "x1", x1 }, { "x2", x2 } }) do
    if x[2]:dim() < 2 then
      E.raise(string.format("cdist: %s must have at least 2 dims ([.., rows, columns]), got %s", x[1], shape(x[2])))
    end
    if not FLOATS[x[2]:dtype()] then E.raise("cdist: expected floating-point tensors, " .. x[1] .. " is " .. x[2]:dtype()) end
  end
  if x1:dtype() ~= x2:dtype() then E.raise("cdist: x1 and x2 must have the same dtype, got " .. x1:dtype() .. " and " .. x2:dtype()) end
  local M1, M2 = x1:size(-1), x2:size(-1)
  if M1 ~= M2 then
    E.raise(string.format("cdist: x1 and x2 must have the same number of columns, got %d and %d", M1, M2))
  end
  local P, R = x1:size(-2), x2:size(-2)
  -- the batch dims, broadcast
  local s1, s2 = x1:size(), x2:size()
  local nb = math.max(#s1, #s2) - 2
  local b1, b2 = {}, {}
  for k = 1, nb do
    local a, b = s1[#s1 - 2 - nb + k] or 1, s2[#s2 - 2 - nb + k] or 1
    if a ~= b and a ~= 1 and b ~= 1 then
      E.raise(string.format("cdist: the batch dims of x1 %s and x2 %s do not broadcast", shape(x1), shape(x2)))
    end
    local m = a == 1 and b or a
    b1[k], b2[k] = m, m
  end
  b1[nb + 1], b1[nb + 2], b2[nb + 1], b2[nb + 2] = P, M1, R, M2
  x1, x2 = x1:expand(b1), x2:expand(b2)
  if P == 0 or R == 0 or M1 == 0 then
    local sz = {}
    for k = 1, nb do sz[k] = b1[k] end
    sz[nb + 1], sz[nb + 2] = P, R
    return core.zeros(sz, { dtype = x1:dtype(), device = x1:device() })
  end
  if p == 2 and (mode == "use_mm_for_euclid_dist" or (mode == "use_mm_for_euclid_dist_if_necessary" and (P > 25 or R > 25))) then
    return euclid_mm(x1, x2)
  end
  return pairwise(x1, x2, p)
end

-- ---- index_add / index_copy / index_fill, masked_scatter, argwhere, cross ---------------------------------------

-- the checked dim and the 1-D int64 index of an index_* call, and the index spread over `like`'s shape along dim
local function index_args(who, t, dim, index)
  check_tensor(who, t)
  local d = norm_dim(who, t, dim)
  check_tensor(who, index, " as the index")
  if index:dtype() ~= "int64" then E.raise(who .. ": the index must be int64 (1-based positions), got " .. index:dtype()) end
  if index:dim() > 1 then E.raise(who .. ": the index must be 1-D, got " .. shape(index)) end
  index = index:reshape(-1)
  local n = t:dim() == 0 and 1 or t:size(d)
  if index:numel() > 0 then
    local lo, hi = index:min():item(), index:max():item()
    if lo < 1 or hi > n then
      E.raise(string.format("%s: index %d is out of range for dim %d of size %d (positions are 1-based)", who,
        lo < 1 and lo or hi, d, n))
    end
  end
  return d, index
end

-- source checked against t (same dtype, t's shape with index's length along d); the index expanded to its shape
local function source_index(who, t, d, index, source)
  check_tensor(who, source, " as the source")
  if source:dtype() ~= t:dtype() then
    E.raise(string.format("%s: the source must have the tensor's dtype %s, got %s", who, t:dtype(), source:dtype()))
  end
  local want = t:size()
  if t:dim() == 0 then want = {} end
  if #want > 0 then want[d] = index:numel() end
  local got = source:dim() == 0 and {} or source:size()
  local ok = #got == #want or (t:dim() == 0 and source:numel() == 1)
  if ok then for k = 1, #want do ok = ok and got[k] == want[k] end end
  if not ok then
    E.raise(string.format("%s: the source must have shape [%s] (the tensor's, with the index's length along dim %d), got %s",
      who, table.concat(want, ", "), d, shape(source)))
  end
  if t:dim() == 0 then return index:reshape({}), source:reshape({}) end
  local view = {}
  for k = 1, t:dim() do view[k] = k == d and index:numel() or 1 end
  return index:view(view):expand(want), source
end

-- uint8, true along dim d at the index's positions, shaped to broadcast against t
local function index_mask(t, d, index)
  local n = t:dim() == 0 and 1 or t:size(d)
  local m = core.zeros({ n }, { dtype = "uint8", device = t:device() }):scatter(1, index, 1)
  if t:dim() == 0 then return m:reshape({}) end
  local view = {}
  for k = 1, t:dim() do view[k] = k == d and n or 1 end
  return m:view(view)
end

local function no_inplace_grad(who, t)
  if core.is_grad_enabled() and t.requires_grad then
    E.raise(who .. ": in-place operation on a tensor that requires grad (wrap it in ddp.no_grad, or use " ..
      who:sub(1, -2) .. ")")
  end
end

local function alpha_arg(who, t, alpha)
  if type(alpha) == "table" then alpha = options(who, alpha, { "alpha" }).alpha end
  if alpha == nil then return 1 end
  if type(alpha) ~= "number" then E.raise(who .. ": alpha must be a number, got " .. type(alpha)) end
  if not FLOATS[t:dtype()] and math.type(alpha) ~= "integer" then
    E.raise(who .. ": alpha must be an integer for an integer tensor, got " .. tostring(alpha))
  end
  return alpha
end

local function index_add(who, t, dim, index, source, alpha, inplace)
  local d, idx = index_args(who, t, dim, index)
  alpha = alpha_arg(who, t, alpha)
  local ei, src = source_index(who, t, d, idx, source)
  if alpha ~= 1 then src = src * alpha end
  if not inplace and t:dim() > 0 and t:device() == "cpu" and (t:dtype() == "float32" or t:dtype() == "float64") then
    return core.index_add(t, d, idx, src) -- rows added in place along the dim: one pass, not a scatter per element
  end
  if inplace then
    no_inplace_grad(who, t)
    return t:scatter_add_(d, ei, src)
  end
  return t:scatter_add(d, ei, src)
end

--- t:index_add(dim, index, source [, alpha | {alpha=}]): t with alpha * source's slices along dim added at the
--- 1-based positions in index (repeated positions add up); index_add_ in place
function T.index_add(t, dim, index, source, alpha) return index_add("index_add", t, dim, index, source, alpha, false) end
function T.index_add_(t, dim, index, source, alpha) return index_add("index_add_", t, dim, index, source, alpha, true) end

local function index_copy(who, t, dim, index, source, inplace)
  local d, idx = index_args(who, t, dim, index)
  local ei, src = source_index(who, t, d, idx, source)
  if inplace then
    no_inplace_grad(who, t)
    return t:scatter_(d, ei, src)
  end
  return t:scatter(d, ei, src)
end

--- t:index_copy(dim, index, source): t with its slices along dim at the positions in index replaced by source's
--- (a repeated position: one of its slices); index_copy_ in place
function T.index_copy(t, dim, index, source) return index_copy("index_copy", t, dim, index, source, false) end
function T.index_copy_(t, dim, index, source) return index_copy("index_copy_", t, dim, index, source, true) end

local function index_fill(who, t, dim, index, value, inplace)
  local d, idx = index_args(who, t, dim, index)
  if type(value) ~= "number" and not (core.is_tensor(value) and value:dim() == 0) then
    E.raise(who .. ": value must be a number or a 0-dim tensor, got " .. (core.is_tensor(value) and "a tensor of shape " .. shape(value) or type(value)))
  end
  if inplace then
    no_inplace_grad(who, t)
    if core.is_tensor(value) then value = value:item() end
    if t:dim() == 0 then return idx:numel() > 0 and t:fill_(value) or t end
    local view, sz = {}, t:size()
    for k = 1, t:dim() do view[k] = k == d and idx:numel() or 1 end
    sz[d] = idx:numel()
    return t:scatter_(d, idx:view(view):expand(sz), value)
  end
  local m = index_mask(t, d, idx)
  if core.is_tensor(value) then
    if value:dtype() ~= t:dtype() then value = value:to(t:dtype()) end
    return core.where(m, value, t)
  end
  return t:masked_fill(m, value)
end

--- t:index_fill(dim, index, value): t with its slices along dim at the positions in index set to value (a number,
--- or a 0-dim tensor, which then gets their gradient); index_fill_ in place
function T.index_fill(t, dim, index, value) return index_fill("index_fill", t, dim, index, value, false) end
function T.index_fill_(t, dim, index, value) return index_fill("index_fill_", t, dim, index, value, true) end

local broadcast_shape = checks.broadcast_shape

--- t:masked_scatter(mask, source): t (broadcast with the uint8 mask) with the values where mask is set taken from
--- source's values in order; gradients to t and to source's first values
function T.masked_scatter(t, mask, source)
  check_tensor("masked_scatter", t)
  check_tensor("masked_scatter", mask, " as the mask")
  check_tensor("masked_scatter", source, " as the source")
  if mask:dtype() ~= "uint8" then
    E.raise("masked_scatter: expected a uint8 mask (ddplua's bool: a comparison's result), got " .. mask:dtype())
  end
  if source:dtype() ~= t:dtype() then
    E.raise(string.format("masked_scatter: the source must have the tensor's dtype %s, got %s", t:dtype(), source:dtype()))
  end
  local sz = broadcast_shape("masked_scatter", t, mask)
  local x = t:expand(sz)
  local n = x:numel()
  local m = mask:expand(sz):reshape(-1)
  local rank = m:long():cumsum(1)
  local count = n > 0 and rank[n]:item() or 0
  if source:numel() < count then
    E.raise(string.format("masked_scatter: the mask selects %d values but the source has only %d", count, source:numel()))
  end
  if count == 0 then return x:clone() end
  local picked = source:reshape(-1):index_select(1, core.where(m, rank, 1))
  return core.where(m, picked, x:reshape(-1)):reshape(sz)
end

--- t:argwhere() -> int64 [n, t:dim()]: the 1-based positions of the non-zero values, as t:nonzero()
function T.argwhere(t)
  check_tensor("argwhere", t)
  return t:nonzero()
end

--- ddp.cross(a, b [, dim]): the cross product of the 3-vectors along dim (a and b broadcast); without dim the first
--- dim of size 3, as PyTorch 1.13 (which deprecates that default: pass dim)
function T.cross(a, b, dim)
  check_tensor("cross", a)
  check_tensor("cross", b, " as the second operand")
  local sz = broadcast_shape("cross", a, b)
  local d
  if dim == nil then
    for k = 1, #sz do
      if sz[k] == 3 then d = k; break end
    end
    if not d then E.raise("cross: no dim of size 3 in the shape " .. shape(a) .. " (pass dim)") end
  else
    if math.type(dim) ~= "integer" then E.raise("cross: dim must be an integer (1-based), got " .. tostring(dim)) end
    d = dim < 0 and dim + #sz + 1 or dim
    if d < 1 or d > #sz then E.raise(string.format("cross: dim %d is out of range for a %d-dimensional tensor", dim, #sz)) end
    if sz[d] ~= 3 then
      E.raise(string.format("cross: dim %d must have size 3, got shapes %s and %s", dim, shape(a), shape(b)))
    end
  end
  local x, y = a:expand(sz), b:expand(sz)
  local function c(t, k) return t:narrow(d, k, 1) end
  return core.cat({ c(x, 2) * c(y, 3) - c(x, 3) * c(y, 2), c(x, 3) * c(y, 1) - c(x, 1) * c(y, 3),
    c(x, 1) * c(y, 2) - c(x, 2) * c(y, 1) }, d)
end

for _, name in ipairs({ "nansum", "nanmean", "aminmax", "cummax", "cummin", "logcumsumexp", "diff", "index_add",
  "index_copy", "index_fill", "masked_scatter", "argwhere", "cross" }) do
  M[name] = T[name]
end

return T
