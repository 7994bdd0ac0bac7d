-- PyTorch's remaining reductions, scans and indexing functions, composed from ddplua's ops with PyTorch's argument
-- order and 1-based dims (negative from the end) and 1-based positions:
--   t:nansum([dim [, keepdim]]), t:nanmean(...)       NaN left out (nanmean: floating tensors only)
--   ddp.std_mean(t [, dim] [, {unbiased=, correction=, keepdim=}]), ddp.var_mean(...) -> std (var), mean
--   t:aminmax([{dim=, keepdim=}]) -> min, max         (the gradient of amin / amax, split evenly among ties)
--   t:mode([dim [, keepdim]]) -> values, positions    the most frequent value (the smallest among equally frequent
--                                                     ones) and the last position that holds it
--   t:cummax(dim), t:cummin(dim) -> values, positions  on ties the later position, NaN sticks (as PyTorch's)
--   t:logcumsumexp(dim)                               a log-step scan of stable log-add-exps
--   t:diff([n [, dim [, prepend [, append]]]]) or t:diff({n=, dim=, prepend=, append=})
--   ddp.unique(t [, {sorted=, return_inverse=, return_counts=, dim=}]) -> values [, inverse] [, counts]
--   ddp.unique_consecutive(t [, {return_inverse=, return_counts=, dim=}]) (both also methods)
--   ddp.searchsorted(seq, values [, {right=, side=, sorter=, out_int32=}]), ddp.bucketize(x, boundaries [, {right=}])
--   ddp.histc(t [, bins [, min [, max]]])  (also t:histc)
--   ddp.cdist(x1, x2 [, p | {p=, compute_mode=}])    [B..,] P, M and [B..,] R, M -> [B..,] P, R
--   t:index_add(dim, index, source [, alpha | {alpha=}]), t:index_copy(dim, index, source), t:index_fill(dim, index,
--   value) and their in-place forms index_add_, index_copy_, index_fill_ (no autograd, as scatter_: an error on a
--   tensor that requires grad while grad mode is on); t:masked_scatter(mask, source); t:argwhere(); ddp.cross(a, b
--   [, dim]) (also t:cross)
-- All are methods but std_mean, var_mean, searchsorted, bucketize and cdist (ddp. functions only); all are ddp.
-- functions but the in-place forms (methods only). Gradients flow through the compositions where PyTorch has one
-- (nansum, nanmean, std_mean, var_mean, mode, cummax, cummin, logcumsumexp, diff, cdist, index_add / index_copy /
-- index_fill, masked_scatter, cross); unique, searchsorted, bucketize and histc give results without a gradient, as
-- PyTorch's. cdist follows PyTorch's compute modes: for p=2 the matmul identity where P or R is over 25 (or with
-- compute_mode="use_mm_for_euclid_dist"; zero distances then read about 1e-15, as PyTorch's), else the differences;
-- at zero distance the gradient is 0, as PyTorch's.
--
-- Deliberate differences from PyTorch:
--  * positions are 1-based: mode's, cummax's and cummin's positions, unique's inverse, argwhere's rows, and
--    searchsorted / bucketize's insertion positions, which run 1..N+1 (PyTorch's 0..N, plus 1); index arguments are
--    1-based int64 positions;
--  * mode: NaNs of a slice count as one value, larger than all others (PyTorch 1.13's answer with NaN depends on its
--    unstable std::sort); on longer slices (over 16 values) PyTorch's position among equal values can be another one
--    of them, ddplua's is always the last;
--  * aminmax has a gradient (amin's and amax's), where PyTorch 1.13 has none;
--  * unique: sorted=false still sorts (a valid order; PyTorch's CPU order is a hash table's); each NaN is a value of
--    its own, and its inverse and counts are right (PyTorch 1.13 gives broken ones next to NaN); unique with dim
--    sorts the slices with one stable sort per column (cost: as many sorts as a slice has values);
--  * searchsorted: out_int32=true is an error (ddplua has no int32 dtype); NaN values go after every boundary (as
--    PyTorch's); NaN in the sequence counts as larger than every value (PyTorch's binary search gives no meaning);
--  * diff: a negative n is an error (PyTorch 1.13 returns the input); uint8 is subtracted as unsigned bytes, as
--    torch.uint8 (PyTorch's bool diff is a logical xor: ddplua has no separate bool);
--  * histc leaves NaN out (PyTorch 1.13's CPU kernel counts it in the first bin when min and max are given);
--  * index_add on an integer tensor with a fractional alpha is an error (as ddplua's add_; PyTorch truncates).
local core = require "ddplua.core"
local E = require "ddplua.errors"
local T = core.Tensor
local M = package.loaded["ddplua"]

local checks = require "ddplua.tensor_checks"
local FLOATS, check_tensor, shape = checks.FLOATS, checks.check_tensor, checks.shape

local NAN, INF = 0 / 0, math.huge

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

local function bool_opt(who, v, name, dflt)
  if v == nil then return dflt end
  if type(v) ~= "boolean" then E.raise(string.format("%s: %s must be a boolean, got %s", who, name, type(v))) end
  return v
end

local function check_float(who, t)
  if not FLOATS[t:dtype()] then
    E.raise(string.format("%s: expected a floating-point tensor, got %s", who, t:dtype()))
  end
end

-- 1..n along dim d of a tensor of size sz (int64, expanded to sz)
local function positions(sz, d, device)
  local n = sz[d]
  local view = {}
  for k = 1, #sz do view[k] = k == d and n or 1 end
  return core.arange(1, n + 1, { dtype = "int64", device = device }):view(view):expand(sz)
end

local function squeeze_if(r, d, keepdim)
  if keepdim then return r end
  return r:squeeze(d)
end

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

-- the running maximum (is_max) or minimum of the detached values of t along d, and its 1-based positions: a
-- Hillis-Steele scan (log2(n) steps) over (value, position) pairs, the later pair taken where it is NaN or at least
-- (at most) the earlier one, which keeps NaN once seen and the latest of equal values, as PyTorch's
local function running_extreme(t, d, is_max)
  local v = t:detach()
  local sz = v:size()
  local n = sz[d]
  local i = positions(sz, d, t:device()):contiguous()
  local float = FLOATS[t:dtype()]
  local s = 1
  while s < n do
    local lv, li = v:narrow(d, 1, n - s), i:narrow(d, 1, n - s)
    local rv, ri = v:narrow(d, s + 1, n - s), i:narrow(d, s + 1, n - s)
    local take = is_max and rv:ge(lv) or rv:le(lv)
    if float then take = take:logical_or(rv:isnan()) end
    v = core.cat({ v:narrow(d, 1, s), core.where(take, rv, lv) }, d)
    i = core.cat({ i:narrow(d, 1, s), core.where(take, ri, li) }, d)
    s = s * 2
  end
  return v, i
end

local function cum_extreme(who, t, dim, is_max)
  check_tensor(who, t)
  if dim == nil then E.raise(who .. ": expected dim (an integer, 1-based), as torch." .. who) end
  local d = norm_dim(who, t, dim)
  if t:dim() == 0 then return t:clone(), core.ones({}, { dtype = "int64", device = t:device() }) end
  if t:numel() == 0 then return t:clone(), core.zeros(t:size(), { dtype = "int64", device = t:device() }) end
  local _, i = running_extreme(t, d, is_max)
  return t:gather(d, i), i -- the gradient goes to the positions, as PyTorch's
end

--- t:cummax(dim) -> the running maxima along dim and their 1-based positions (the latest among equal values; NaN
--- from the first NaN on, at the latest NaN's position)
function T.cummax(t, dim) return cum_extreme("cummax", t, dim, true) end
--- t:cummin(dim) -> the running minima and their positions (as cummax)
function T.cummin(t, dim) return cum_extreme("cummin", t, dim, false) end

--- t:logcumsumexp(dim): log(cumsum(exp(t))) along dim without overflow or underflow: a log-step scan of
--- hi + log1p(exp(lo - hi)) (hi, lo the larger and smaller of each pair); floats only
function T.logcumsumexp(t, dim)
  check_tensor("logcumsumexp", t)
  check_float("logcumsumexp", t)
  if dim == nil then E.raise("logcumsumexp: expected dim (an integer, 1-based), as torch.logcumsumexp") end
  local d = norm_dim("logcumsumexp", t, dim)
  if t:dim() == 0 or t:numel() == 0 then return t:clone() end
  local n = t:size(d)
  local x, s = t, 1
  while s < n do
    local a, b = x:narrow(d, 1, n - s), x:narrow(d, s + 1, n - s)
    local b_hi = b:detach():gt(a:detach())
    local hi, lo = core.where(b_hi, b, a), core.where(b_hi, a, b)
    local same_inf = hi:detach():eq(lo:detach()):logical_and(hi:detach():isinf()) -- inf - inf would be NaN
    local gap = core.where(same_inf, -INF, lo - hi)
    x = core.cat({ x:narrow(d, 1, s), hi + gap:exp():log1p() }, d)
    s = s * 2
  end
  if rawequal(x, t) then x = t:clone() end
  return x
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

-- ---- mode, unique, unique_consecutive --------------------------------------------------------------------------

-- uint8: where consecutive values along d differ (NaN equals NaN when nan_equal), the first always true
local function run_starts(s, d, nan_equal)
  local n = s:size(d)
  local first = core.ones(s:narrow(d, 1, 1):size(), { dtype = "uint8", device = s:device() })
  if n == 1 then return first end
  local prev, cur = s:narrow(d, 1, n - 1), s:narrow(d, 2, n - 1)
  local neq = cur:ne(prev)
  if nan_equal and FLOATS[s:dtype()] then neq = neq:logical_and(cur:isnan():logical_and(prev:isnan()):logical_not()) end
  return core.cat({ first, neq }, d)
end

--- t:mode([dim=-1 [, keepdim]]) -> the most frequent value along dim (the smallest of equally frequent ones; NaNs
--- count as one value, the largest) and its 1-based position (the last that holds it); the gradient goes there
function T.mode(t, dim, keepdim)
  check_tensor("mode", t)
  local d = norm_dim("mode", t, dim or -1)
  if t:dim() == 0 then return t:clone(), core.ones({}, { dtype = "int64", device = t:device() }) end
  local n = t:size(d)
  if n == 0 then E.raise(string.format("mode: cannot reduce over dim %d of size 0 (shape %s)", d, shape(t))) end
  if t:numel() == 0 then
    local sz = t:size()
    sz[d] = 1
    local v, i = core.zeros(sz, { dtype = t:dtype(), device = t:device() }), core.zeros(sz, { dtype = "int64", device = t:device() })
    return squeeze_if(v, d, keepdim), squeeze_if(i, d, keepdim)
  end
  local s, perm = t:detach():sort(d) -- stable: equal values keep their order, NaN last
  local sz = s:size()
  local pos = positions(sz, d, t:device())
  local starts = core.where(run_starts(s, d, true), pos, 0)
  local run_start = running_extreme(starts, d, true) -- the running max of the run starts: each value's run's start
  local count = pos - run_start + 1 -- how many equal values so far in this run
  local best = count:argmax(d, true) -- the first longest run's last value: the smallest most frequent value
  local idx = perm:gather(d, best)
  local v = t:gather(d, idx)
  return squeeze_if(v, d, keepdim), squeeze_if(idx, d, keepdim)
end

-- values, inverse, counts of the slices of x (rows of a [n, k] tensor, or the values of a 1-D one) in order
-- (sort_first: sorted first, the inverse put back in the input's order)
local function unique_rows(x, sort_first)
  local n = x:size(1)
  local opts = { dtype = "int64", device = x:device() }
  if n == 0 then return x:clone(), core.zeros({ 0 }, opts), core.zeros({ 0 }, opts) end
  local perm
  if sort_first then
    if x:dim() == 1 then
      x, perm = x:sort(1)
    else
      perm = core.arange(1, n + 1, opts)
      for c = x:size(2), 1, -1 do -- least significant column first: stable sorts make the order lexicographic
        local _, p = x:select(2, c):index_select(1, perm):sort(1)
        perm = perm:index_select(1, p)
      end
      x = x:index_select(1, perm)
    end
  end
  local starts
  if x:dim() == 1 then
    starts = run_starts(x, 1, false)
  else
    local diff = x:narrow(1, 2, n - 1):ne(x:narrow(1, 1, n - 1)):any(2)
    starts = core.cat({ core.ones({ 1 }, { dtype = "uint8", device = x:device() }), diff }, 1)
  end
  local where = starts:nonzero():select(2, 1)
  local values = x:index_select(1, where)
  local group = starts:long():cumsum(1)
  local inverse = perm and core.zeros({ n }, opts):scatter(1, perm, group) or group
  local ends = core.cat({ where:narrow(1, 2, where:size(1) - 1), core.full({ 1 }, n + 1, opts) }, 1)
  return values, inverse, ends - where
end

local function unique_impl(who, t, opts, consecutive)
  check_tensor(who, t)
  local o = options(who, opts, consecutive and { "return_inverse", "return_counts", "dim" } or
    { "sorted", "return_inverse", "return_counts", "dim" })
  bool_opt(who, o.sorted, "sorted", true)
  local want_inv = bool_opt(who, o.return_inverse, "return_inverse", false)
  local want_counts = bool_opt(who, o.return_counts, "return_counts", false)
  local x = t:detach()
  local values, inverse, counts
  if o.dim == nil then
    values, inverse, counts = unique_rows(x:reshape(-1), not consecutive)
    inverse = inverse:reshape(t:size())
  else
    if t:dim() == 0 then E.raise(who .. ": dim needs a tensor of at least one dimension, got a 0-dimensional one") end
    local d = norm_dim(who, t, o.dim)
    local m = x:movedim(d, 1)
    local sz = m:size()
    if m:numel() == 0 and sz[1] > 0 then
      E.raise(string.format("%s: the slices along dim %d of a %s tensor are empty: there is nothing to compare", who,
        d, shape(t)))
    end
    local rows = m:reshape({ sz[1], m:numel() // math.max(sz[1], 1) })
    values, inverse, counts = unique_rows(rows, not consecutive)
    sz[1] = values:size(1)
    values = values:reshape(sz):movedim(1, d)
  end
  local out = { values }
  if want_inv then out[#out + 1] = inverse end
  if want_counts then out[#out + 1] = counts end
  return table.unpack(out)
end

--- ddp.unique(t [, {sorted=true, return_inverse=false, return_counts=false, dim=}]) -> the distinct values
--- (sorted; of the flattened tensor, or the distinct slices along dim) [, for each value (slice) of t its 1-based
--- position among them] [, how many times each occurs]; no gradient
function T.unique(t, opts) return unique_impl("unique", t, opts, false) end
--- ddp.unique_consecutive(t [, {return_inverse=, return_counts=, dim=}]): as unique, for runs of equal neighbours
function T.unique_consecutive(t, opts) return unique_impl("unique_consecutive", t, opts, true) end

-- ---- searchsorted, bucketize, histc ----------------------------------------------------------------------------

-- common dtype of the sequence and the values: the floating one's where one is floating
local function common(a, b)
  if a:dtype() == b:dtype() then return a, b end
  if FLOATS[a:dtype()] and not FLOATS[b:dtype()] then return a, b:to(a:dtype()) end
  if FLOATS[b:dtype()] and not FLOATS[a:dtype()] then return a:to(b:dtype()), b end
  return a:double(), b:double()
end

-- 1-based insertion positions of v (a tensor) in the rows of seq ([B, N]; v [B, V]): each value's count of
-- boundaries before it (strictly smaller, or not larger with right) plus 1, from one stable sort of the boundaries
-- and values together, the values placed before equal boundaries (left) or after them (right)
local function insertion(seq, v, right)
  local B, N, V = seq:size(1), seq:size(2), v:size(2)
  local io = { dtype = "int64", device = v:device() }
  if V == 0 then return core.zeros({ B, 0 }, io) end
  if N == 0 then return core.ones({ B, V }, io) end
  local keys, isb
  if right then
    keys = core.cat({ seq, v }, 2)
    isb = core.cat({ core.ones({ B, N }, io), core.zeros({ B, V }, io) }, 2)
  else
    keys = core.cat({ v, seq }, 2)
    isb = core.cat({ core.zeros({ B, V }, io), core.ones({ B, N }, io) }, 2)
  end
  local _, perm = keys:sort(2)
  local before = isb:gather(2, perm):cumsum(2)
  local at = core.zeros({ B, N + V }, io):scatter(2, perm, before)
  local r = (right and at:narrow(2, N + 1, V) or at:narrow(2, 1, V)) + 1
  if FLOATS[v:dtype()] then r = core.where(v:isnan(), N + 1, r) end
  return r
end

local function search(who, seq, values, right)
  local v = values
  if type(values) == "number" then
    local dt = (math.type(values) == "integer" and not FLOATS[seq:dtype()]) and "int64" or
      (FLOATS[seq:dtype()] and seq:dtype() or "float32")
    v = core.full({}, values, { dtype = dt, device = seq:device() })
  else
    check_tensor(who, values, " or a number as the values")
  end
  local s
  s, v = common(seq:detach(), v:detach())
  local N = s:size(s:dim())
  local out_size = v:size()
  local S, Vr
  if s:dim() == 1 then
    S, Vr = s:reshape({ 1, N }), v:reshape({ 1, v:numel() })
  else
    local ok = v:dim() == s:dim()
    for k = 1, s:dim() - 1 do ok = ok and v:size(k) == s:size(k) end
    if not ok then
      E.raise(string.format("%s: the sorted sequence must be 1-D or share all dims but the last with the values, got %s and %s",
        who, shape(s), shape(v)))
    end
    local B = s:numel() // math.max(N, 1)
    if N == 0 then B = 1; for k = 1, s:dim() - 1 do B = B * s:size(k) end end
    S, Vr = s:reshape({ B, N }), v:reshape({ B, v:size(v:dim()) })
  end
  return insertion(S, Vr, right):reshape(out_size)
end

--- ddp.searchsorted(sorted_sequence, values [, {right=false, side="left"|"right", sorter=, out_int32=false}]):
--- int64 1-based insertion positions (1..N+1) of values (a tensor or a number) in the last dim of the sequence
--- (1-D, or sharing the values' leading dims): before equal boundaries, or after them with right / side="right";
--- sorter: 1-based positions that sort an unsorted sequence
function M.searchsorted(seq, values, opts)
  check_tensor("searchsorted", seq, " as the sorted sequence")
  local o = options("searchsorted", opts, { "right", "side", "sorter", "out_int32" })
  local right = bool_opt("searchsorted", o.right, "right", false)
  if o.side ~= nil then
    if o.side ~= "left" and o.side ~= "right" then
      E.raise("searchsorted: side must be \"left\" or \"right\", got " .. tostring(o.side))
    end
    if o.right ~= nil and right ~= (o.side == "right") then
      E.raise("searchsorted: side and right can't be set to opposites, got side=" .. o.side .. " and right=" ..
        tostring(right))
    end
    right = o.side == "right"
  end
  if bool_opt("searchsorted", o.out_int32, "out_int32", false) then
    E.raise("searchsorted: out_int32=true is not supported (ddplua has no int32 dtype; positions are int64)")
  end
  if seq:dim() == 0 then E.raise("searchsorted: the sorted sequence must have at least one dimension, got a 0-dimensional one") end
  if o.sorter ~= nil then
    check_tensor("searchsorted", o.sorter, " as sorter")
    if o.sorter:dtype() ~= "int64" or shape(o.sorter) ~= shape(seq) then
      E.raise(string.format("searchsorted: sorter must be an int64 tensor of the sequence's shape %s, got %s %s",
        shape(seq), o.sorter:dtype(), shape(o.sorter)))
    end
    seq = seq:gather(seq:dim(), o.sorter)
  end
  return search("searchsorted", seq, values, right)
end

--- ddp.bucketize(input, boundaries [, {right=false}]): for each value the 1-based bucket (1..N+1) among the 1-D
--- boundaries: boundaries[i-1] < x <= boundaries[i], or boundaries[i-1] <= x < boundaries[i] with right
function M.bucketize(input, boundaries, opts)
  if type(input) ~= "number" then check_tensor("bucketize", input, " or a number as the input") end
  check_tensor("bucketize", boundaries, " as the boundaries")
  local o = options("bucketize", opts, { "right", "out_int32" })
  if bool_opt("bucketize", o.out_int32, "out_int32", false) then
    E.raise("bucketize: out_int32=true is not supported (ddplua has no int32 dtype; positions are int64)")
  end
  if boundaries:dim() ~= 1 then
    E.raise("bucketize: the boundaries must be a 1-D tensor, got " .. shape(boundaries))
  end
  return search("bucketize", boundaries, input, bool_opt("bucketize", o.right, "right", false))
end

--- ddp.histc(t [, bins=100 [, min=0 [, max=0]]]): counts of the values in bins equal-width bins over [min, max]
--- (min = max: the values' own range; still equal: widened by 1 each way), values outside (and NaN) left out, the
--- last bin closed; t's dtype, floats only, no gradient
function T.histc(t, bins, min, max)
  check_tensor("histc", t)
  check_float("histc", t)
  bins = bins == nil and 100 or bins
  if math.type(bins) ~= "integer" or bins < 1 then E.raise("histc: bins must be a positive integer, got " .. tostring(bins)) end
  min, max = min == nil and 0 or min, max == nil and 0 or max
  if type(min) ~= "number" or type(max) ~= "number" then E.raise("histc: min and max must be numbers") end
  local x = t:detach():reshape(-1)
  local dt = t:dtype()
  local function as_dtype(v) return core.full({}, v, { dtype = dt }):item() end
  local lo, hi = as_dtype(min), as_dtype(max)
  if lo == hi and x:numel() > 0 then lo, hi = x:min():item(), x:max():item() end
  if lo == hi then lo, hi = lo - 1, hi + 1 end
  if lo ~= lo or hi ~= hi or lo == -INF or hi == INF or lo == INF or hi == -INF then
    E.raise(string.format("histc: the range [%s, %s] is not finite", tostring(lo), tostring(hi)))
  end
  if lo > hi then E.raise(string.format("histc: max must be larger than min, got min %s and max %s", tostring(min), tostring(max))) end
  local opts = { dtype = dt, device = t:device() }
  if x:numel() == 0 then return core.zeros({ bins }, opts) end
  local inside = x:ge(lo):logical_and(x:le(hi))
  local b = ((x - lo) * bins / (hi - lo)):floor():clamp(0, bins - 1)
  local slot = core.where(inside, b:long() + 1, bins + 1)
  return core.zeros({ bins + 1 }, opts):scatter_add(1, slot, core.ones({ x:numel() }, opts)):narrow(1, 1, bins)
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

for _, name in ipairs({ "nansum", "nanmean", "aminmax", "mode", "cummax", "cummin", "logcumsumexp", "diff", "unique",
  "unique_consecutive", "histc", "index_add", "index_copy", "index_fill", "masked_scatter", "argwhere", "cross" }) do
  M[name] = T[name]
end

return T
