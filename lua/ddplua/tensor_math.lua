-- PyTorch's elementwise math that ddplua's ops compose, each a method and a ddp. function, with PyTorch's argument
-- order: atan2(y, x), hypot, logaddexp, logaddexp2, xlogy, lerp(end, weight), addcmul(t1, t2, value) and addcdiv(t1,
-- t2, value) (value positional or {value = v}), clip (clamp), nan_to_num(nan, posinf, neginf) (or a table of them),
-- deg2rad, rad2deg, heaviside(values), sgn (sign), true_divide (div), rsub(other, alpha), floor_divide, fmod,
-- remainder, logit(eps), frac. Gradients come from the compositions, arranged so that they are PyTorch's formulas
-- (where's both branches are computed with safe operands, so that the branch not taken never gives 0 * inf); dtypes as
-- PyTorch's: integers give float32 where PyTorch's math functions do (atan2, xlogy, deg2rad, logit, true_divide), stay
-- integers where its ops keep them (addcmul, rsub, floor_divide, fmod, remainder, heaviside, nan_to_num, sgn, clip),
-- and are refused where it refuses them (hypot, logaddexp, logaddexp2, lerp, frac, addcdiv of two integer tensors).
--
-- fmod, remainder and floor_divide compute the remainder exactly, as C's fmod (in float64: the product q * b split into
-- two exact halves, Dekker's; large quotients reduced modulo b * 2^k first). remainder and floor_divide then follow
-- PyTorch's kernels (mod += b where the signs differ; floor_divide as its div_floor), so they round as PyTorch's.
-- Integer division by zero is an error, as PyTorch's.
--
-- Deliberate differences from PyTorch: the first operand must be a tensor (PyTorch's remainder and xlogy also take a
-- number first: ddp.remainder, ddp.fmod and ddp.floor_divide do, the methods cannot); a Lua number is accepted as the
-- second operand of atan2, hypot, logaddexp, logaddexp2 and heaviside too; at the singular points the gradients are
-- those of the composition, not PyTorch's NaN: atan2 at (0, 0) gives (1, 0) for (y, x) and at two infinities 0, hypot
-- and logaddexp at infinite operands 0 or 1 (PyTorch: inf / inf, NaN), xlogy's at x == 0 and y 0 or inf 0 for both
-- (PyTorch's y gradient x / y is NaN at y == 0, its x gradient inf at y == inf), and logit with eps at NaN 0; atan2's
-- gradient does not overflow where x^2 + y^2 does (PyTorch's gives 0 or NaN there); heaviside and floor_divide give
-- results without a gradient (PyTorch's raise on backward); clip takes numbers only (as clamp); lerp, addcmul and
-- addcdiv round the product and the sum separately, where PyTorch's CPU kernels contract them into one fma (an ulp of
-- the larger term apart); PyTorch's float32 fmod (and so remainder and floor_divide) gives NaN for quotients beyond
-- about 2^64, ddplua's the exact remainder.
local core = require "ddplua.core"
local E = require "ddplua.errors"
local T = core.Tensor
local M = package.loaded["ddplua"]

local checks = require "ddplua.tensor_checks"
local FLOATS, check_tensor = checks.FLOATS, checks.check_tensor

local function needs_float(t) return FLOATS[t:dtype()] and t or t:float() end

local function check_number(who, v, what)
  if type(v) ~= "number" then E.raise(string.format("%s: %s must be a number, got %s", who, what, type(v))) end
end

local function check_operand(who, v, what)
  if not core.is_tensor(v) and type(v) ~= "number" then
    E.raise(string.format("%s: expected a tensor or a number as %s, got %s", who, what, type(v)))
  end
end

-- PyTorch's result dtype of two operands (tensors or numbers): the ops themselves on one-element stand-ins that
-- keep each operand's dtype and whether it is 0-dim
local function result_dtype(a, b)
  local function stand_in(x)
    if not core.is_tensor(x) then return x end
    return core.zeros(x:dim() == 0 and {} or { 1 }, { dtype = x:dtype() })
  end
  local sa, sb = stand_in(a), stand_in(b)
  if not core.is_tensor(sa) and not core.is_tensor(sb) then
    return (math.type(a) == "integer" and math.type(b) == "integer") and "int64" or "float32"
  end
  if not core.is_tensor(sa) then sa, sb = sb, sa end
  return (sa + sb):dtype()
end

-- a number as a 0-dim tensor that promotes as the number does against t: float64 for a float number beside a
-- float tensor (then rounded by the op as PyTorch rounds a wrapped number), float32 beside an integer tensor
local function as_tensor(v, t)
  if core.is_tensor(v) then return v end
  local dt
  if math.type(v) == "integer" then dt = "int64"
  else dt = FLOATS[t:dtype()] and "float64" or "float32" end
  return core.full({}, v, { dtype = dt, device = t:device() })
end

-- both operands as tensors of their result dtype (float: a float dtype, integers giving float32)
local function promote(who, a, b, float)
  check_tensor(who, a)
  check_operand(who, b, "the second operand")
  local dt = result_dtype(a, b)
  if float and not FLOATS[dt] then dt = "float32" end
  b = as_tensor(b, a)
  if a:dtype() ~= dt then a = a:to(dt) end
  if b:dtype() ~= dt then b = b:to(dt) end
  return a, b, dt
end

local function float_only(who, dt)
  if not FLOATS[dt] then E.raise(string.format("%s: expected floating-point tensors, got %s", who, dt)) end
end

-- a number rounded as the dtype's kernels see it (float32's opmath for float32, bfloat16 and float16)
local function opmath(v, dt)
  if dt == "float64" then return v end
  return (string.unpack("<f", string.pack("<f", v)))
end

local function isinf(t) return t:abs():eq(math.huge) end
local function isnan(t) return t:ne(t) end
local function either(m1, m2) return (m1 + m2):ne(0) end -- uint8 masks
local function both(m1, m2) return (m1 * m2):ne(0) end
-- x < 0 or x is -0 (the sign bit; false for NaN)
local function signbit(x) return either(x:lt(0), x:reciprocal():lt(0)) end

local PI = math.pi

-- a number as a 0-dim tensor of t's dtype and device (core.where of two numbers would give float32)
local function const(t, v) return core.full({}, v, { dtype = t:dtype(), device = t:device() }) end

--- atan2(y, x): the angle of (x, y), in (-pi, pi], as PyTorch (signed zeros and infinities included); float
function T.atan2(y, x)
  y, x = promote("atan2", y, x, true)
  local ax, ay = x:abs(), y:abs()
  local flat = ax:ge(ay) -- |y| <= |x|: atan(y / x), else pi/2 sign(y) - atan(x / y) (no division by 0 either way)
  local d1 = core.where(both(flat, x:ne(0)), x, 1)
  local d2 = core.where(flat, 1, y)
  local r1 = (y / d1):atan()
  local xneg, yneg = signbit(x), signbit(y)
  local half = core.where(yneg, const(y, -PI), PI) -- pi with y's sign (-0 included)
  r1 = core.where(xneg, r1 + half, r1)
  local r2 = core.where(yneg, const(y, -PI / 2), PI / 2) - (x / d2):atan()
  local out = core.where(flat, r1, r2)
  -- two infinities: +-pi/4 or +-3pi/4
  local quarter = core.where(xneg, const(y, 3 * PI / 4), PI / 4)
  return core.where(both(isinf(x), isinf(y)), core.where(yneg, -quarter, quarter), out)
end

--- hypot(a, b): sqrt(a^2 + b^2) without overflow or underflow (scaled by the larger magnitude); inf where either
--- is infinite (even if the other is NaN), as C's hypot; floating-point only
function T.hypot(a, b)
  local dt
  a, b, dt = promote("hypot", a, b)
  float_only("hypot", dt)
  local s = core.maximum(a:abs(), b:abs()):detach()
  local bad = either(either(s:eq(0), isnan(s)), isinf(s))
  s = core.where(bad, 1, s)
  local out = ((a / s):square() + (b / s):square()):sqrt() * s
  return core.where(either(isinf(a), isinf(b)), math.huge, out)
end

-- log(base^a + base^b) for base e or 2, PyTorch's formula: max + log1p(base^-|a - b|) (/ ln 2), a where both are
-- the same infinity; each side of the max through softplus-like terms of non-positive arguments
local function logaddexp(who, a, b, base2)
  local dt
  a, b, dt = promote(who, a, b)
  float_only(who, dt)
  local ge = a:ge(b)
  local d1 = core.where(ge, b - a, 0)
  local d2 = core.where(ge, 0, a - b)
  local function sp(z)
    if base2 then return z:exp2():log1p() * opmath(1 / math.log(2), dt) end
    return z:exp():log1p()
  end
  local out = core.where(ge, a + sp(d1), b + sp(d2))
  return core.where(both(isinf(a), a:eq(b)), a, out)
end
function T.logaddexp(a, b) return logaddexp("logaddexp", a, b, false) end
function T.logaddexp2(a, b) return logaddexp("logaddexp2", a, b, true) end

--- xlogy(x, y): x * log(y), 0 where x == 0 unless y is NaN (NaN there), as PyTorch; float
function T.xlogy(x, y)
  x, y = promote("xlogy", x, y, true)
  -- x * log(y), its gradient PyTorch's: log(y) for x (0 where x == 0 and y <= 0), x / y for y; where x == 0 and y <=
  -- 0 or y == inf, x * log(1) (no 0 * inf); a zero from x == 0 made +0
  local zero = x:eq(0)
  local ys = core.where(both(zero, either(y:le(0), y:eq(math.huge))), 1, y)
  local out = x * ys:log()
  out = core.where(zero, out + 0, out)
  return core.where(isnan(y), 0 / 0, out)
end

--- lerp(start, end, weight): start + weight * d where weight < 0.5, else end + (weight - 1) * d, d = end - start
--- (PyTorch 1.13's kernel: its condition weight < 0.5, not |weight| < 0.5, so that lerp(0, -inf, -1) is inf; each
--- form one fused multiply-add); weight a number or a tensor; start, end and a weight tensor of one float dtype
function T.lerp(start, stop, weight)
  check_tensor("lerp", start)
  check_tensor("lerp", stop, " as end")
  local dt = start:dtype()
  float_only("lerp", dt)
  if stop:dtype() ~= dt then E.raise(string.format("lerp: expected dtype %s for end, got %s", dt, stop:dtype())) end
  if type(weight) ~= "number" then
    if not core.is_tensor(weight) then
      E.raise("lerp: expected a number or a tensor as weight, got " .. type(weight))
    end
    if weight:dtype() ~= dt then
      E.raise(string.format("lerp: expected dtype %s for weight, got %s", dt, weight:dtype()))
    end
  end
  if dt == "float64" then -- the product and the sum rounded apiece (no fused multiply-add here)
    local d = stop - start
    if type(weight) == "number" then
      if weight < 0.5 then return start + d * weight end
      return stop + d * (weight - 1)
    end
    return core.where(weight:lt(0.5), start + weight * d, stop + (weight - 1) * d)
  end
  -- float32 and the half types compute in float32 as PyTorch's: d and weight - 1 rounded to float32, the fused
  -- multiply-add emulated in float64 (a product of two floats is exact there, so only the sum rounds before the
  -- rounding to float32: PyTorch's result bit for bit but in rare double roundings)
  local s, e = start:float(), stop:float()
  local d = (e - s):double()
  local r
  if type(weight) == "number" then
    local w = opmath(weight, dt)
    r = w < 0.5 and s:double() + d * w or e:double() + d * opmath(w - 1, dt)
  else
    local w = weight:float()
    r = core.where(w:lt(0.5), s:double() + d * w:double(), e:double() + d * (w - 1):double())
  end
  r = r:float()
  return dt == "float32" and r or r:to(dt)
end

-- addcmul / addcdiv's operands checked, and value (positional or {value = v}, default 1)
local function addc_args(who, input, t1, t2, v)
  check_tensor(who, input)
  check_tensor(who, t1, " as tensor1")
  check_tensor(who, t2, " as tensor2")
  if type(v) == "table" and not core.is_tensor(v) then v = v.value end
  if v == nil then return 1 end
  check_number(who, v, "value")
  return v
end

--- addcmul(input, t1, t2 [, value]): input + value * t1 * t2
function T.addcmul(input, t1, t2, value)
  local v = addc_args("addcmul", input, t1, t2, value)
  -- the dtype of input + t1 * t2 from stand-ins (the product itself is computed once, below)
  local prod = core.zeros((t1:dim() == 0 and t2:dim() == 0) and {} or { 1 }, { dtype = result_dtype(t1, t2) })
  local dt = result_dtype(input, prod)
  -- an integer result takes value as an integer, truncated (as PyTorch casts it)
  if not FLOATS[dt] and math.type(v) ~= "integer" then
    local i = math.tointeger(v < 0 and math.ceil(v) or math.floor(v))
    if not i then E.raise("addcmul: value " .. tostring(v) .. " does not fit an integer tensor") end
    v = i
  end
  if v == 1 then return input + t1 * t2 end
  return input + (t1 * v) * t2
end

--- addcdiv(input, t1, t2 [, value]): input + value * t1 / t2 (not for two integer tensors, as PyTorch)
function T.addcdiv(input, t1, t2, value)
  local v = addc_args("addcdiv", input, t1, t2, value)
  if not FLOATS[t1:dtype()] and not FLOATS[t2:dtype()] then
    E.raise("addcdiv: integer division of tensor1 by tensor2 is not supported (as PyTorch); convert them to float")
  end
  if v == 1 then return input + t1 / t2 end
  return input + (t1 * v) / t2
end

--- clip(min, max): clamp
function T.clip(t, min, max)
  check_tensor("clip", t)
  return t:clamp(min, max)
end

local DTYPE_MAX = { float32 = 3.4028234663852886e38, float64 = 1.7976931348623157e308, float16 = 65504.0,
  bfloat16 = 3.3895313892515355e38 }

--- nan_to_num([nan [, posinf [, neginf]]]) (or a table {nan =, posinf =, neginf =}): NaN, +inf and -inf replaced
--- by nan (0), posinf (the dtype's largest value) and neginf (its lowest); integer tensors unchanged (a copy)
function T.nan_to_num(t, nan, posinf, neginf)
  check_tensor("nan_to_num", t)
  if type(nan) == "table" then nan, posinf, neginf = nan.nan, nan.posinf, nan.neginf end
  for _, p in ipairs({ { nan, "nan" }, { posinf, "posinf" }, { neginf, "neginf" } }) do
    if p[1] ~= nil then check_number("nan_to_num", p[1], p[2]) end
  end
  if not FLOATS[t:dtype()] then return t:clone() end
  local big = DTYPE_MAX[t:dtype()]
  nan, posinf, neginf = nan or 0, posinf or big, neginf or -big
  local out = core.where(t:eq(math.huge), posinf, t)
  out = core.where(t:eq(-math.huge), neginf, out)
  return core.where(isnan(t), nan, out)
end

--- deg2rad(), rad2deg(): times pi / 180, 180 / pi (PyTorch's constants); integers give float32
function T.deg2rad(t)
  check_tensor("deg2rad", t)
  return needs_float(t) * 0.017453292519943295769236907684886127134428718885417
end
function T.rad2deg(t)
  check_tensor("rad2deg", t)
  return needs_float(t) * 57.295779513082320876798154814105170332405472466564
end

--- heaviside(values): 0 where t < 0, values where t == 0, 1 where t > 0 (NaN gives 0, as PyTorch); t and values of
--- one dtype; no gradient
function T.heaviside(t, values)
  check_tensor("heaviside", t)
  check_operand("heaviside", values, "values")
  if core.is_tensor(values) and values:dtype() ~= t:dtype() then
    E.raise(string.format("heaviside: t and values must have one dtype, got %s and %s", t:dtype(), values:dtype()))
  end
  t = t:detach()
  if core.is_tensor(values) then values = values:detach() end
  return core.where(t:eq(0), values, t:gt(0):to(t:dtype())):to(t:dtype())
end

--- sgn(): sign (for real tensors)
function T.sgn(t)
  check_tensor("sgn", t)
  return t:sign()
end

--- true_divide(other): div
function T.true_divide(t, other)
  check_tensor("true_divide", t)
  check_operand("true_divide", other, "the divisor")
  return t:div(other)
end

--- rsub(other [, alpha]): other - alpha * t
function T.rsub(t, other, alpha)
  check_tensor("rsub", t)
  check_operand("rsub", other, "other")
  if alpha == nil then alpha = 1 end
  check_number("rsub", alpha, "alpha")
  if math.type(alpha) ~= "integer" and not FLOATS[result_dtype(t, other)] then
    E.raise("rsub: alpha must be an integer for integer tensors, got " .. tostring(alpha))
  end
  if core.is_tensor(other) then return other:sub(t, alpha) end
  return t * -alpha + other
end

-- ---- fmod, remainder, floor_divide ----

-- float64 x split into two halves of 26 bits (Veltkamp), so that products of halves are exact
local function split(x)
  local c = x * 134217729.0
  local hi = c - (c - x)
  return hi, x - hi
end

-- r - trunc(r / b) * b of finite float64 tensors, exactly where the quotient is below 2^52 or so (no gradient):
-- q * b as p + e exactly (Dekker), r - p exact where p is near r
local function reduce_f64(r, b)
  local q = (r / b):trunc()
  local p = q * b
  local qh, ql = split(q)
  local bh, bl = split(b)
  local e = ((qh * bh - p) + qh * bl + ql * bh) + ql * bl
  return core.where(either(isinf(e), isnan(e)), r - p, (r - p) - e)
end

-- the exact remainder a - trunc(a / b) * b of float64 tensors (C's fmod; no gradient): a reduced modulo b * 2^k
-- (a multiple of b, exact) while |a / b| >= 2^50, each step exact, then modulo b; where the quotient was one too
-- large (a / b rounded up to an integer) the sign flipped: b added back
local function fmod_f64(a, b)
  local special = either(either(isnan(a), isnan(b)), either(isinf(a), either(isinf(b), b:eq(0))))
  local bs = core.where(special, 1, b)
  local r = core.where(special, 0, a)
  local lb = bs:abs():log2()
  for _ = 1, 50 do
    local k = (r:abs():log2() - lb):floor() - 50
    local far = k:gt(0)
    if far:any():item() == 0 then break end
    k = core.where(far, k, 0)
    local k3 = (k / 3):floor()
    local bk = bs * k3:exp2() * k3:exp2() * (k - 2 * k3):exp2() -- 2^k in three factors: none overflows
    r = core.where(far, reduce_f64(r, bk), r)
  end
  r = reduce_f64(r, bs)
  local off = both(r:ne(0), signbit(r):ne(signbit(a)))
  r = core.where(off, r + core.where(signbit(a):ne(signbit(bs)), -bs, bs), r)
  r = core.where(r:eq(0), a * 0, r) -- a zero remainder has a's sign
  -- NaN for b == 0, an infinite a or NaN; a finite a modulo an infinity is a
  return core.where(special, core.where(both(isinf(b), isinf(a):eq(0)), a, 0 / 0), r)
end

-- integer a divided by b (int64 tensors, b != 0): the truncated quotient and remainder, exact (a quotient from
-- float64 corrected twice by the exact int64 remainder)
local function divmod_i64(a, b)
  local bd = b:double()
  local q = (a:double() / bd):trunc():long()
  for _ = 1, 2 do
    local r = a - q * b
    q = q + (r:double() / bd):trunc():long()
  end
  local r = a - q * b
  -- |r| < |b| with a's sign: one step more where it is not
  local fix = core.where(both(r:ne(0), r:lt(0):ne(a:lt(0))), core.where(a:lt(0):ne(b:lt(0)), -1, 1), 0)
  fix = fix + core.where(r:abs():ge(b:abs()), core.where(r:lt(0):ne(b:lt(0)), -1, 1), 0)
  q = q + fix
  return q, a - q * b
end

-- the operands of fmod / remainder / floor_divide: tensors of their result dtype (either may be a number)
local function div_operands(who, a, b)
  if not core.is_tensor(a) and core.is_tensor(b) then
    check_operand(who, a, "the dividend")
    local dt = result_dtype(b, a)
    a = as_tensor(a, b)
    if a:dtype() ~= dt then a = a:to(dt) end
    if b:dtype() ~= dt then b = b:to(dt) end
    return a, b, dt
  end
  return promote(who, a, b)
end

local function check_int_divisor(who, b)
  if b:eq(0):any():item() ~= 0 then E.raise(who .. ": integer division by zero") end
end

-- the exact fmod of floats as a tensor of dt (no gradient), and the two operands detached
local function float_fmod(a, b, dt)
  local r = fmod_f64(a:detach():double(), b:detach():double())
  return dt == "float64" and r or r:to(dt)
end

-- value with the gradient of a - q * b (q constant): PyTorch's d/da = 1, d/db = -q
local function with_grad(value, a, b, q)
  if not (core.is_grad_enabled() and (a.requires_grad or b.requires_grad)) then return value end
  local bs = core.where(isinf(b), 0, b)
  local x = a - q * bs
  return value - (x:detach() - x) -- x - x is +0 where finite: value exactly, -0 kept
end

-- PyTorch's div_floor of floats from the exact mod (dt's arithmetic)
local function float_floor_divide(a, b, mod)
  local div = (a - mod) / b
  div = core.where(both(mod:ne(0), b:lt(0):ne(mod:lt(0))), div - 1, div)
  local fl = div:floor()
  fl = core.where((div - fl):gt(0.5), fl + 1, fl)
  local q = a / b
  local zero = q * 0 -- copysign(0, a / b) (q is finite where div is 0)
  fl = core.where(div:eq(0), zero, fl)
  return core.where(b:eq(0), q, fl)
end

local function int_result(t, dt) return dt == "int64" and t or t:to(dt) end

--- fmod(a, b): a - trunc(a / b) * b with a's sign (C's fmod); either may be a number (ddp.fmod)
function T.fmod(a, b)
  local dt
  a, b, dt = div_operands("fmod", a, b)
  if not FLOATS[dt] then
    check_int_divisor("fmod", b)
    local _, r = divmod_i64(a:long(), b:long())
    return int_result(r, dt)
  end
  local r = float_fmod(a, b, dt)
  local q = (a:detach() / b:detach()):trunc()
  return with_grad(r, a, b, q)
end

--- remainder(a, b): a - floor(a / b) * b with b's sign (Python's %, PyTorch's remainder); either may be a number
function T.remainder(a, b)
  local dt
  a, b, dt = div_operands("remainder", a, b)
  if not FLOATS[dt] then
    check_int_divisor("remainder", b)
    local _, r = divmod_i64(a:long(), b:long())
    local bl = b:long()
    r = core.where(both(r:ne(0), r:lt(0):ne(bl:lt(0))), r + bl, r)
    return int_result(r, dt)
  end
  local ad, bd = a:detach(), b:detach()
  local mod = float_fmod(a, b, dt)
  local r = core.where(both(mod:ne(0), bd:lt(0):ne(mod:lt(0))), mod + bd, mod)
  return with_grad(r, a, b, float_floor_divide(ad, bd, mod))
end

--- floor_divide(a, b): floor(a / b) (PyTorch 1.13's rounding, its div_floor for floats); either may be a number;
--- no gradient
function T.floor_divide(a, b)
  local dt
  a, b, dt = div_operands("floor_divide", a, b)
  a, b = a:detach(), b:detach()
  if not FLOATS[dt] then
    check_int_divisor("floor_divide", b)
    local al, bl = a:long(), b:long()
    local q, r = divmod_i64(al, bl)
    q = core.where(both(r:ne(0), r:lt(0):ne(bl:lt(0))), q - 1, q)
    return int_result(q, dt)
  end
  return float_floor_divide(a, b, float_fmod(a, b, dt))
end

--- logit([eps]): log(t / (1 - t)), t clamped to [eps, 1 - eps] first when eps >= 0 is given; -inf at 0, inf at 1,
--- NaN outside [0, 1]; integers give float32
function T.logit(t, eps)
  check_tensor("logit", t)
  if eps ~= nil then check_number("logit", eps, "eps") end
  local x = needs_float(t)
  local dt = x:dtype()
  if eps ~= nil and eps >= 0 then
    local lo = opmath(eps, dt)
    x = x:clamp(lo, opmath(1 - lo, dt))
  end
  -- at 0 and 1 log(x) - log1p(-x), whose gradient is inf there as PyTorch's (the quotient's would be NaN)
  local edge = either(x:eq(0), x:eq(1))
  local xs = core.where(edge, 0.5, x)
  local xe = core.where(edge, x, 0.5)
  -- (plus 0 * sqrt(x (1 - x)): nothing, but a NaN gradient outside [0, 1], as PyTorch's)
  local general = (xs / (1 - xs)):log() + (xs * (1 - xs)):sqrt() * 0
  return core.where(edge, xe:log() - (-xe):log1p(), general)
end

--- frac(): t - trunc(t) (with t's sign; NaN at +-inf); floating-point only
function T.frac(t)
  check_tensor("frac", t)
  float_only("frac", t:dtype())
  return t - t:trunc()
end

for _, name in ipairs({ "atan2", "hypot", "logaddexp", "logaddexp2", "xlogy", "lerp", "addcmul", "addcdiv", "clip",
  "nan_to_num", "deg2rad", "rad2deg", "heaviside", "sgn", "true_divide", "rsub", "floor_divide", "fmod", "remainder",
  "logit", "frac" }) do
  M[name] = T[name]
end

-- Python's operators: a % b is remainder, a // b floor_divide (a number on either side, as + - * / take)
local mt = debug.getregistry()["ddplua.Tensor"]
mt.__mod = T.remainder
mt.__idiv = T.floor_divide

return T
