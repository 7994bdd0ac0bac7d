-- Statistics and special functions a ported script reaches for, composed from ddplua's ops with 1-based dims:
--   ddp.cov(x [, {correction=1, fweights=, aweights=}]), ddp.corrcoef(x)   rows are the variables, columns the
--                                                     observations (PyTorch's), a 1-D x one variable
--   ddp.trapezoid(y [, x] [, {dx=1, dim=-1}]) (ddp.trapz), ddp.cumulative_trapezoid(...)   the trapezoid rule
--   ddp.isin(elements, test_elements [, {invert=false}])   uint8: which elements occur among the test ones
--   ddp.diagflat(x [, offset=0]), ddp.vander(x [, {N=, increasing=false}]), ddp.combinations(x [, r=2 [, with_
--                                                     replacement=false]])
--   x:lgamma(), x:digamma(), ddp.float_power(a, b), ddp.normal(mean, std [, size])
-- All are ddp. functions; lgamma, digamma, float_power, diagflat and isin are methods too. Gradients flow through
-- all but isin and normal's draws (as PyTorch's; normal's mean and std get theirs).
--
-- lgamma and digamma compute in float64 (Lanczos' series with g = 7 and nine terms, reflected below 1/2; digamma by
-- the recurrence up to 6 and the asymptotic series there, reflected below 0), then round to the input's dtype:
-- within a few ulp of PyTorch's float32 libm calls and 1e-13 relative of its float64 ones; their gradients are the
-- derivatives of these compositions (digamma for lgamma). Deliberate differences from PyTorch: isin checks but
-- does not use assume_unique (it sorts the test elements either way), and is a method too (PyTorch 1.13's is a
-- function only); combinations builds its index list in Lua (fine for the small sets it is used on: C(n, r) index
-- rows, at most a million); normal draws from ddplua's Philox stream.
local core = require "ddplua.core"
local E = require "ddplua.errors"
local T = core.Tensor
local M = package.loaded["ddplua"]

local checks = require "ddplua.tensor_checks"
local FLOATS, check_tensor, shape, norm_dim = checks.FLOATS, checks.check_tensor, checks.shape, checks.norm_dim
local options, bool_opt = checks.check_opts, checks.bool_opt

local function float_of(t) return FLOATS[t:dtype()] and t or t:float() end

-- ---- covariance and correlation ---------------------------------------------------------------------------------

--- ddp.cov(x [, {correction=1, fweights=, aweights=}]): the covariance matrix of x's rows (variables) over its
--- columns (observations), weighted by integer frequency weights and / or observation weights; a scalar for one row
function M.cov(x, opts)
  check_tensor("cov", x)
  local o = options("cov", opts, { "correction", "fweights", "aweights" })
  if x:dim() > 2 then E.raise("cov: expected a 1-D or 2-D tensor, got " .. shape(x)) end
  local correction = o.correction == nil and 1 or o.correction
  if math.type(correction) ~= "integer" then E.raise("cov: correction must be an integer, got " .. tostring(correction)) end
  local input = float_of(x:dim() < 2 and x:reshape({ 1, -1 }) or x)
  local n = input:size(2)
  local w
  for _, name in ipairs({ "fweights", "aweights" }) do
    local v = o[name]
    if v ~= nil then
      check_tensor("cov", v, " as " .. name)
      if v:dim() > 1 or v:numel() ~= n then
        E.raise(string.format("cov: %s must be 1-D with one weight per observation (%d), got %s", name, n, shape(v)))
      end
      if name == "fweights" and FLOATS[v:dtype()] then E.raise("cov: fweights must be integers, got " .. v:dtype()) end
      if v:lt(0):any():item() ~= 0 then E.raise("cov: " .. name .. " must be non-negative") end
      v = v:reshape(-1):to(input:dtype())
      w = w and w * v or v
    end
  end
  local w_sum = w and w:sum() or core.full({}, n, { dtype = input:dtype(), device = input:device() })
  local avg = (w and (input * w):sum(2) or input:sum(2)) / w_sum
  local norm
  if not w then norm = w_sum - correction
  elseif correction == 0 then norm = w_sum
  elseif o.aweights == nil then norm = w_sum - correction
  else norm = w_sum - (w * o.aweights:reshape(-1):to(input:dtype())):sum() * correction / w_sum end
  norm = core.where(norm:lt(0), 0, norm)
  local xm = input - avg:unsqueeze(2)
  local c = core.matmul(xm, (w and xm * w or xm):t()) / norm
  return c:squeeze()
end

--- ddp.corrcoef(x): Pearson's correlation coefficients of x's rows, clamped to [-1, 1]
function M.corrcoef(x)
  check_tensor("corrcoef", x)
  local c = M.cov(x)
  if c:dim() == 0 then return c / c end
  local sd = c:diagonal():sqrt()
  return (c / sd:unsqueeze(2) / sd:unsqueeze(1)):clamp(-1, 1)
end

-- ---- the trapezoid rule -----------------------------------------------------------------------------------------

-- (y [, x] [, {dx=, dim=}]) -> y, x or nil, dx, the 1-based dim
local function trapezoid_args(who, y, x, opts)
  check_tensor(who, y)
  if opts == nil and type(x) == "table" and not core.is_tensor(x) then x, opts = nil, x end
  local o = options(who, opts, { "dx", "dim" })
  if x ~= nil then
    check_tensor(who, x, " as the sample points")
    if o.dx ~= nil then E.raise(who .. ": give the sample points x or the spacing dx, not both") end
  end
  local dx = o.dx == nil and 1 or o.dx
  if type(dx) ~= "number" then E.raise(who .. ": dx must be a number, got " .. type(dx)) end
  if y:dim() == 0 then E.raise(who .. ": expected at least a 1-dimensional tensor, got a 0-dimensional one") end
  return y, x, dx, norm_dim(who, y, o.dim == nil and -1 or o.dim)
end

-- the trapezoids' areas along d (n - 1 of them)
local function trapezoids(who, y, x, dx, d)
  local n = y:size(d)
  if n == 0 then return y:narrow(d, 1, 0) end
  local yf = float_of(y)
  local mid = (yf:narrow(d, 2, n - 1) + yf:narrow(d, 1, n - 1)) / 2
  if x == nil then return mid * dx end
  local dxs
  if x:dim() == 1 then
    if x:numel() ~= n then
      E.raise(string.format("%s: x must have y's %d values along dim %d, got %s", who, n, d, shape(x)))
    end
    local view = {}
    for k = 1, y:dim() do view[k] = k == d and n - 1 or 1 end
    dxs = x:diff():reshape(view)
  else
    dxs = x:diff(1, d)
  end
  return mid * dxs
end

--- ddp.trapezoid(y [, x] [, {dx=1, dim=-1}]): the integral of y along dim by the trapezoid rule, at the sample
--- points x (1-D, or shaped as y) or evenly dx apart
function M.trapezoid(y, x, opts)
  local dx, d
  y, x, dx, d = trapezoid_args("trapezoid", y, x, opts)
  return trapezoids("trapezoid", y, x, dx, d):sum(d)
end
M.trapz = M.trapezoid

--- ddp.cumulative_trapezoid(y [, x] [, {dx=1, dim=-1}]): the running integral (one value fewer along dim)
function M.cumulative_trapezoid(y, x, opts)
  local dx, d
  y, x, dx, d = trapezoid_args("cumulative_trapezoid", y, x, opts)
  return trapezoids("cumulative_trapezoid", y, x, dx, d):cumsum(d)
end

-- ---- sets, diagonals, Vandermonde, combinations -----------------------------------------------------------------

--- ddp.isin(elements, test_elements [, {invert=false}]): uint8, elements' shape: which occur among test_elements
--- (a tensor or a number; NaN occurs nowhere)
function T.isin(elements, test, opts)
  check_tensor("isin", elements)
  local o = options("isin", opts, { "invert", "assume_unique" })
  if o.assume_unique ~= nil then bool_opt("isin", o.assume_unique, "assume_unique", false) end
  local invert = bool_opt("isin", o.invert, "invert", false)
  if not core.is_tensor(test) then
    if type(test) ~= "number" then E.raise("isin: test_elements must be a tensor or a number, got " .. type(test)) end
    test = core.full({ 1 }, test, { dtype = elements:dtype(), device = elements:device() })
  end
  local e, s = elements:detach(), test:detach():reshape(-1)
  if e:dtype() ~= s:dtype() then
    local dt = (FLOATS[e:dtype()] or FLOATS[s:dtype()]) and "float64" or "int64"
    e, s = e:to(dt), s:to(dt)
  end
  local r
  if s:numel() == 0 then
    r = core.zeros(e:size(), { dtype = "uint8", device = e:device() })
  else
    s = s:sort()
    local pos = M.searchsorted(s, e):clamp(1, s:numel()) -- the first test value at least e
    r = s:gather(1, pos:reshape(-1)):reshape(e:size()):eq(e)
  end
  return invert and r:logical_not() or r
end

--- ddp.diagflat(x [, offset=0]): the square matrix with x's values (flattened) on the diagonal offset
function T.diagflat(t, offset)
  check_tensor("diagflat", t)
  return t:reshape(-1):diag(offset or 0)
end

--- ddp.vander(x [, {N=, increasing=false}]): the columns x^(N-1), ..., x^0 of the 1-D x (increasing: x^0 first)
function M.vander(x, opts)
  check_tensor("vander", x)
  local o = options("vander", opts, { "N", "increasing" })
  if x:dim() ~= 1 then E.raise("vander: expected a 1-D tensor, got " .. shape(x)) end
  local n = o.N == nil and x:numel() or o.N
  if math.type(n) ~= "integer" or n < 0 then E.raise("vander: N must be a non-negative integer, got " .. tostring(n)) end
  local inc = bool_opt("vander", o.increasing, "increasing", false)
  local dt = FLOATS[x:dtype()] and x:dtype() or "int64"
  local xs = x:to(dt)
  if n == 0 then return core.zeros({ x:numel(), 0 }, { dtype = dt, device = x:device() }) end
  local cols = { core.ones({ x:numel() }, { dtype = dt, device = x:device() }) } -- x^0, then running products
  for k = 2, n do cols[k] = cols[k - 1] * xs end
  if not inc then
    local rev = {}
    for k = 1, n do rev[k] = cols[n + 1 - k] end
    cols = rev
  end
  return core.stack(cols, 2)
end

--- ddp.combinations(x [, r=2 [, with_replacement=false]]): the r-element combinations of the 1-D x's values, in
--- order, as rows [C, r]
function M.combinations(x, r, with_replacement)
  check_tensor("combinations", x)
  if x:dim() ~= 1 then E.raise("combinations: expected a 1-D tensor, got " .. shape(x)) end
  r = r == nil and 2 or r
  if math.type(r) ~= "integer" or r < 0 then E.raise("combinations: r must be a non-negative integer, got " .. tostring(r)) end
  local rep = bool_opt("combinations", with_replacement, "with_replacement", false)
  local n = x:numel()
  if r == 0 then return x:narrow(1, 1, 0) end
  local rows, cur = {}, {}
  local function walk(k, from)
    if k > r then
      rows[#rows + 1] = { table.unpack(cur) }
      if #rows > 1e6 then E.raise("combinations: more than a million combinations") end
      return
    end
    for i = from, n do
      cur[k] = i
      walk(k + 1, rep and i or i + 1)
    end
  end
  walk(1, 1)
  if #rows == 0 then return core.zeros({ 0, r }, { dtype = x:dtype(), device = x:device() }) end
  local idx = M.tensor(rows, { dtype = "int64" }):to(x:device())
  return x:index_select(1, idx:reshape(-1)):reshape({ #rows, r })
end

-- ---- lgamma, digamma, float_power, normal -----------------------------------------------------------------------

local LANCZOS = { 0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313,
  -176.61502916214059, 12.507343278686905, -0.13857109526572012, 9.9843695780195716e-6, 1.5056327351493116e-7 }

-- log|Gamma(z)| for float64 z >= 1/2 (Lanczos, g = 7)
local function lgamma_right(z)
  local x = z - 1
  local a = core.full(z:size(), LANCZOS[1], { dtype = "float64", device = z:device() })
  for k = 2, 9 do a = a + LANCZOS[k] / (x + (k - 1)) end
  local t = x + 7.5
  return (x + 0.5) * t:log() - t + (0.5 * math.log(2 * math.pi)) + a:log()
end

--- x:lgamma(): log|Gamma(x)| (inf at 0 and the negative integers)
function T.lgamma(t)
  check_tensor("lgamma", t)
  local x = t:double()
  local left = x:detach():lt(0.5)
  local xr = core.where(left, 1 - x, x) -- the reflection's partner, >= 1/2
  local right = lgamma_right(xr)
  local s = (core.where(left, x, 0.5) * math.pi):sin():abs()
  local reflected = math.log(math.pi) - s:log() - right
  local r = core.where(left, reflected, right)
  local pole = x:detach():le(0):logical_and(x:detach():eq(x:detach():floor()))
  r = core.where(pole, math.huge, r)
  return r:to(FLOATS[t:dtype()] and t:dtype() or "float32")
end

-- digamma of float64 z >= 6 by the asymptotic series (to z^-14: the next term is below 2e-14 there)
local function digamma_series(z)
  local z2 = (z * z):reciprocal()
  local s = z2 * (-1 / 12 + z2 * (1 / 120 + z2 * (-1 / 252 + z2 * (1 / 240 + z2 * (-1 / 132 + z2 * (691 / 32760 +
    z2 * (-1 / 12)))))))
  return z:log() - (z * 2):reciprocal() + s
end

--- x:digamma(): the derivative of lgamma (-inf at 0, NaN at the negative integers, as PyTorch's)
function T.digamma(t)
  check_tensor("digamma", t)
  local x = t:double()
  local xd = x:detach()
  local left = xd:lt(0)
  local y = core.where(left, 1 - x, x) -- reflected: psi(x) = psi(1 - x) - pi / tan(pi x)
  local acc = core.zeros(y:size(), { dtype = "float64", device = y:device() })
  for k = 0, 5 do acc = acc + (y + k):reciprocal() end -- psi(y) = psi(y + 6) - sum 1 / (y + k)
  local psi = digamma_series(y + 6) - acc
  local refl = core.where(left, (core.where(left, x, 0.5) * math.pi):tan(), 1)
  local r = core.where(left, psi - refl:reciprocal() * math.pi, psi)
  r = core.where(xd:eq(0), -math.huge, r)
  r = core.where(left:logical_and(xd:eq(xd:floor())), 0 / 0, r)
  return r:to(FLOATS[t:dtype()] and t:dtype() or "float32")
end

--- ddp.float_power(a, b): a ^ b in float64 (a and b tensors or numbers)
function M.float_power(a, b)
  if not core.is_tensor(a) and not core.is_tensor(b) then E.raise("float_power: expected at least one tensor") end
  local x = core.is_tensor(a) and a:double() or a
  local y = core.is_tensor(b) and b:double() or b
  if not core.is_tensor(x) then x = core.full({}, x, { dtype = "float64", device = y:device() }) end
  return x:pow(y)
end
T.float_power = M.float_power

--- ddp.normal(mean, std [, size]): normal draws with the given means and standard deviations (tensors, broadcast,
--- or numbers with a size); the gradient reaches mean and std
function M.normal(mean, std, size)
  local ref = core.is_tensor(mean) and mean or (core.is_tensor(std) and std or nil)
  local sz
  if ref then
    local m = core.is_tensor(mean) and mean or core.full({}, mean, { dtype = ref:dtype(), device = ref:device() })
    local s = core.is_tensor(std) and std or core.full({}, std, { dtype = ref:dtype(), device = ref:device() })
    sz = checks.broadcast_shape("normal", m, s)
    if s:detach():lt(0):any():item() ~= 0 then E.raise("normal: std must be >= 0") end
    return core.randn(sz, { dtype = ref:dtype(), device = ref:device() }) * s + m
  end
  if type(mean) ~= "number" or type(std) ~= "number" then E.raise("normal: mean and std must be numbers or tensors") end
  if type(size) ~= "table" then E.raise("normal: give the size (a table of sizes) with number mean and std") end
  if std < 0 then E.raise("normal: std must be >= 0, got " .. std) end
  return core.randn(size) * std + mean
end

for _, name in ipairs({ "isin", "diagflat", "lgamma", "digamma" }) do M[name] = T[name] end

return T
