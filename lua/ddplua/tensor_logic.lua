-- PyTorch's tests, comparisons and reductions over truth values, composed from the runtime's ops (each a method
-- and a ddp. function): isnan, isinf, isfinite, any, all, logical_not, logical_and, logical_or, count_nonzero,
-- isclose, allclose, equal; sort and argsort (topk over the whole dim: sorted, ties in their order, NaN as the
-- largest, as PyTorch's stable sort); logsumexp (its gradient the softmax, through the composition); bmm (matmul of
-- two batches of matrices, checked as torch.bmm is). Dims are 1-based, as everywhere in ddplua; truth values are
-- uint8 tensors (ddplua's bool), allclose and equal Lua booleans.
local core = require "ddplua.core"
local E = require "ddplua.errors"
local T = core.Tensor
local M = package.loaded["ddplua"]

local checks = require "ddplua.tensor_checks"
local FLOATS, check_tensor = checks.FLOATS, checks.check_tensor

--- t:isnan(): true where t is NaN (never for integers)
function T.isnan(t)
  check_tensor("isnan", t)
  return t:ne(t)
end

--- t:isinf(): true where t is +-inf (never for integers)
function T.isinf(t)
  check_tensor("isinf", t)
  if not FLOATS[t:dtype()] then return t:ne(t) end
  return t:abs():eq(math.huge)
end

--- t:isfinite(): neither NaN nor +-inf (always for integers)
function T.isfinite(t)
  check_tensor("isfinite", t)
  if not FLOATS[t:dtype()] then return t:eq(t) end
  return (t - t):eq(0) -- x - x is 0 for finite x, NaN for inf and NaN
end

-- the count of true (non-zero) values over dim (nil: all), and how many values each count covers
local function count_true(who, t, dim, keepdim)
  check_tensor(who, t)
  local nz = t:ne(0)
  if dim == nil then return nz:sum(), t:numel() end
  if math.type(dim) ~= "integer" then E.raise(who .. ": dim must be an integer (1-based), got " .. tostring(dim)) end
  local d = dim < 0 and dim + t:dim() + 1 or dim
  if d < 1 or d > t:dim() then
    E.raise(string.format("%s: dim %d is out of range for a %d-dimensional tensor", who, dim, t:dim()))
  end
  return nz:sum(d, keepdim or false), t:size(d)
end

--- t:any([dim [, keepdim]]): whether any value (over dim) is non-zero, as bool
function T.any(t, dim, keepdim)
  local c = count_true("any", t, dim, keepdim)
  return c:gt(0)
end

--- t:all([dim [, keepdim]]): whether every value (over dim) is non-zero, as bool (true over no values)
function T.all(t, dim, keepdim)
  local c, n = count_true("all", t, dim, keepdim)
  return c:eq(n)
end

--- t:logical_not(), t:logical_and(u), t:logical_or(u): on the truth of each value (non-zero), broadcasting
function T.logical_not(t)
  check_tensor("logical_not", t)
  return t:eq(0)
end
function T.logical_and(t, u)
  check_tensor("logical_and", t)
  check_tensor("logical_and", u, " as the second operand")
  return (t:ne(0):byte() * u:ne(0):byte()):ne(0) -- 0 or 1 each, in one byte
end
function T.logical_or(t, u)
  check_tensor("logical_or", t)
  check_tensor("logical_or", u, " as the second operand")
  return (t:ne(0):byte() + u:ne(0):byte()):ne(0)
end

--- t:logsumexp(dim [, keepdim]): log(sum(exp(t))) over dim (an integer or a table of them), computed against the
--- max so that large values do not overflow; -inf where every value is -inf, +inf where one is +inf
function T.logsumexp(t, dim, keepdim)
  check_tensor("logsumexp", t)
  if not FLOATS[t:dtype()] then t = t:float() end
  if dim == nil then E.raise("logsumexp: expected dim (an integer or a table of integers), as torch.logsumexp") end
  local dims = type(dim) == "table" and dim or { dim }
  local m = t:detach()
  for _, d in ipairs(dims) do
    if math.type(d) ~= "integer" then E.raise("logsumexp: dims must be integers (1-based), got " .. tostring(d)) end
    m = m:max(d, true) -- values; the max's position is not needed
  end
  m = core.where(m:abs():eq(math.huge), 0, m) -- an infinite max shifts nothing: exp(x - 0) keeps +-inf's meaning
  local r = (t - m):exp():sum(dims, true):log() + m
  if keepdim then return r end
  local sorted = {}
  for _, d in ipairs(dims) do sorted[#sorted + 1] = d < 0 and d + t:dim() + 1 or d end
  table.sort(sorted, function(a, b) return a > b end)
  for _, d in ipairs(sorted) do r = r:squeeze(d) end
  return r
end

--- ddp.bmm(a, b): [B, n, m] @ [B, m, p] -> [B, n, p], exactly 3-d each with the same B (torch.bmm's checks)
function T.bmm(a, b)
  check_tensor("bmm", a)
  check_tensor("bmm", b, " as the second operand")
  if a:dim() ~= 3 or b:dim() ~= 3 or a:size(1) ~= b:size(1) or a:size(3) ~= b:size(2) then
    E.raise(string.format("bmm: expected [B, n, m] and [B, m, p], got [%s] and [%s]",
      table.concat(a:size(), ", "), table.concat(b:size(), ", ")))
  end
  return core.matmul(a, b)
end

--- t:count_nonzero([dim]): how many values (over dim, an integer or a table of them) are non-zero, int64
function T.count_nonzero(t, dim)
  check_tensor("count_nonzero", t)
  if dim == nil then return t:ne(0):sum() end
  return t:ne(0):sum(dim)
end

local function close_opts(who, opts)
  if opts ~= nil and type(opts) ~= "table" then E.raise(who .. ": expected an options table {rtol=, atol=, equal_nan=}") end
  opts = opts or {}
  for k in pairs(opts) do
    if k ~= "rtol" and k ~= "atol" and k ~= "equal_nan" then E.raise(who .. ": unknown option '" .. tostring(k) .. "'") end
  end
  local rtol, atol = opts.rtol or 1e-5, opts.atol or 1e-8
  if type(rtol) ~= "number" or type(atol) ~= "number" or rtol < 0 or atol < 0 then
    E.raise(who .. ": rtol and atol must be non-negative numbers")
  end
  return rtol, atol, opts.equal_nan == true
end

--- t:isclose(u [, {rtol=1e-5, atol=1e-8, equal_nan=false}]): |t - u| <= atol + rtol |u| where both are finite,
--- equal values (infinities of one sign included), and NaN with NaN only with equal_nan
function T.isclose(t, u, opts)
  check_tensor("isclose", t)
  check_tensor("isclose", u, " as the second operand")
  local rtol, atol, equal_nan = close_opts("isclose", opts)
  local a, b = t:detach(), u:detach()
  if not FLOATS[a:dtype()] and not FLOATS[b:dtype()] and rtol == 0 and atol == 0 then return a:eq(b) end
  local fa, fb = FLOATS[a:dtype()] and a or a:double(), FLOATS[b:dtype()] and b or b:double()
  local near = (fa - fb):abs():le(fb:abs() * rtol + atol):logical_and(fa:isfinite():logical_and(fb:isfinite()))
  local r = near:logical_or(a:eq(b))
  if equal_nan then r = r:logical_or(fa:isnan():logical_and(fb:isnan())) end
  return r
end

--- t:allclose(u [, opts]): isclose everywhere, a Lua boolean
function T.allclose(t, u, opts) return T.isclose(t, u, opts):all():item() ~= 0 end

--- t:equal(u): the same shape and the same values (NaN equals nothing), a Lua boolean
function T.equal(t, u)
  check_tensor("equal", t)
  check_tensor("equal", u, " as the second operand")
  local a, b = t:size(), u:size()
  if #a ~= #b then return false end
  for i = 1, #a do
    if a[i] ~= b[i] then return false end
  end
  return t:eq(u):all():item() ~= 0
end

local function sort_args(who, t, dim, descending)
  check_tensor(who, t)
  if type(dim) == "table" then
    local o = dim
    for k in pairs(o) do
      if k ~= "dim" and k ~= "descending" and k ~= "stable" then E.raise(who .. ": unknown option '" .. tostring(k) .. "'") end
    end
    dim, descending = o.dim, o.descending
  end
  if dim ~= nil and math.type(dim) ~= "integer" then E.raise(who .. ": dim must be an integer (1-based), got " .. tostring(dim)) end
  if descending ~= nil and type(descending) ~= "boolean" then E.raise(who .. ": descending must be a boolean") end
  return dim or -1, descending == true
end

--- t:sort([dim [, descending]]) or t:sort({dim=, descending=, stable=}) -> values, 1-based positions
function T.sort(t, dim, descending)
  dim, descending = sort_args("sort", t, dim, descending)
  if t:dim() == 0 then return t:clone(), core.ones({}, { dtype = "int64" }) end
  local d = dim < 0 and dim + t:dim() + 1 or dim
  if d < 1 or d > t:dim() then E.raise(string.format("sort: dim %d is out of range for a %d-dimensional tensor", dim, t:dim())) end
  return t:topk(t:size(d), d, descending)
end

--- t:argsort([dim [, descending]]): sort's positions
function T.argsort(t, dim, descending)
  local _, idx = T.sort(t, dim, descending)
  return idx
end

for _, name in ipairs({ "isnan", "isinf", "isfinite", "any", "all", "logical_not", "logical_and", "logical_or",
  "logsumexp", "bmm", "count_nonzero", "isclose", "allclose", "equal", "sort", "argsort" }) do
  M[name] = T[name]
end

return T
