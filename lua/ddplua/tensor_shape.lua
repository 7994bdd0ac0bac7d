-- PyTorch's creation and shape functions that ddplua's ops compose (PyTorch 1.13's semantics, 1-based dims and
-- indices, negative dims from the end; options as a trailing table {dtype=, device=}, as ddp.zeros):
--   creation: ddp.linspace(start, end, steps [, opts]), ddp.logspace(start, end, steps [, base [, opts]]),
--     ddp.eye(n [, m] [, opts]), ddp.triu_indices(row, col [, offset [, opts]]), ddp.tril_indices(...),
--     ddp.empty_like(t [, opts]), ddp.randint_like(t, [low,] high [, opts]), t:new_tensor(data [, opts]),
--     t:new_empty(size [, opts]);
--   several tensors: ddp.meshgrid(a, b, ... [, {indexing = "ij" | "xy"}]), ddp.cartesian_prod(a, b, ...),
--     ddp.block_diag(a, b, ...), ddp.broadcast_tensors(a, b, ...), ddp.atleast_1d / _2d / _3d(a, ...),
--     ddp.vstack / hstack / dstack / column_stack({a, b, ...}), ddp.concat (ddp.cat);
--   methods (each also a ddp. function): t:broadcast_to(shape), t:take(index), t:take_along_dim(indices [, dim]),
--     t:diagonal([offset [, dim1 [, dim2]]]), t:diag_embed([offset [, dim1 [, dim2]]]), t:swapaxes(d1, d2),
--     t:swapdims(d1, d2), t:ravel(), t:repeat_interleave(repeats [, dim]), t:unflatten(dim, sizes), ddp.numel(t);
--     ddp.repeat_interleave(repeats) (an int64 1-D tensor: 1-based positions, each repeated);
--   dtype shorthands: t:half() (float16), t:bfloat16(), t:bool() (uint8, ddplua's bool: t ~= 0, NaN true).
-- The gradients come from the composition (view, expand, reshape, index_select, gather, cat, movedim).
--
-- Deliberate differences from PyTorch:
--   * every index is 1-based: triu_indices / tril_indices give 1-based rows and columns, take's positions and
--     take_along_dim's indices are 1-based (1..n; no negative positions), ddp.repeat_interleave(repeats) gives
--     1-based positions;
--   * functions that PyTorch gives a tuple of tensors (meshgrid, broadcast_tensors, atleast_*d of several
--     tensors) return several values (as t:split); given one Lua list of tensors they return a Lua list;
--   * meshgrid without indexing warns once (as PyTorch 1.13) and uses "ij";
--   * linspace and logspace take numbers (not 0-dim tensors) and floating dtypes only (PyTorch's integer linspace
--     truncates values its vectorised CPU loop computes with a truncated step); linspace gives PyTorch CPU's
--     float32 / float64 values bit for bit as its AVX2 kernel computes them (fused multiply-adds, blocks of 8
--     float32 or 4 float64 values counted from one base) on one thread (PyTorch's threads split more than 32768
--     steps at other places), float16 / bfloat16 the float32 values rounded once;
--   * diagonal is a copy, not a view (writing into it does not change t);
--   * repeat_interleave of a 0-dim tensor takes dim 1 and -1 (as every ddplua function), PyTorch 1.13 none;
--   * t:bool() is uint8 (ddplua has no bool dtype); t:int() and t:short() are absent (no int32 / int16 dtypes).
local core = require "ddplua.core"
local E = require "ddplua.errors"
local T = core.Tensor
local M = package.loaded["ddplua"]

local checks = require "ddplua.tensor_checks"
local FLOATS, check_tensor, shape = checks.FLOATS, checks.check_tensor, checks.shape

-- a 1-based dim of a tensor of nd dims (a 0-dim tensor takes 1 and -1, as PyTorch takes 0 and -1)
local function norm_dim(who, nd, d, what)
  if math.type(d) ~= "integer" then
    E.raise(string.format("%s: %s must be an integer (1-based), got %s", who, what or "dim", tostring(d)))
  end
  local n = math.max(nd, 1)
  local r = d < 0 and d + n + 1 or d
  if r < 1 or r > n then
    E.raise(string.format("%s: dim %d is out of range for a %d-dimensional tensor", who, d, nd))
  end
  return r
end

local function check_int(who, v, what, min)
  if math.type(v) ~= "integer" or (min and v < min) then
    E.raise(string.format("%s: %s must be an integer%s, got %s", who, what,
      min == 0 and " >= 0" or (min and " >= " .. min or ""), tostring(v)))
  end
  return v
end

-- a shape given as a table of integers >= 0 (what = "shape", "sizes")
local function check_shape(who, s, what, allow_minus1)
  if type(s) ~= "table" then
    E.raise(string.format("%s: expected a table of integers as the %s, got %s", who, what, type(s)))
  end
  for _, v in ipairs(s) do
    if math.type(v) ~= "integer" or (v < 0 and not (allow_minus1 and v == -1)) then
      E.raise(string.format("%s: the %s must hold integers >= 0%s, got %s", who, what,
        allow_minus1 and " (or -1)" or "", tostring(v)))
    end
  end
  return s
end

-- the options table {dtype=, device=} (nil: none), its keys checked (or those of `valid`)
local function check_opts(who, opts, valid) return checks.check_opts(who, opts, valid or { "dtype", "device" }) end

-- the dtype and device of a new tensor made like t: t's unless opts say otherwise
local function like(t, opts)
  return { dtype = opts and opts.dtype or t:dtype(), device = opts and opts.device or t:device() }
end

-- a new tensor made on the cpu, moved to opts.device where that is another device
local function on_device(x, opts)
  if opts.device ~= nil and opts.device ~= "cpu" then return x:to(opts.device) end
  return x
end

-- the tensors of a call f(a, b, ...) or f({a, b, ...}): the list, and whether it came as one Lua list
local function tensor_args(who, ...)
  local n = select("#", ...)
  local first = ...
  local list, as_list = table.pack(...), false
  if n == 1 and type(first) == "table" and not core.is_tensor(first) then list, as_list = first, true end
  local count = as_list and #list or list.n
  for k = 1, count do check_tensor(who, list[k], string.format(" as argument %d", k)) end
  return list, count, as_list
end

local function results(list, as_list)
  if as_list then return list end
  return table.unpack(list, 1, #list)
end

local function broadcast_shapes(who, list)
  local out, nd = {}, 0
  for _, t in ipairs(list) do nd = math.max(nd, t:dim()) end
  for k = 1, nd do out[k] = 1 end
  for _, t in ipairs(list) do
    local s = t:size()
    for k = 1, #s do
      local o, x = nd - #s + k, s[k]
      if x ~= out[o] and x ~= 1 and out[o] ~= 1 then
        local shapes = {}
        for _, u in ipairs(list) do shapes[#shapes + 1] = shape(u) end
        E.raise(string.format("%s: the shapes %s do not broadcast", who, table.concat(shapes, ", ")))
      end
      if x ~= 1 then out[o] = x end
    end
  end
  return out
end

-- ---- creation ---------------------------------------------------------------------------------------------------

local function f32(x) return (string.unpack("f", string.pack("f", x))) end

-- a * k + c rounded once to dtype (float32 or float64): a and c numbers of that dtype, k an integer-valued float64
-- tensor (|k| < 2^26). The product is exact as hi * k + lo * k (a split in two 26-bit halves); the sum with c is
-- exact as s + e (TwoSum); float64 adds the small rest once; float32 rounds s, unless s lies exactly halfway
-- between two float32 values, where the rest says which way.
local function fused(a, k, c, dtype)
  local p = a * 134217729.0 -- 2^27 + 1
  local hi = p - (p - a)
  local lo = a - hi
  local ph, pl = k * hi, k * lo
  local s = ph + c
  local b = s - ph
  local e = (ph - (s - b)) + (c - b)
  local rest = e + pl
  if dtype == "float64" then return s + rest end
  local r = s:float()
  local m = s - r:double()
  local other = s + m -- the float32 value on the far side of s, when s is halfway
  local fix = (rest * m):gt(0):logical_and(other:float():double():eq(other))
  return core.where(fix, other:float(), r)
end

local function range_args(who, start, stop, steps)
  if type(start) ~= "number" or type(stop) ~= "number" then
    E.raise(string.format("%s: expected numbers as start and end, got %s and %s", who, type(start), type(stop)))
  end
  check_int(who, steps, "steps", 0)
end

local function float_dtype(who, opts)
  local dt = opts.dtype or "float32"
  if not FLOATS[dt] then E.raise(string.format("%s: expected a floating dtype, got %s", who, tostring(dt))) end
  return dt
end

--- ddp.linspace(start, end, steps [, opts]): steps values from start to end, evenly spaced (PyTorch's values:
--- from start for the first half, from end for the second)
function M.linspace(start, stop, steps, opts)
  range_args("linspace", start, stop, steps)
  opts = check_opts("linspace", opts)
  local dt = float_dtype("linspace", opts)
  local cdt = (dt == "float64") and "float64" or "float32"
  if steps <= 1 then
    return on_device(core.full({ steps }, cdt == "float32" and f32(start) or start, { dtype = cdt }):to(dt), opts)
  end
  local s, e, step, V
  if cdt == "float32" then
    s, e = f32(start), f32(stop)
    step, V = f32(f32(e - s) / f32(steps - 1)), 8
  else
    s, e = start, stop
    step, V = (e - s) / (steps - 1), 4
  end
  local o64 = { dtype = "float64" }
  local idx = core.arange(0, steps, o64)
  -- PyTorch's CPU loop: blocks of V values (two at a time, while two fit) from a base at the block's first
  -- position, base + j * step; the rest one by one, each its own fused multiply-add
  local nv = steps // (2 * V) * (2 * V)
  local k = core.where(idx:lt(nv), (idx / V):floor() * V, idx)
  local half = steps // 2
  local first = k:lt(half)
  local base = core.where(first, fused(step, k, s, cdt), fused(-step, (steps - 1) - k, e, cdt))
  local j = (idx - k):to(cdt)
  local out = core.where(j:eq(0), base, base + j * step)
  return on_device(out:to(dt), opts)
end

--- ddp.logspace(start, end, steps [, base [, opts]]): base ^ linspace(start, end, steps), the exponents in float64
function M.logspace(start, stop, steps, base, opts)
  if type(base) == "table" and opts == nil then base, opts = nil, base end
  range_args("logspace", start, stop, steps)
  base = base == nil and 10.0 or base
  if type(base) ~= "number" then E.raise("logspace: expected a number as the base, got " .. type(base)) end
  opts = check_opts("logspace", opts)
  local dt = float_dtype("logspace", opts)
  local o64 = { dtype = "float64" }
  if steps <= 1 then
    return on_device(core.full({ steps }, (base + 0.0) ^ start, o64):to(dt), opts)
  end
  local s, e = start, stop
  if dt ~= "float64" then s, e = f32(start), f32(stop) end
  local diff = e - s
  if dt ~= "float64" then diff = f32(diff) end
  local step = diff / (steps - 1)
  local idx = core.arange(0, steps, o64)
  local exps = core.where(idx:lt(steps // 2), idx * step + s, e - ((steps - 1) - idx) * step)
  local out = core.full({}, base + 0.0, o64):pow(exps)
  return on_device(out:to(dt), opts)
end

--- ddp.eye(n [, m] [, opts]): the n x m (n x n) identity (float32 unless opts say otherwise)
function M.eye(n, m, opts)
  if type(m) == "table" and opts == nil then m, opts = nil, m end
  check_int("eye", n, "n", 0)
  if m == nil then m = n end
  check_int("eye", m, "m", 0)
  opts = check_opts("eye", opts)
  if math.max(n, m, (n + 0.0) * m) > 2 ^ 59 then -- (n + 1 wrapped around at math.maxinteger)
    E.raise(string.format("eye: a %d x %d matrix is too large (a side or its elements past 2^59)", n, m))
  end
  local o = { dtype = "int64" }
  local out = core.arange(1, n + 1, o):view(n, 1):eq(core.arange(1, m + 1, o):view(1, m))
  return on_device(out:to(opts.dtype or "float32"), opts)
end

-- the 1-based positions [2, N] (rows, then columns; row by row) where keep(column - row) holds
local function tri_indices(who, row, col, offset, opts, upper)
  check_int(who, row, "row", 0)
  check_int(who, col, "col", 0)
  if offset == nil then offset = 0 end
  check_int(who, offset, "offset")
  opts = check_opts(who, opts)
  if opts.dtype ~= nil and opts.dtype ~= "int64" then
    E.raise(string.format("%s: expected dtype int64, got %s", who, tostring(opts.dtype)))
  end
  if math.max(row, col, (row + 0.0) * col) > 2 ^ 59 then
    E.raise(string.format("%s: a %d x %d matrix is too large (a side or its elements past 2^59)", who, row, col))
  end
  local o = { dtype = "int64" }
  local d = core.arange(1, col + 1, o):view(1, col) - core.arange(1, row + 1, o):view(row, 1)
  local mask = upper and d:ge(offset) or d:le(offset)
  return on_device(mask:nonzero():t():contiguous(), opts)
end

--- ddp.triu_indices(row, col [, offset [, opts]]), ddp.tril_indices(...): int64 [2, N], the 1-based rows and
--- columns of the upper (lower) triangle of a row x col matrix, offset above (below) the main diagonal
function M.triu_indices(row, col, offset, opts) return tri_indices("triu_indices", row, col, offset, opts, true) end
function M.tril_indices(row, col, offset, opts) return tri_indices("tril_indices", row, col, offset, opts, false) end

--- ddp.empty_like(t [, opts]): an uninitialised tensor of t's shape (t's dtype and device unless opts say)
function M.empty_like(t, opts)
  check_tensor("empty_like", t)
  return core.empty(t:size(), like(t, check_opts("empty_like", opts)))
end

--- ddp.randint_like(t, [low,] high [, opts]): random integers in [low, high) (low 0) of t's shape, t's dtype
function M.randint_like(t, low, high, opts)
  check_tensor("randint_like", t)
  if type(high) == "table" or high == nil then low, high, opts = 0, low, high end
  check_int("randint_like", low, "low")
  check_int("randint_like", high, "high")
  if high <= low then
    E.raise(string.format("randint_like: expected low < high, got low %d and high %d", low, high))
  end
  return core.randint(low, high, t:size(), like(t, check_opts("randint_like", opts)))
end

--- t:new_tensor(data [, opts]): a new tensor of data (a number, a nested table or a tensor, copied) in t's dtype
--- and on t's device unless opts say otherwise
function T.new_tensor(t, data, opts)
  check_tensor("new_tensor", t)
  local o = like(t, check_opts("new_tensor", opts))
  if core.is_tensor(data) then return data:detach():to(o.dtype):to(o.device):clone() end
  if type(data) ~= "number" and type(data) ~= "table" then
    E.raise("new_tensor: expected a number, a table or a tensor as the data, got " .. type(data))
  end
  return core.tensor(data, o)
end

--- t:new_empty(size [, opts]): an uninitialised tensor of that size, t's dtype and device unless opts say
function T.new_empty(t, size, opts)
  check_tensor("new_empty", t)
  if math.type(size) == "integer" then size = { size } end
  check_shape("new_empty", size, "size")
  return core.empty(size, like(t, check_opts("new_empty", opts)))
end

-- ---- several tensors --------------------------------------------------------------------------------------------

local meshgrid_warned = false

--- ddp.meshgrid(a, b, ... [, {indexing = "ij" | "xy"}]) -> as many grids (views of the 0-D or 1-D inputs,
--- expanded), several values; given one list of tensors, a list
function M.meshgrid(...)
  local args = table.pack(...)
  local opts
  local last = args[args.n]
  if args.n > 0 and type(last) == "table" and not core.is_tensor(last) and not core.is_tensor(last[1])
    and (args.n > 1 or next(last) ~= nil) then
    opts, args.n = last, args.n - 1
  end
  opts = check_opts("meshgrid", opts, { "indexing" })
  local list, n, as_list = tensor_args("meshgrid", table.unpack(args, 1, args.n))
  if n == 0 then E.raise("meshgrid: expected at least one tensor") end
  local indexing = opts.indexing
  if indexing == nil then
    if not meshgrid_warned then
      meshgrid_warned = true
      io.stderr:write("ddplua: warning: meshgrid: pass the indexing argument ({indexing = \"ij\"} or \"xy\"); " ..
        "without it the grids are \"ij\", as PyTorch 1.13's default\n")
    end
    indexing = "ij"
  end
  if indexing ~= "ij" and indexing ~= "xy" then
    E.raise("meshgrid: indexing must be \"ij\" or \"xy\", got " .. tostring(indexing))
  end
  local sizes = {}
  for k = 1, n do
    local t = list[k]
    if t:dim() > 1 then
      E.raise(string.format("meshgrid: expected 0-D or 1-D tensors, got %s (argument %d)", shape(t), k))
    end
    if t:dtype() ~= list[1]:dtype() or t:device() ~= list[1]:device() then
      E.raise(string.format("meshgrid: expected tensors of one dtype and device, got %s (%s) and %s (%s)",
        list[1]:dtype(), list[1]:device(), t:dtype(), t:device()))
    end
    sizes[k] = t:numel()
  end
  local swap = indexing == "xy" and n >= 2
  local order = {} -- the output dim of each input
  for k = 1, n do order[k] = k end
  if swap then order[1], order[2] = 2, 1 end
  local full = {}
  for k = 1, n do full[order[k]] = sizes[k] end
  local out = {}
  for k = 1, n do
    local s = {}
    for d = 1, n do s[d] = 1 end
    s[order[k]] = sizes[k]
    out[k] = list[k]:reshape(s):expand(full)
  end
  return results(out, as_list)
end

--- ddp.cartesian_prod(a, b, ...): the 1-D tensors' cartesian product, [N, count] (one tensor: itself, 1-D)
function M.cartesian_prod(...)
  local list, n = tensor_args("cartesian_prod", ...)
  if n == 0 then E.raise("cartesian_prod: expected at least one tensor") end
  for k = 1, n do
    if list[k]:dim() ~= 1 then
      E.raise(string.format("cartesian_prod: expected 1-D tensors, got %s (argument %d)", shape(list[k]), k))
    end
  end
  if n == 1 then return list[1]:view(-1) end
  local args = { table.unpack(list, 1, n) }
  args[n + 1] = { indexing = "ij" }
  local grids = { M.meshgrid(table.unpack(args, 1, n + 1)) }
  for k = 1, n do grids[k] = grids[k]:reshape(-1) end
  return core.stack(grids, 2)
end

--- ddp.block_diag(a, b, ...): the 0-D, 1-D (a row) or 2-D tensors along the diagonal of one matrix, zeros elsewhere
--- (their dtypes promoted as cat's)
function M.block_diag(...)
  local list, n = tensor_args("block_diag", ...)
  if n == 0 then return core.zeros({ 1, 0 }) end
  local mats, cols = {}, 0
  for k = 1, n do
    local t = list[k]
    if t:dim() > 2 then
      E.raise(string.format("block_diag: expected 0-D, 1-D or 2-D tensors, got %s (argument %d)", shape(t), k))
    end
    mats[k] = t:dim() == 2 and t or t:reshape(1, -1)
    cols = cols + mats[k]:size(2)
  end
  local rows, left = {}, 0
  for k = 1, n do
    local m = mats[k]
    local r, c = m:size(1), m:size(2)
    local o = { dtype = m:dtype(), device = m:device() }
    rows[k] = core.cat({ core.zeros({ r, left }, o), m, core.zeros({ r, cols - left - c }, o) }, 2)
    left = left + c
  end
  return core.cat(rows, 1)
end

--- ddp.broadcast_tensors(a, b, ...) -> each expanded to their common shape (views), several values; given one
--- list, a list
function M.broadcast_tensors(...)
  local list, n, as_list = tensor_args("broadcast_tensors", ...)
  local sz = broadcast_shapes("broadcast_tensors", list)
  local out = {}
  for k = 1, n do out[k] = list[k]:expand(sz) end
  return results(out, as_list)
end

--- t:broadcast_to(shape): t expanded to shape (a table; -1 keeps a size), a view
function T.broadcast_to(t, size)
  check_tensor("broadcast_to", t)
  check_shape("broadcast_to", size, "shape", true)
  local s, nd = t:size(), #size
  local ok = #s <= nd
  local full = {}
  for k = 1, nd do
    local x = s[#s - nd + k]
    local want = size[k]
    if want == -1 then
      if x == nil then ok = false end
      want = x or want
    end
    if x ~= nil and x ~= want and x ~= 1 then ok = false end
    full[k] = want
  end
  if not ok then
    E.raise(string.format("broadcast_to: cannot broadcast a tensor of shape %s to [%s]", shape(t),
      table.concat(size, ", ")))
  end
  return t:expand(full)
end

local function atleast(who, nd, ...)
  local list, n, as_list = tensor_args(who, ...)
  local out = {}
  for k = 1, n do
    local t, r = list[k], list[k]
    local d = t:dim()
    if d < nd then
      if d == 0 then r = t:reshape(nd == 1 and { 1 } or nd == 2 and { 1, 1 } or { 1, 1, 1 })
      elseif d == 1 then r = nd == 2 and t:unsqueeze(1) or t:view(1, -1, 1)
      else r = t:unsqueeze(3) end
    end
    out[k] = r
  end
  return results(out, as_list)
end

--- ddp.atleast_1d(a, ...), atleast_2d, atleast_3d: each with at least so many dims (views; 1-D [n] is [1, n] in
--- 2-D, [1, n, 1] in 3-D; 2-D [m, n] is [m, n, 1]); several values (a list for a list)
function M.atleast_1d(...) return atleast("atleast_1d", 1, ...) end
function M.atleast_2d(...) return atleast("atleast_2d", 2, ...) end
function M.atleast_3d(...) return atleast("atleast_3d", 3, ...) end

local function stack_list(who, list)
  if type(list) ~= "table" or core.is_tensor(list) or #list == 0 then
    E.raise(who .. ": expected a non-empty list of tensors")
  end
  for k = 1, #list do check_tensor(who, list[k], string.format(" as element %d of the list", k)) end
end

--- ddp.vstack(list): at least 2-D, joined along dim 1; hstack: at least 1-D, along dim 1 for 1-D tensors, else
--- dim 2; dstack: at least 3-D, along dim 3; column_stack: 0-D and 1-D tensors as columns, joined along dim 2
function M.vstack(list)
  stack_list("vstack", list)
  return core.cat(M.atleast_2d(list), 1)
end
function M.hstack(list)
  stack_list("hstack", list)
  local l = M.atleast_1d(list)
  return core.cat(l, l[1]:dim() == 1 and 1 or 2)
end
function M.dstack(list)
  stack_list("dstack", list)
  return core.cat(M.atleast_3d(list), 3)
end
function M.column_stack(list)
  stack_list("column_stack", list)
  local cols = {}
  for k, t in ipairs(list) do cols[k] = t:dim() <= 1 and t:reshape(-1, 1) or t end
  return core.cat(cols, 2)
end

M.concat = core.cat

-- ---- methods ----------------------------------------------------------------------------------------------------

-- an index argument: an int64 tensor, or a table of integers
local function index_tensor(who, index, what)
  if type(index) == "table" and not core.is_tensor(index) then
    index = core.tensor(index, { dtype = "int64" })
    if index:numel() == 0 then index = core.zeros(index:size(), { dtype = "int64" }) end
  end
  check_tensor(who, index, what)
  if index:dtype() ~= "int64" then
    E.raise(string.format("%s: expected an int64 tensor%s, got %s", who, what, index:dtype()))
  end
  return index
end

--- t:take(index) -> t's values at the 1-based positions of index (in t flattened, row by row), index's shape
function T.take(t, index)
  check_tensor("take", t)
  index = index_tensor("take", index, " as the index")
  local n = t:numel()
  if index:numel() > 0 then
    local lo, hi = index:min():item(), index:max():item()
    if lo < 1 or hi > n then
      E.raise(string.format("take: position %d is out of range for a tensor of %d elements (expected 1..%d)",
        lo < 1 and lo or hi, n, n))
    end
  end
  return t:reshape(-1):index_select(1, index:reshape(-1)):reshape(index:size())
end

--- t:take_along_dim(indices [, dim]): t's values at the 1-based indices along dim, the other dims broadcast
--- (gather's); without dim, t flattened and indices flattened
function T.take_along_dim(t, indices, dim)
  check_tensor("take_along_dim", t)
  check_tensor("take_along_dim", indices, " as the indices")
  if indices:dtype() ~= "int64" then
    E.raise("take_along_dim: expected int64 indices, got " .. indices:dtype())
  end
  if dim == nil then return t:reshape(-1):gather(1, indices:reshape(-1)) end
  if t:dim() ~= indices:dim() then
    E.raise(string.format("take_along_dim: expected indices of as many dims as the tensor, got %s and %s",
      shape(t), shape(indices)))
  end
  local d = norm_dim("take_along_dim", t:dim(), dim)
  if t:dim() == 0 then return t:reshape(1):gather(1, indices:reshape(1)):reshape({}) end
  local st, si = t:size(), indices:size()
  st[d], si[d] = 1, 1
  for k = 1, #st do
    if st[k] ~= si[k] and st[k] ~= 1 and si[k] ~= 1 then
      E.raise(string.format("take_along_dim: the shapes %s and %s do not broadcast outside dim %d", shape(t),
        shape(indices), dim))
    end
  end
  local bt, bi = t:size(), indices:size()
  for k = 1, #st do
    if k ~= d then
      local m = math.max(st[k], si[k])
      if st[k] == 0 or si[k] == 0 then m = 0 end
      bt[k], bi[k] = m, m
    end
  end
  return t:expand(bt):gather(d, indices:expand(bi))
end

-- the 1-based positions (an int64 tensor) of the diagonal with that offset of an r x c matrix, flattened
local function diag_positions(r, c, offset, device)
  local r0, c0 = math.max(-offset, 0), math.max(offset, 0)
  local len = math.max(0, math.min(r - r0, c - c0))
  local i = core.arange(0, len, { dtype = "int64", device = device })
  return (i + r0) * c + (i + c0) + 1, len
end

--- t:diagonal([offset [, dim1 [, dim2]]]): the diagonal of the matrices in dims dim1 and dim2 (1 and 2) as the
--- last dim, the others in order; offset > 0 above the main diagonal, < 0 below. A copy, not a view.
function T.diagonal(t, offset, dim1, dim2)
  check_tensor("diagonal", t)
  offset = offset == nil and 0 or offset
  check_int("diagonal", offset, "offset")
  local nd = t:dim()
  if nd < 2 then E.raise(string.format("diagonal: expected a tensor of at least 2 dims, got %s", shape(t))) end
  local d1 = norm_dim("diagonal", nd, dim1 == nil and 1 or dim1, "dim1")
  local d2 = norm_dim("diagonal", nd, dim2 == nil and 2 or dim2, "dim2")
  if d1 == d2 then E.raise(string.format("diagonal: dim1 and dim2 must differ, got %d and %d", d1, d2)) end
  local x = t:movedim({ d1, d2 }, { nd - 1, nd })
  local r, c = x:size(nd - 1), x:size(nd)
  local pos = diag_positions(r, c, offset, t:device())
  return x:flatten(nd - 1, nd):index_select(nd - 1, pos)
end

--- t:diag_embed([offset [, dim1 [, dim2]]]): the last dim of t on a diagonal (offset as diagonal's) of new matrices
--- in dims dim1 and dim2 (-2 and -1) of the result, which has one dim more; zeros elsewhere
function T.diag_embed(t, offset, dim1, dim2)
  check_tensor("diag_embed", t)
  offset = offset == nil and 0 or offset
  check_int("diag_embed", offset, "offset")
  if t:dim() == 0 then E.raise("diag_embed: expected a tensor of at least 1 dim, got a 0-dim tensor") end
  local nd = t:dim() + 1
  local d1 = norm_dim("diag_embed", nd, dim1 == nil and -2 or dim1, "dim1")
  local d2 = norm_dim("diag_embed", nd, dim2 == nil and -1 or dim2, "dim2")
  if d1 == d2 then E.raise(string.format("diag_embed: dim1 and dim2 must differ, got %d and %d", d1, d2)) end
  local x = t
  local len = x:size(-1)
  if (len + math.abs(offset + 0.0)) ^ 2 > 2 ^ 59 then -- (math.abs(math.mininteger) wraps; n * n overflowed)
    E.raise(string.format("diag_embed: offset %d makes matrices of %.0f x %.0f, too large (more than 2^59 elements)",
      offset, len + math.abs(offset + 0.0), len + math.abs(offset + 0.0)))
  end
  local n = len + math.abs(offset)
  local s = x:size()
  s[#s] = 1
  -- every place of the n x n matrices reads x's value at its diagonal position, or an appended zero
  local xz = core.cat({ x, core.zeros(s, { dtype = t:dtype(), device = t:device() }) }, -1)
  local o = { dtype = "int64", device = t:device() }
  local pick = core.full({ n * n }, len + 1, o):scatter(1, (diag_positions(n, n, offset, t:device())),
    core.arange(1, len + 1, o))
  s[#s] = n
  s[#s + 1] = n
  local out = xz:index_select(x:dim(), pick):view(s)
  return out:movedim({ nd - 1, nd }, { d1, d2 })
end

local function swap(who)
  return function(t, a, b)
    check_tensor(who, t)
    local nd = t:dim()
    if nd == 0 then
      norm_dim(who, nd, a)
      norm_dim(who, nd, b)
      return t:view({})
    end
    return t:transpose(norm_dim(who, nd, a), norm_dim(who, nd, b))
  end
end

--- t:swapaxes(d1, d2), t:swapdims(d1, d2): t:transpose(d1, d2)
T.swapaxes = swap("swapaxes")
T.swapdims = swap("swapdims")

--- t:ravel(): t flattened to 1-D (a view when t is contiguous)
function T.ravel(t)
  check_tensor("ravel", t)
  return t:reshape(-1)
end

-- 1-based positions 1..n, each k repeated reps[k] times (reps an int64 1-D tensor, non-negative; total its sum)
local function repeated_positions(reps, total)
  local n = reps:numel()
  local o = { dtype = "int64", device = reps:device() }
  if total == 0 then return core.zeros({ 0 }, o) end
  -- a 1 where each position's run ends (its running total + 1), summed up: how many runs ended before each place
  local ends = reps:cumsum(1) + 1
  local marks = core.zeros({ total + 1 }, o):scatter_add(1, ends, core.ones({ n }, o))
  return marks:narrow(1, 1, total):cumsum(1) + 1
end

--- t:repeat_interleave(repeats [, dim]): each slice along dim (t flattened without dim) repeated repeats times (a
--- number, or an int64 tensor of one count per slice, or of one count); ddp.repeat_interleave(repeats): the 1-based
--- positions 1..n of an int64 1-D tensor of counts, each repeated so many times
function T.repeat_interleave(t, repeats, dim)
  check_tensor("repeat_interleave", t)
  if repeats == nil then
    if t:dim() > 1 or t:dtype() ~= "int64" then
      E.raise(string.format("repeat_interleave: expected an int64 0-D or 1-D tensor of counts, got %s %s", t:dtype(),
        shape(t)))
    end
    local reps = t:reshape(-1)
    if reps:numel() > 0 and reps:min():item() < 0 then E.raise("repeat_interleave: the counts must be >= 0") end
    if reps:numel() > 0 and reps:to("float64"):sum():item() > 2 ^ 59 then
      E.raise("repeat_interleave: the counts sum to more than 2^59")
    end
    return repeated_positions(reps, reps:numel() > 0 and reps:sum():item() or 0)
  end
  local x, d = t, nil
  if dim == nil then x, d = t:reshape(-1), 1
  else
    d = norm_dim("repeat_interleave", t:dim(), dim)
    if t:dim() == 0 then x = t:reshape(1) end
  end
  local n = x:size(d)
  if math.type(repeats) == "integer" then
    if repeats < 0 then E.raise("repeat_interleave: repeats must be >= 0, got " .. repeats) end
    local s, e = x:size(), x:size()
    table.insert(s, d + 1, 1)
    table.insert(e, d + 1, repeats)
    local r = x:reshape(s):expand(e)
    local out = x:size()
    out[d] = n * repeats
    return r:reshape(out)
  end
  if not core.is_tensor(repeats) or repeats:dtype() ~= "int64" or repeats:dim() > 1 then
    E.raise("repeat_interleave: expected repeats as an integer or an int64 0-D or 1-D tensor, got " ..
      (core.is_tensor(repeats) and (repeats:dtype() .. " " .. shape(repeats)) or tostring(repeats)))
  end
  local reps = repeats:reshape(-1)
  if reps:numel() == 1 then reps = reps:expand(n) end
  if reps:numel() ~= n then
    E.raise(string.format("repeat_interleave: expected %d repeats (the size of dim %d), got %d", n, d, reps:numel()))
  end
  if n > 0 and reps:min():item() < 0 then E.raise("repeat_interleave: repeats must be >= 0") end
  local total = n > 0 and reps:sum():item() or 0
  if n > 0 and reps:to("float64"):sum():item() > 2 ^ 59 then -- (the int64 sum wraps: {big, big, 2} gave nothing)
    E.raise("repeat_interleave: the repeats sum to more than 2^59")
  end
  return x:index_select(d, repeated_positions(reps:contiguous(), total))
end

--- t:unflatten(dim, sizes): dim split into the sizes (a table; one -1 is inferred), a view
function T.unflatten(t, dim, sizes)
  check_tensor("unflatten", t)
  local d = norm_dim("unflatten", t:dim(), dim)
  if t:dim() == 0 then E.raise("unflatten: a 0-dim tensor has no dim to unflatten") end
  check_shape("unflatten", sizes, "sizes", true)
  if #sizes == 0 then E.raise("unflatten: expected a non-empty table of sizes") end
  local n, prod, free = t:size(d), 1, nil
  for k, v in ipairs(sizes) do
    if v == -1 then
      if free then E.raise("unflatten: only one size may be -1") end
      free = k
    else prod = prod * v end
  end
  local s = {}
  for k, v in ipairs(sizes) do s[k] = v end
  if free then
    if prod == 0 or n % prod ~= 0 then
      E.raise(string.format("unflatten: the sizes [%s] do not fit dim %d of size %d", table.concat(sizes, ", "),
        dim, n))
    end
    s[free] = n // prod
  elseif prod ~= n then
    E.raise(string.format("unflatten: the sizes [%s] multiply to %d, not to the size %d of dim %d",
      table.concat(sizes, ", "), prod, n, dim))
  end
  local out = t:size()
  table.remove(out, d)
  for k = #s, 1, -1 do table.insert(out, d, s[k]) end
  return t:view(out)
end

--- t:half(), t:bfloat16(): t:to("float16"), t:to("bfloat16"); t:bool(): t ~= 0 as uint8 (NaN is true)
function T.half(t) check_tensor("half", t) return t:to("float16") end
function T.bfloat16(t) check_tensor("bfloat16", t) return t:to("bfloat16") end
function T.bool(t) check_tensor("bool", t) return t:ne(0) end

--- ddp.numel(t): t:numel()
function M.numel(t)
  check_tensor("numel", t)
  return t:numel()
end

for _, name in ipairs({ "broadcast_to", "take", "take_along_dim", "diagonal", "diag_embed", "swapaxes", "swapdims",
  "ravel", "repeat_interleave", "unflatten" }) do
  M[name] = T[name]
end

return T
