-- PyTorch's tensor functions that ddplua's ops compose, each a method and a ddp. function, with PyTorch's argument
-- order and 1-based dims (negative from the end): prod and cumprod (multiplies only, never exp(sum(log)): zeros,
-- negative values and NaN are exact, and the gradient where there are zeros is right: a single zero's is the
-- product of the others), amax and amin (values only; the gradient split evenly among ties, as PyTorch's), kthvalue
-- and median (values and 1-based positions, NaN as the largest value; median NaN over any slice that holds a NaN,
-- as PyTorch's), nonzero (1-based positions, as every index in ddplua) and masked_select (its gradient to t), roll,
-- movedim and unbind. Matrix products, trace and diag are in tensor_linalg.lua.
--
-- Deliberate differences from PyTorch: among equal values kthvalue and median (with a dim) give the position a
-- stable sort gives, where PyTorch's quickselect may give another one of the ties; unbind returns a Lua list;
-- masked_select takes a uint8 mask (ddplua's bool); median() of an empty integer tensor is an error (PyTorch's
-- is INT64_MIN).
local core = require "ddplua.core"
local E = require "ddplua.errors"
local T = core.Tensor
local M = package.loaded["ddplua"]

local checks = require "ddplua.tensor_checks"
local FLOATS, check_tensor, shape = checks.FLOATS, checks.check_tensor, checks.shape

-- a 1-based dim of t (a 0-dim tensor takes 1 and -1, as PyTorch takes 0 and -1)
local norm_dim = checks.norm_dim

-- an integer or a table of integers as a list (what = "dim", "shift", ...)
local function int_list(who, v, what)
  if math.type(v) == "integer" then return { v } end
  if type(v) ~= "table" then
    E.raise(string.format("%s: %s must be an integer or a table of integers, got %s", who, what, type(v)))
  end
  for _, x in ipairs(v) do
    if math.type(x) ~= "integer" then E.raise(string.format("%s: %ss must be integers, got %s", who, what, tostring(x))) end
  end
  return v
end

-- dims given as an integer, a table of them, or nil / {} (every dim): distinct 1-based dims, in descending order
local function reduce_dims(who, t, dim)
  local list = dim == nil and {} or int_list(who, dim, "dim")
  local out, seen = {}, {}
  if #list == 0 then
    for d = t:dim(), 1, -1 do out[#out + 1] = d end
    return out
  end
  for _, d in ipairs(list) do
    local r = norm_dim(who, t, d)
    if seen[r] then E.raise(string.format("%s: dim %d appears more than once in the dims", who, d)) end
    seen[r] = true
    out[#out + 1] = r
  end
  table.sort(out, function(a, b) return a > b end)
  return out
end

local function squeeze_dims(r, dims)
  for _, d in ipairs(dims) do r = r:squeeze(d) end -- descending, so each dim is still where it was
  return r
end

local function needs_grad(t) return core.is_grad_enabled() and t.requires_grad end

-- integers other than int64 multiply in int64, as PyTorch's prod and cumprod
local function prod_dtype(t)
  if not FLOATS[t:dtype()] and t:dtype() ~= "int64" then return t:long() end
  return t
end

-- the product over dim d, kept as a dim of size 1: the two halves multiplied, again and again (log2(n) rounds,
-- n - 1 multiplies); an odd length sets its last slice aside, multiplied in at the end
local function prod_along(t, d)
  local n = t:size(d)
  if n == 0 then
    local sz = t:size()
    sz[d] = 1
    return core.ones(sz, { dtype = t:dtype(), device = t:device() })
  end
  local x, rest = t, nil
  while n > 1 do
    if n % 2 == 1 then
      local last = x:narrow(d, n, 1)
      rest = rest and rest * last or last
      n = n - 1
    end
    local h = n // 2
    x = x:narrow(d, 1, h) * x:narrow(d, h + 1, h)
    n = h
  end
  if rest then x = x * rest end
  if rawequal(x, t) then x = t:clone() end
  return x
end

--- t:prod([dim [, keepdim]]): the product of all values (0-dim), or over dim; integers in int64
function T.prod(t, dim, keepdim)
  check_tensor("prod", t)
  local x = prod_dtype(t)
  if dim == nil then
    if keepdim ~= nil then E.raise("prod: keepdim needs a dim") end
    return prod_along(x:reshape(-1), 1):reshape({})
  end
  local d = norm_dim("prod", x, dim)
  if x:dim() == 0 then return rawequal(x, t) and t:clone() or x end
  local r = prod_along(x, d)
  return keepdim and r or r:squeeze(d)
end

--- t:cumprod(dim): running products along dim (one pass in C, in double; the gradient exact with zeros);
--- integers in int64
function T.cumprod(t, dim, ...)
  check_tensor("cumprod", t)
  if dim == nil then E.raise("cumprod: expected dim (an integer, 1-based), as torch.cumprod") end
  if select("#", ...) > 0 then E.raise("cumprod: expected only dim, got " .. (select("#", ...) + 2) .. " arguments") end
  local x = prod_dtype(t)
  return core.cumprod(x, norm_dim("cumprod", x, dim))
end

-- The value v (the reduced dims kept, detached) as a function of t whose gradient is split evenly over the
-- positions in mask (the ties): v - sum(where(mask, v - t, 0)) / count is v exactly (v - t is 0 there), and
-- where v is infinite the shift is 0, so the sum is count times +-inf. Slices in `nan_grad` (uint8 or nil) get a
-- NaN gradient, as PyTorch's amax and amin give one where the result is NaN.
local function split_evenly(t, v, mask, dims, nan_grad)
  local s = core.where(v:isfinite(), v, 0)
  local c = core.where(mask, s - t, 0):sum(dims, true) / mask:sum(dims, true)
  if nan_grad then -- t times NaN in those slices (v is NaN there), times 0 elsewhere (t not read: it may be inf)
    c = c - (core.where(nan_grad, t, 0) * core.where(nan_grad, v, 0)):sum(dims, true)
  end
  return s - c
end

local function extreme(who, op, t, dim, keepdim)
  check_tensor(who, t)
  local dims = reduce_dims(who, t, dim)
  if t:dim() == 0 then return t:clone() end
  local v = t:detach()
  for _, d in ipairs(dims) do
    if t:size(d) == 0 then
      E.raise(string.format("%s: cannot reduce over dim %d of size 0 (shape %s)", who, d, shape(t)))
    end
    v = v[op](v, d, true) -- the values; the positions are not needed
  end
  local r = v
  if needs_grad(t) then
    local isnan = v:isnan()
    r = split_evenly(t, v, t:eq(v), dims, isnan)
  end
  return keepdim and r or squeeze_dims(r, dims)
end

--- t:amax([dim [, keepdim]]), t:amin(...): the largest (smallest) values over dim (an integer or a table of them;
--- nil or {} for all); NaN where a NaN is among them; the gradient split evenly among equal values
function T.amax(t, dim, keepdim) return extreme("amax", "max", t, dim, keepdim) end
function T.amin(t, dim, keepdim) return extreme("amin", "min", t, dim, keepdim) end

--- t:kthvalue(k [, dim [, keepdim]]) -> the k-th smallest values along dim (default the last) and their 1-based
--- positions; NaN counts as the largest value
function T.kthvalue(t, k, dim, keepdim)
  check_tensor("kthvalue", t)
  if math.type(k) ~= "integer" then E.raise("kthvalue: k must be an integer, got " .. tostring(k)) end
  local d = norm_dim("kthvalue", t, dim or -1)
  local n = t:dim() == 0 and 1 or t:size(d)
  if k < 1 or k > n then
    E.raise(string.format("kthvalue: k %d is out of range for dim %d of size %d (shape %s)", k, d, n, shape(t)))
  end
  if t:dim() == 0 then return t:clone(), core.ones({}, { dtype = "int64", device = t:device() }) end
  local v, i = t:topk(k, d, false) -- ascending, ties in their order, NaN last
  v, i = v:narrow(d, k, 1), i:narrow(d, k, 1)
  if keepdim then return v, i end
  return v:squeeze(d), i:squeeze(d)
end

--- t:median(): the lower median of all values (NaN if any is NaN or there are none; the gradient split evenly
--- among equal values, as PyTorch's); t:median(dim [, keepdim]) -> values and 1-based positions along dim (the
--- first NaN of a slice that has one)
function T.median(t, dim, keepdim)
  check_tensor("median", t)
  if dim == nil then
    if keepdim ~= nil then E.raise("median: keepdim needs a dim") end
    local x = t:reshape(-1)
    local n = x:numel()
    if n == 0 then
      if not FLOATS[t:dtype()] then E.raise("median: cannot take the median of no values (an empty integer tensor)") end
      return core.full({}, 0 / 0, { dtype = t:dtype(), device = t:device() })
    end
    local v = T.kthvalue(x:detach(), (n + 1) // 2, 1, true)
    local anynan = FLOATS[t:dtype()] and x:isnan():any(1, true)
    if anynan then v = core.where(anynan, 0 / 0, v) end
    if needs_grad(t) then -- the ties of the median share its gradient; the NaN, if it is NaN
      v = split_evenly(x, v, core.where(anynan, x:isnan(), x:eq(v)), { 1 })
    end
    return v:reshape({})
  end
  local d = norm_dim("median", t, dim)
  if t:dim() > 0 and t:size(d) == 0 then
    E.raise(string.format("median: cannot reduce over dim %d of size 0 (shape %s)", d, shape(t)))
  end
  local n = t:dim() == 0 and 1 or t:size(d)
  local v, i = T.kthvalue(t, (n + 1) // 2, d, true)
  if FLOATS[t:dtype()] and t:dim() > 0 then -- a slice with a NaN: the first NaN
    local isnan = t:isnan()
    local has, first = isnan:any(d, true), isnan:argmax(d, true)
    v = core.where(has, t:gather(d, first), v)
    i = core.where(has, first, i)
  end
  if keepdim or t:dim() == 0 then return v, i end
  return v:squeeze(d), i:squeeze(d)
end

-- The 1-based positions of the non-zero values of the flat uint8 tensor m, int64, ascending: one pass in C on the
-- CPU (core.nonzero); elsewhere without a loop: each selected value's rank is the running count (cumsum), every
-- value is scattered to its rank (the others to one slot past the last) and the ranks are kept.
local function flat_positions(m)
  local n = m:numel()
  local opts = { dtype = "int64", device = m:device() }
  if n == 0 then return core.zeros({ 0 }, opts) end
  if m:device() == "cpu" then return core.nonzero(m, m:sum():item(), true) end
  local rank = m:cumsum(1)
  local count = rank[n]:item()
  if count == n then return core.arange(1, n + 1, opts) end
  if count == 0 then return core.zeros({ 0 }, opts) end
  local slot = core.where(m, rank, count + 1)
  return core.zeros({ count + 1 }, opts):scatter(1, slot, core.arange(1, n + 1, opts)):narrow(1, 1, count)
end

--- t:nonzero() -> int64 [n, t:dim()]: the 1-based positions of the non-zero values (NaN included), in order
function T.nonzero(t)
  check_tensor("nonzero", t)
  local mask = t:ne(0)
  if t:device() == "cpu" then return core.nonzero(mask, mask:sum():item(), false) end
  local flat = flat_positions(mask:reshape(-1))
  local nd, count = t:dim(), flat:size(1)
  if nd == 0 or count == 0 then return core.zeros({ count, nd }, { dtype = "int64", device = t:device() }) end
  local rem, cols = flat - 1, {} -- 0-based flat positions, split into each dim's position from the last dim
  for d = nd, 2, -1 do
    local s = t:size(d)
    local q = (rem:double() / s):floor():long() -- exact: the quotient's distance from an integer is >= 1/numel
    cols[d] = rem - q * s + 1
    rem = q
  end
  cols[1] = rem + 1
  return core.stack(cols, 2)
end

local broadcast_shape = checks.broadcast_shape

--- t:masked_select(mask) -> 1-D: the values of t where the uint8 mask is non-zero (both broadcast), in order;
--- the gradient goes back to t
function T.masked_select(t, mask)
  check_tensor("masked_select", t)
  check_tensor("masked_select", mask, " as the mask")
  if mask:dtype() ~= "uint8" then
    E.raise("masked_select: expected a uint8 mask (ddplua's bool: a comparison's result), got " .. mask:dtype())
  end
  local sz = broadcast_shape("masked_select", t, mask)
  local flat = flat_positions(mask:expand(sz):reshape(-1))
  return t:expand(sz):reshape(-1):index_select(1, flat)
end

local function roll_along(x, s, d)
  local n = x:size(d)
  if n == 0 then return x end
  s = s % n
  if s == 0 then return x end
  return core.cat({ x:narrow(d, n - s + 1, s), x:narrow(d, 1, n - s) }, d)
end

--- t:roll(shifts [, dims]): values moved by shifts along dims (integers or tables of them, pairwise), wrapping
--- around; without dims, along the flattened tensor
function T.roll(t, shifts, dims)
  check_tensor("roll", t)
  local sh = int_list("roll", shifts, "shift")
  local r
  if dims == nil then
    if #sh ~= 1 then E.raise(string.format("roll: expected one shift without dims (the flattened tensor), got %d", #sh)) end
    r = roll_along(t:reshape(-1), sh[1], 1):reshape(t:size())
  else
    local ds = int_list("roll", dims, "dim")
    if #sh ~= #ds then
      E.raise(string.format("roll: shifts and dims must have the same length, got %d and %d", #sh, #ds))
    end
    r = t
    for k = 1, #ds do
      local d = norm_dim("roll", t, ds[k])
      if t:dim() > 0 then r = roll_along(r, sh[k], d) end
    end
  end
  if rawequal(r, t) or r:data_ptr() == t:data_ptr() then r = r:clone() end -- a new tensor even when nothing moved
  return r
end

--- t:movedim(source, destination): the dims in source (an integer or a table) moved to the places in destination,
--- the others keeping their order (a permuted view)
function T.movedim(t, source, destination)
  check_tensor("movedim", t)
  local src, dst = int_list("movedim", source, "dim"), int_list("movedim", destination, "dim")
  if #src ~= #dst then
    E.raise(string.format("movedim: source and destination must name as many dims, got %d and %d", #src, #dst))
  end
  local nd = t:dim()
  local order, used = {}, {}
  for k = 1, #src do
    local s, d = norm_dim("movedim", t, src[k]), norm_dim("movedim", t, dst[k])
    if used[s] then E.raise("movedim: dim " .. src[k] .. " appears more than once in source") end
    if order[d] then E.raise("movedim: dim " .. dst[k] .. " appears more than once in destination") end
    order[d], used[s] = s, true
  end
  if nd == 0 then return t:view({}) end
  local s = 1
  for d = 1, nd do
    if not order[d] then
      while used[s] do s = s + 1 end
      order[d], s = s, s + 1
    end
  end
  return t:permute(order)
end

--- t:unbind([dim]) -> a Lua list of the slices along dim (default 1), views of t
function T.unbind(t, dim)
  check_tensor("unbind", t)
  if t:dim() == 0 then E.raise("unbind: a 0-dim tensor has no dim to unbind") end
  local d = norm_dim("unbind", t, dim or 1)
  local out = {}
  for k = 1, t:size(d) do out[k] = t:select(d, k) end
  return out
end

for _, name in ipairs({ "prod", "cumprod", "amax", "amin", "kthvalue", "median", "nonzero", "masked_select", "roll",
  "movedim", "unbind" }) do
  M[name] = T[name]
end

return T
