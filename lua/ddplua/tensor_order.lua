-- PyTorch's order statistics, composed from ddplua's ops (sort is the radix sort of backends/cpu/cpu_radix_sort.c
-- for rows of 48 values and more; unique of integers spanning fewer values than twice their count counts them
-- instead) with PyTorch's argument order, 1-based dims (negative from the end) and 1-based positions:
--   t:mode([dim [, keepdim]]) -> values, positions    the most frequent value (the smallest among equally frequent
--                                                     ones) and the last position that holds it
--   ddp.unique(t [, {sorted=, return_inverse=, return_counts=, dim=}]) -> values [, inverse] [, counts]
--   ddp.unique_consecutive(t [, {return_inverse=, return_counts=, dim=}]) (both also methods)
--   ddp.searchsorted(seq, values [, {right=, side=, sorter=, out_int32=}]), ddp.bucketize(x, boundaries [, {right=}])
--                                                     (a binary search per value in C: core.searchsorted)
--   ddp.histc(t [, bins [, min [, max]]])  (also t:histc)
--   ddp.histogram(t, bins [, {range=, weight=, density=}]) -> hist, bin_edges   (bins a count or the edges)
--   ddp.bincount(t [, {weights=, minlength=}])        counts of the values of a 1-D non-negative integer tensor
--   ddp.quantile(t, q [, dim [, keepdim]] [, {dim=, keepdim=, interpolation=}]), ddp.nanquantile(...)
--   t:nanmedian([dim [, keepdim]])                    median() leaving NaN out
--   ddp.msort(t)                                      t:sort(1)'s values
-- All are methods but searchsorted and bucketize (ddp. functions only), and all are ddp. functions. Gradients flow
-- through mode, quantile, nanquantile, nanmedian and msort; unique, searchsorted, bucketize, histc, histogram and
-- bincount give results without a gradient, as PyTorch's.
--
-- Deliberate differences from PyTorch:
--  * positions are 1-based: mode's and nanmedian's positions, unique's inverse, and searchsorted / bucketize's
--    insertion positions, which run 1..N+1 (PyTorch's 0..N, plus 1);
--  * mode: NaNs of a slice count as one value, larger than all others (PyTorch 1.13's answer with NaN depends on its
--    unstable std::sort); on longer slices (over 16 values) PyTorch's position among equal values can be another one
--    of them, ddplua's is always the last;
--  * unique: sorted=false still sorts (a valid order; PyTorch's CPU order is a hash table's); each NaN is a value of
--    its own, and its inverse and counts are right (PyTorch 1.13 gives broken ones next to NaN); unique with dim
--    sorts the slices with one stable sort per column (cost: as many sorts as a slice has values);
--  * searchsorted: out_int32=true is an error (ddplua has no int32 dtype); NaN values go after every boundary (as
--    PyTorch's); NaN in the sequence counts as larger than every value (PyTorch's binary search gives no meaning);
--  * histc and histogram leave NaN out (PyTorch 1.13's CPU histc counts it in the first bin when min and max are
--    given);
--  * nanmedian of a slice of NaNs: position 1 (PyTorch's is wherever its nth_element leaves a NaN);
--  * quantile and nanquantile give q no gradient;
--  * bincount's weights: float32 weights give float32 counts, all others float64 (PyTorch 1.13 the same for
--    float32, float64 and integers).
local core = require "ddplua.core"
local E = require "ddplua.errors"
local T = core.Tensor
local M = package.loaded["ddplua"]

local checks = require "ddplua.tensor_checks"
local FLOATS, check_tensor, shape, norm_dim = checks.FLOATS, checks.check_tensor, checks.shape, checks.norm_dim
local options, bool_opt, check_float, squeeze_if = checks.check_opts, checks.bool_opt, checks.check_float,
  checks.squeeze_if

local INF = math.huge

-- [size] counts (int64) of the 0-based int64 slots, or with weights their sums (the weights' dtype): one pass in C
-- on the CPU (core.bincount), scatter_add elsewhere
local function counts_of(slots, weights, size)
  local dev = slots:device()
  if dev == "cpu" then
    local wdt = weights and weights:dtype()
    if wdt and wdt ~= "float32" and wdt ~= "float64" then return core.bincount(slots, weights:float(), size):to(wdt) end
    return core.bincount(slots, weights, size)
  end
  local src = weights or core.ones({ slots:numel() }, { dtype = "int64", device = dev })
  return core.zeros({ size }, { dtype = src:dtype(), device = dev }):scatter_add(1, slots + 1, src)
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
  local run = run_starts(s, d, true):long():cumsum(d) -- each sorted value's run, numbered from 1 along d
  local counts = core.zeros(s:size(), { dtype = "int64", device = t:device() }):scatter_add(d, run, core.ones(s:size(), { dtype = "int64", device = t:device() }))
  local best = counts:argmax(d, true) -- the first longest run: the smallest most frequent value
  local last = counts:cumsum(d):gather(d, best) -- that run's last position in the sorted order
  local idx = perm:gather(d, last)
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

-- unique of the integers of the 1-D x by counting, when they span fewer than twice as many values as there are
-- (PyTorch's CPU unique hashes them): a count per value of the span, the present ones in order, each value's
-- inverse the running count of present values at it (only when wanted). nil when the span is wider.
local function unique_counting(x, want_inverse)
  local n = x:numel()
  local lo, hi = x:min():item(), x:max():item()
  if (hi + 0.0) - lo >= 2 * n + 1024 then return nil end -- (in floats: hi - lo may not fit an int64)
  local slot = x:long() - lo -- 0-based within the span
  local counts = counts_of(slot, nil, hi - lo + 1)
  local present = counts:gt(0)
  local at = present:nonzero():select(2, 1)
  local inverse = want_inverse and present:long():cumsum(1):index_select(1, slot + 1) or slot
  return (at + (lo - 1)):to(x:dtype()), inverse, counts:index_select(1, at)
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
    local flat = x:reshape(-1)
    if not consecutive and not FLOATS[x:dtype()] and flat:numel() > 0 then
      values, inverse, counts = unique_counting(flat, want_inv)
    end
    if not values then values, inverse, counts = unique_rows(flat, not consecutive) end
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
  return core.searchsorted(S, Vr, right):reshape(out_size) -- a binary search per value in C
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
  if bins > 1 << 59 then E.raise("histc: bins " .. bins .. " is too large (more than 2^59)") end
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
  local slot = core.where(inside, b:long(), bins) -- 0-based; the values outside in one more
  return counts_of(slot, nil, bins + 1):narrow(1, 1, bins):to(dt)
end

-- ---- quantile, nanquantile, nanmedian, msort ---------------------------------------------------------------------

local INTERPOLATIONS = { linear = true, lower = true, higher = true, midpoint = true, nearest = true }

-- (t, q [, dim [, keepdim]] [, {interpolation=}]) or (t, q, {dim=, keepdim=, interpolation=}) -> dim, keepdim, mode
local function quantile_args(who, a3, a4, a5)
  local dim, keepdim, o
  if type(a3) == "table" then
    if a4 ~= nil or a5 ~= nil then
      E.raise(who .. ": expected (t, q, {dim=, keepdim=, interpolation=}) or (t, q, dim, keepdim, {interpolation=})")
    end
    o = options(who, a3, { "dim", "keepdim", "interpolation" })
    dim, keepdim = o.dim, o.keepdim
  else
    dim, keepdim = a3, a4
    o = options(who, a5, { "interpolation" })
  end
  keepdim = bool_opt(who, keepdim, "keepdim", false)
  local mode = o.interpolation == nil and "linear" or o.interpolation
  if not INTERPOLATIONS[mode] then
    E.raise(who .. ": interpolation must be one of linear, lower, higher, midpoint, nearest; got " .. tostring(mode))
  end
  return dim, keepdim, mode
end

-- q as a 1-D tensor of t's dtype, checked to lie in [0, 1]; and whether it was a scalar
local function quantile_q(who, t, q)
  local qt, scalar
  if type(q) == "number" then
    qt, scalar = core.full({ 1 }, q, { dtype = t:dtype(), device = t:device() }), true
  elseif core.is_tensor(q) then
    if q:dim() > 1 then
      E.raise(string.format("%s: q must be a number or a 0-D or 1-D tensor, got shape %s", who, shape(q)))
    end
    if q:dtype() ~= t:dtype() then
      E.raise(string.format("%s: q must have the input's dtype %s, got %s", who, t:dtype(), q:dtype()))
    end
    qt, scalar = q:detach():reshape(-1), q:dim() == 0
  else
    E.raise(who .. ": q must be a number or a tensor, got " .. type(q))
  end
  if qt:numel() > 0 and qt:ge(0):logical_and(qt:le(1)):all():item() == 0 then
    E.raise(string.format("%s: q must be in the range [0, 1], got %s", who, type(q) == "number" and tostring(q) or
      "a value outside it"))
  end
  return qt, scalar
end

-- PyTorch's quantile: the slices sorted (NaN last), each q's rank q * (n - 1) (NaN slices: the last rank, so NaN;
-- ignore_nan: q * (count of numbers - 1), at least 0), adjusted by the interpolation, the two neighbours gathered and
-- lerped in t's dtype
local function quantile_impl(who, t, q, a3, a4, a5, ignore_nan)
  check_tensor(who, t)
  check_float(who, t)
  local dim, keepdim, mode = quantile_args(who, a3, a4, a5)
  local qt, scalar_q = quantile_q(who, t, q)
  if t:numel() == 0 then
    E.raise(string.format("%s: the input tensor must be non-empty, got shape %s", who, shape(t)))
  end
  local x, out = nil, {}
  if not scalar_q then out[1] = qt:numel() end
  if dim == nil then
    x = t:reshape({ 1, -1 })
    if keepdim then for _ = 1, t:dim() do out[#out + 1] = 1 end end
  else
    local d = norm_dim(who, t, dim)
    for k = 1, t:dim() do
      if k ~= d then out[#out + 1] = t:size(k) elseif keepdim then out[#out + 1] = 1 end
    end
    x = t:dim() == 0 and t:reshape({ 1, 1 }) or t:movedim(d, -1):reshape({ -1, t:size(d) })
  end
  local n, dt = x:size(2), t:dtype()
  local sorted = x:sort(2)
  local isnan = sorted:detach():isnan()
  local qrow = qt:reshape({ 1, -1 })
  local ranks
  if ignore_nan then
    local count = isnan:logical_not():sum(2, true):to(dt)
    ranks = qrow * (count - 1)
    ranks = core.where(ranks:lt(0), 0, ranks)
  else
    ranks = core.where(isnan:any(2, true), n - 1, qrow * (n - 1))
  end
  if mode == "lower" then ranks = ranks:floor()
  elseif mode == "higher" then ranks = ranks:ceil()
  elseif mode == "nearest" then ranks = ranks:round() end
  local below = ranks:long()
  local r = sorted:gather(2, below + 1)
  if mode == "linear" or mode == "midpoint" then
    local w = mode == "midpoint" and core.full(ranks:size(), 0.5, { dtype = dt, device = t:device() }) or
      ranks - below:to(dt)
    r = r:lerp(sorted:gather(2, ranks:ceil():long() + 1), w)
  end
  return r:t():reshape(out)
end

--- ddp.quantile(t, q [, dim [, keepdim]] [, {interpolation="linear"}]) or ddp.quantile(t, q, {dim=, keepdim=,
--- interpolation=}): the q-th quantiles (q a number or a 1-D tensor in [0, 1], its values a leading dim) of all
--- values or along dim; NaN where a slice holds NaN; interpolation linear, lower, higher, midpoint or nearest
function T.quantile(t, q, a3, a4, a5) return quantile_impl("quantile", t, q, a3, a4, a5, false) end
--- ddp.nanquantile(...): quantile with NaN left out (NaN for a slice of NaNs only)
function T.nanquantile(t, q, a3, a4, a5) return quantile_impl("nanquantile", t, q, a3, a4, a5, true) end

--- t:nanmedian(): the lower median of the values that are not NaN (NaN when all are); t:nanmedian(dim [, keepdim])
--- -> values and 1-based positions along dim (a slice of NaNs: NaN at position 1)
function T.nanmedian(t, dim, keepdim)
  check_tensor("nanmedian", t)
  if not FLOATS[t:dtype()] then return t:median(dim, keepdim) end
  if dim == nil then
    if keepdim ~= nil then E.raise("nanmedian: keepdim needs a dim") end
    local x = t:reshape(-1)
    local keep = x:detach():isnan():logical_not()
    if x:numel() == 0 or keep:any():item() == 0 then return x:median() end
    return x:masked_select(keep):median()
  end
  local d = norm_dim("nanmedian", t, dim)
  if t:dim() == 0 then return t:median(d, keepdim) end
  if t:size(d) == 0 then
    E.raise(string.format("nanmedian: cannot reduce over dim %d of size 0 (shape %s)", d, shape(t)))
  end
  local sorted, perm = t:sort(d) -- NaN last: the numbers first, in order
  local count = t:detach():isnan():logical_not():sum(d, true)
  local k = core.where(count:gt(0), (count + 1):floor_divide(2), 1) -- 1-based: the lower median
  return squeeze_if(sorted:gather(d, k), d, keepdim), squeeze_if(perm:gather(d, k), d, keepdim)
end

--- ddp.msort(t): t sorted along its first dim (sort's values)
function T.msort(t)
  check_tensor("msort", t)
  return (t:sort(1))
end

-- ---- bincount, histogram ------------------------------------------------------------------------------------------

--- t:bincount([weights [, minlength=0]]) or t:bincount({weights=, minlength=}): for a 1-D tensor of non-negative
--- integers, how often each value 0..max occurs (int64; with weights, their sums: float32 for float32 weights,
--- else float64), at least minlength counts
function T.bincount(t, a2, a3)
  check_tensor("bincount", t)
  local weights, minlength = a2, a3
  if type(a2) == "table" and not core.is_tensor(a2) then
    if a3 ~= nil then E.raise("bincount: expected (weights, minlength) or ({weights=, minlength=})") end
    local o = options("bincount", a2, { "weights", "minlength" })
    weights, minlength = o.weights, o.minlength
  end
  minlength = minlength == nil and 0 or minlength
  if math.type(minlength) ~= "integer" or minlength < 0 then
    E.raise("bincount: minlength must be a non-negative integer, got " .. tostring(minlength))
  end
  if t:dim() ~= 1 or FLOATS[t:dtype()] then
    E.raise(string.format("bincount: expected a 1-D tensor of non-negative integers, got %s %s", t:dtype(), shape(t)))
  end
  local x, n = t:detach():long(), t:numel()
  local size = minlength
  if n > 0 then
    local lo = x:min():item()
    if lo < 0 then E.raise("bincount: the values must be non-negative, got " .. lo) end
    size = math.max(size, x:max():item() + 1)
  end
  local dev = t:device()
  local src
  if weights ~= nil then
    check_tensor("bincount", weights, " as weights")
    if weights:dim() ~= 1 or weights:numel() ~= n then
      E.raise(string.format("bincount: weights must be 1-D with the input's %d values, got shape %s", n,
        shape(weights)))
    end
    src = weights:detach():to(weights:dtype() == "float32" and "float32" or "float64")
  end
  return counts_of(x, src, size)
end

-- the range {min, max} of histogram's option, checked
local function range_arg(v)
  if type(v) ~= "table" or core.is_tensor(v) or type(v[1]) ~= "number" or type(v[2]) ~= "number" or #v ~= 2 then
    E.raise("histogram: range must be a table of two numbers {min, max}, got " .. type(v))
  end
  return v[1], v[2]
end

--- ddp.histogram(t, bins [, {range={min, max}, weight=, density=false}]) -> hist, bin_edges: bins equal-width bins
--- over range (default the values' min and max, widened by 0.5 each way when equal) or the given edges (a 1-D
--- tensor, increasing); each value counted (or its weight added) in the bin [e_i, e_i+1), the last bin closed,
--- values outside and NaN left out; density divides by the total times the bin width. t's dtype, floats only.
function T.histogram(t, bins, opts)
  check_tensor("histogram", t)
  check_float("histogram", t)
  local o = options("histogram", opts, { "range", "weight", "density" })
  local density = bool_opt("histogram", o.density, "density", false)
  local dt, dev = t:dtype(), t:device()
  local x = t:detach():reshape(-1)
  local edges
  if math.type(bins) == "integer" then
    if bins < 1 then E.raise("histogram: bins must be a positive integer, got " .. bins) end
    if bins > 1 << 59 then E.raise("histogram: bins " .. bins .. " is too large (more than 2^59)") end
    local lo, hi
    if o.range ~= nil then lo, hi = range_arg(o.range)
    elseif x:numel() > 0 then lo, hi = x:min():item(), x:max():item()
    else lo, hi = 0, 1 end
    if lo ~= lo or hi ~= hi or lo == INF or lo == -INF or hi == INF or hi == -INF then
      E.raise(string.format("histogram: the range [%s, %s] is not finite", tostring(lo), tostring(hi)))
    end
    if lo > hi then E.raise(string.format("histogram: min must not exceed max, got min %s and max %s", lo, hi)) end
    if lo == hi then lo, hi = lo - 0.5, hi + 0.5 end
    edges = M.linspace(lo, hi, bins + 1, { dtype = dt, device = dev })
  elseif core.is_tensor(bins) then
    if o.range ~= nil then E.raise("histogram: range must not be given with bin edges") end
    if bins:dim() ~= 1 or bins:numel() < 1 or bins:dtype() ~= dt then
      E.raise(string.format("histogram: bin edges must be a 1-D %s tensor of at least one value, got %s %s", dt,
        bins:dtype(), shape(bins)))
    end
    edges = bins:detach():contiguous()
    local nb = edges:numel() - 1
    if nb > 0 and edges:narrow(1, 2, nb):lt(edges:narrow(1, 1, nb)):any():item() ~= 0 then
      E.raise("histogram: the bin edges must increase monotonically")
    end
  else
    E.raise("histogram: bins must be a positive integer or a 1-D tensor of bin edges, got " .. type(bins))
  end
  local nb = edges:numel() - 1
  local w
  if o.weight ~= nil then
    check_tensor("histogram", o.weight, " as weight")
    if shape(o.weight) ~= shape(t) or o.weight:dtype() ~= dt then
      E.raise(string.format("histogram: weight must be a %s tensor of the input's shape %s, got %s %s", dt, shape(t),
        o.weight:dtype(), shape(o.weight)))
    end
    w = o.weight:detach():reshape(-1)
  end
  if nb == 0 then return core.zeros({ 0 }, { dtype = dt, device = dev }), edges end
  local hist
  if dev == "cpu" and (dt == "float32" or dt == "float64") then -- one pass in C
    hist = core.histogram(x, w, edges, math.type(bins) == "integer")
    if density then hist = hist / (hist:sum() * (edges:narrow(1, 2, nb) - edges:narrow(1, 1, nb))) end
    return hist, edges
  end
  w = w or core.ones({ x:numel() }, { dtype = dt, device = dev })
  -- the 1-based bin of each value: how many edges are at or below it; the last edge closes the last bin
  local b = M.searchsorted(edges, x, { right = true }) - 1
  b = core.where(x:eq(edges:narrow(1, nb + 1, 1)), nb, b)
  local slot = core.where(b:ge(1):logical_and(b:le(nb)), b - 1, nb) -- 0-based; the values outside in one more
  hist = counts_of(slot, w, nb + 1):narrow(1, 1, nb)
  if density then hist = hist / (hist:sum() * (edges:narrow(1, 2, nb) - edges:narrow(1, 1, nb))) end
  return hist, edges
end

for _, name in ipairs({ "mode", "unique", "unique_consecutive", "histc", "histogram", "bincount", "quantile",
  "nanquantile", "nanmedian", "msort" }) do
  M[name] = T[name]
end

return T
