-- The elementwise math composed in lua/ddplua/tensor_math.lua against PyTorch 1.13: values at 0, +-0, +-1, NaN,
-- +-inf and large magnitudes (signed zeros included), result dtypes (integers, mixed dtypes, numbers), gradients
-- (float32 and float64, broadcasting, transposed views), exactness of fmod / remainder / floor_divide, empty
-- tensors and bad arguments.
local ddp = require "ddplua"
local R = require "helpers.ref"
local TR = require "helpers.torch_ref"
local TC = require "helpers.torch_cases"
local gc = require "helpers.gradcheck"

local NO_TORCH = "skipped: /usr/bin/python3 cannot import torch"
local nan, inf = 0 / 0, math.huge

-- values and their signs (a zero's too) within atol + rtol |want|; NaN matches NaN
local function same(got, want, atol, rtol, what, opts)
  opts = opts or {}
  assert(got:dtype() == want:dtype(), string.format("%s: dtype %s, PyTorch's %s", what, got:dtype(), want:dtype()))
  assert(table.concat(got:size(), ",") == table.concat(want:size(), ","), what .. ": shape")
  local g, w = gc.flat_values(got), gc.flat_values(want)
  for k = 1, #w do
    local x, y = g[k], w[k]
    local ok
    if y ~= y then ok = x ~= x
    elseif y == 0 then ok = x == 0 and (opts.nosign or 1 / x == 1 / y)
    elseif math.abs(y) == inf then ok = x == y
    else ok = math.abs(x - y) <= atol + rtol * math.abs(y) end
    if not ok and opts.alt then ok = opts.alt(k, x, y) end
    if not ok then
      error(string.format("%s: element %d is %.17g, PyTorch's %.17g", what, k, x, y), 2)
    end
  end
end

local SPECIAL = { 0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 7.0, -7.0, 3.0, nan, inf, -inf, 1e30, -1e30, 1e-30, 0.25 }

-- every pair of SPECIAL (a as rows, b as columns), as [n, n] tensors: the runtime's broadcast kernels of [n, 1]
-- with [n] give +0 for -0 * 1 and -0 / 1 (outside this file; broadcasting itself is checked with the gradients)
local function pairs_of(dt)
  local n = #SPECIAL
  local a = ddp.tensor(SPECIAL, { dtype = dt }):view({ n, 1 }):expand({ n, n }):contiguous()
  local b = ddp.tensor(SPECIAL, { dtype = dt }):view({ 1, n }):expand({ n, n }):contiguous()
  return a, b
end

describe("tensor_math.lua: elementwise math composed in Lua", function()
  it("match PyTorch's values at special values and their dtypes (floats, integers, mixed, numbers)", function()
    if not TR.available() then return pending(NO_TORCH) end
    local I, body, cases = {}, {}, {}
    local function case(key, got, py, tol, opts)
      cases[#cases + 1] = { key = key, got = got, tol = tol, opts = opts }
      body[#body + 1] = string.format("OUT[%q] = %s", key, py)
    end
    for _, dt in ipairs({ "float32", "float64" }) do
      local a, b = pairs_of(dt)
      I["a" .. dt], I["b" .. dt] = a, b
      local A, B = string.format("T['a%s']", dt), string.format("T['b%s']", dt)
      local t32 = dt == "float32" and { 2e-7, 4e-7 } or { 1e-15, 1e-15 }
      local exact = { 0, 0 }
      -- PyTorch's fused multiply-add: an ulp of the product or sum apart
      local fma = dt == "float32" and { 0, 1.2e-7 } or { 0, 2.3e-16 }
      -- PyTorch's float32 fmod (SLEEF's) gives NaN for quotients beyond 2^64 or so; ddplua's is C's fmod there
      local av, bv = gc.flat_values(a), gc.flat_values(b)
      local function huge(k, y) return y ~= y and dt == "float32" and math.abs(av[k] / bv[k]) > 2 ^ 60 end
      local function c_fmod(k, x, y) return huge(k, y) and x == math.fmod(av[k], bv[k]) end
      local function c_remainder(k, x, y) return huge(k, y) and x == x end
      -- within 2 ulp of the terms' magnitude (a cancelling sum rounds its product where PyTorch's fma does not)
      local ulp = dt == "float32" and 2 ^ -23 or 2 ^ -52
      local function near(terms)
        return function(k, x, y) return math.abs(x - y) <= 2 * ulp * terms(av[k], bv[k]) end
      end
      local lerp_terms = near(function(u, v) return math.abs(u) + math.abs(v) end)
      case("atan2" .. dt, ddp.atan2(a, b), "torch.atan2(" .. A .. ", " .. B .. ")", t32)
      case("hypot" .. dt, ddp.hypot(a, b), "torch.hypot(" .. A .. ", " .. B .. ")", t32)
      case("logaddexp" .. dt, ddp.logaddexp(a, b), "torch.logaddexp(" .. A .. ", " .. B .. ")", t32)
      case("logaddexp2" .. dt, ddp.logaddexp2(a, b), "torch.logaddexp2(" .. A .. ", " .. B .. ")", t32)
      case("xlogy" .. dt, ddp.xlogy(a, b), "torch.xlogy(" .. A .. ", " .. B .. ")", t32)
      case("fmod" .. dt, ddp.fmod(a, b), "torch.fmod(" .. A .. ", " .. B .. ")", exact, { alt = c_fmod })
      case("remainder" .. dt, ddp.remainder(a, b), "torch.remainder(" .. A .. ", " .. B .. ")", exact,
        { alt = c_remainder })
      case("floor_divide" .. dt, ddp.floor_divide(a, b), "torch.floor_divide(" .. A .. ", " .. B .. ")", exact,
        { alt = c_remainder })
      case("heaviside" .. dt, ddp.heaviside(a, b), "torch.heaviside(" .. A .. ", " .. B .. ")", exact)
      -- lerp: float32 emulates PyTorch's fused multiply-add in float64, bit for bit; float64 rounds twice
      local lerp_tol, lerp_alt = dt == "float32" and exact or fma, dt == "float64" and { alt = lerp_terms } or nil
      case("lerp_s" .. dt, ddp.lerp(a, b, 0.3), "torch.lerp(" .. A .. ", " .. B .. ", 0.3)", lerp_tol, lerp_alt)
      case("lerp_b" .. dt, ddp.lerp(a, b, 0.75), "torch.lerp(" .. A .. ", " .. B .. ", 0.75)", lerp_tol, lerp_alt)
      case("lerp_t" .. dt, ddp.lerp(a, b, b:clamp(-1, 1)),
        "torch.lerp(" .. A .. ", " .. B .. ", " .. B .. ".clamp(-1, 1))", lerp_tol, lerp_alt)
      case("addcmul" .. dt, ddp.addcmul(b, a, b, { value = 0.5 }), "torch.addcmul(" .. B .. ", " .. A .. ", " .. B ..
        ", value=0.5)", fma, { alt = near(function(u, v) return math.abs(v) + math.abs(0.5 * u * v) end) })
      case("addcdiv" .. dt, ddp.addcdiv(b, a, b, -2), "torch.addcdiv(" .. B .. ", " .. A .. ", " .. B ..
        ", value=-2)", fma, { alt = near(function(u, v) return math.abs(v) + math.abs(2 * u / v) end) })
      case("rsub" .. dt, ddp.rsub(a, b, 2), "torch.rsub(" .. A .. ", " .. B .. ", alpha=2)", exact)
      case("rsub_n" .. dt, a:rsub(0.1), "torch.rsub(" .. A .. ", 0.1)", exact)
      case("true_divide" .. dt, ddp.true_divide(a, b), "torch.true_divide(" .. A .. ", " .. B .. ")", exact)
      case("fmod_n" .. dt, b:fmod(2.5), "torch.fmod(" .. B .. ", 2.5)", exact)
      case("remainder_n" .. dt, b:remainder(-0.3), "torch.remainder(" .. B .. ", -0.3)", exact)
      case("floor_divide_n" .. dt, b:floor_divide(0.3), "torch.floor_divide(" .. B .. ", 0.3)", exact)
      case("remainder_first" .. dt, ddp.remainder(5.5, b), "torch.remainder(5.5, " .. B .. ")", exact)
      case("nan_to_num" .. dt, b:nan_to_num(), "torch.nan_to_num(" .. B .. ")", exact)
      case("nan_to_num_args" .. dt, b:nan_to_num({ nan = 1, posinf = 2, neginf = -3 }),
        "torch.nan_to_num(" .. B .. ", nan=1, posinf=2, neginf=-3)", exact)
      case("deg2rad" .. dt, b:deg2rad(), "torch.deg2rad(" .. B .. ")", exact)
      case("rad2deg" .. dt, b:rad2deg(), "torch.rad2deg(" .. B .. ")", exact)
      case("sgn" .. dt, b:sgn(), "torch.sgn(" .. B .. ")", exact)
      case("clip" .. dt, b:clip(-1, 2), "torch.clip(" .. B .. ", -1, 2)", exact)
      case("logit" .. dt, b:logit(), "torch.logit(" .. B .. ")", t32)
      case("logit_eps" .. dt, b:logit(0.1), "torch.logit(" .. B .. ", eps=0.1)", t32)
      case("frac" .. dt, b:frac(), "torch.frac(" .. B .. ")", exact)
    end
    -- integers and uint8, numbers, mixed dtypes
    local ia = ddp.tensor({ 7, -7, 7, -7, 0, 5, -9007199254740993, 4611686018427387903 })
    local ib = ddp.tensor({ 2, 2, -2, -2, 3, -1, 10, 3 })
    local u = ddp.tensor({ 0, 1, 200, 255 }):byte()
    I.ia, I.ib, I.u = ia, ib, u
    I.f = ddp.tensor({ 1.5, -2.5 }, { dtype = "float64" })
    I.h = ddp.tensor({ 1.5, -2.5 }, { dtype = "float32" })
    local exact = { 0, 0 }
    case("i_fmod", ia:fmod(ib), "torch.fmod(T['ia'], T['ib'])", exact)
    case("i_remainder", ia:remainder(ib), "torch.remainder(T['ia'], T['ib'])", exact)
    case("i_floor_divide", ia:floor_divide(ib), "torch.floor_divide(T['ia'], T['ib'])", exact)
    -- Python's operators: % and // on tensors, and with a number on either side
    case("i_op_mod", ia % ib, "T['ia'] % T['ib']", exact)
    case("i_op_idiv", ia // ib, "T['ia'] // T['ib']", exact)
    case("i_op_mod_n", 10 % ib, "10 % T['ib']", exact)
    case("i_op_idiv_f", ia // -2.5, "T['ia'] // -2.5", exact)
    case("f_op_mod", I.f % 0.75, "T['f'] % 0.75", exact)
    case("f_op_idiv", 7 // I.h, "7 // T['h']", exact)
    case("i_fmod_n", ia:fmod(3), "torch.fmod(T['ia'], 3)", exact)
    case("i_remainder_f", ia:remainder(2.5), "torch.remainder(T['ia'], 2.5)", exact)
    case("i_floor_divide_f", ia:floor_divide(-2.5), "torch.floor_divide(T['ia'], -2.5)", exact)
    case("u_remainder", u:remainder(7), "torch.remainder(T['u'], 7)", exact)
    case("u_floor_divide", u:floor_divide(u:clamp(1, 255)), "torch.floor_divide(T['u'], T['u'].clamp(1, 255))", exact)
    case("i_atan2", ia:atan2(ib), "torch.atan2(T['ia'], T['ib'])", { 2e-7, 4e-7 })
    case("i_xlogy", ib:xlogy(ib:abs()), "torch.xlogy(T['ib'], T['ib'].abs())", { 2e-7, 4e-7 })
    case("i_deg2rad", ib:deg2rad(), "torch.deg2rad(T['ib'])", exact)
    case("i_logit", ib:logit(), "torch.logit(T['ib'])", exact)
    case("i_addcmul", ia:addcmul(ib, ib, 3), "torch.addcmul(T['ia'], T['ib'], T['ib'], value=3)", exact)
    case("i_rsub", ib:rsub(5, 2), "torch.rsub(T['ib'], 5, alpha=2)", exact)
    case("i_rsub_f", ib:rsub(0.5), "torch.rsub(T['ib'], 0.5)", exact)
    case("i_nan_to_num", ib:nan_to_num(), "torch.nan_to_num(T['ib'])", exact)
    case("i_heaviside", ib:heaviside(ib), "torch.heaviside(T['ib'], T['ib'])", exact)
    case("i_sgn", ib:sgn(), "torch.sgn(T['ib'])", exact)
    case("i_clip", ib:clip(-3, 2), "torch.clip(T['ib'], -3, 2)", exact)
    case("i_true_divide", ia:true_divide(ib), "torch.true_divide(T['ia'], T['ib'])", exact)
    case("mixed_atan2", I.f:atan2(I.h), "torch.atan2(T['f'], T['h'])", { 1e-15, 1e-15 })
    case("mixed_hypot", I.h:hypot(ib:narrow(1, 1, 2)), "torch.hypot(T['h'], T['ib'][:2])", { 0, 0 })
    case("mixed_fmod", I.h:fmod(I.f), "torch.fmod(T['h'], T['f'])", { 0, 0 })
    case("mixed_remainder", ib:narrow(1, 1, 2):remainder(I.h), "torch.remainder(T['ib'][:2], T['h'])", { 0, 0 })
    case("mixed_logaddexp", I.h:logaddexp(I.f), "torch.logaddexp(T['h'], T['f'])", { 1e-15, 1e-15 })
    case("mixed_addcmul", ib:narrow(1, 1, 2):addcmul(I.h, I.f), "torch.addcmul(T['ib'][:2], T['h'], T['f'])", { 0, 0 })
    case("zero_dim", I.h:fmod(ddp.tensor(0.75, { dtype = "float64" })),
      "torch.fmod(T['h'], torch.tensor(0.75, dtype=torch.float64))", { 0, 0 })
    local ref = TR.run(table.concat(body, "\n") .. "\n", I)
    local fails = {}
    for _, c in ipairs(cases) do
      local ok, err = pcall(same, c.got, ref[c.key], c.tol[1], c.tol[2], c.key, c.opts)
      if not ok then fails[#fails + 1] = err end
    end
    assert(#fails == 0, table.concat(fails, "\n"))
  end)

  it("fmod, remainder and floor_divide are exact (C's fmod) for large quotients", function()
    local a = ddp.tensor({ 1e20, 7.3, -1e15 + 0.5, 123456789.123, 5e-324 * 7, 1.7e308, -1e300, 3e-300 },
      { dtype = "float64" })
    local b = ddp.tensor({ 3.0, 0.1, 0.7, 1e-3, 5e-324 * 2, 3e-310, 7.1, -1e-320 }, { dtype = "float64" })
    local want = {}
    for k, x in ipairs(a:totable()) do want[k] = math.fmod(x, b:totable()[k]) end
    R.assert_close(a:fmod(b), { shape = { 8 }, v = want }, 0, 0, "fmod")
    local a32, b32 = ddp.tensor({ 3e38, 1e10, -16777217, 0.1 }), ddp.tensor({ 7, 3, 0.3, 0.01 })
    local w32 = {}
    for k, x in ipairs(a32:totable()) do w32[k] = math.fmod(x, b32:totable()[k]) end
    R.assert_close(a32:fmod(b32):double(), { shape = { 4 }, v = w32 }, 0, 0, "float32 fmod")
  end)

  it("gradients match PyTorch (float32 and float64, broadcasting, transposed views)", function()
    if not TR.available() then return pending(NO_TORCH) end
    local function t12(t) return t:transpose(1, 2) end
    local function pos(shape, seed) return R.uniform(shape, 0.2, 3, seed) end
    local function unit(shape, seed) return R.uniform(shape, 0.05, 0.95, seed) end
    local n = TC.check_cases(TC.both_dtypes(function()
      local x, y = { "x", R.randn({ 3, 4 }, 1, 2), view = t12, grad = true }, { "y", R.randn({ 3 }, 2, 2), grad = true }
      return {
        { "atan2", inputs = { x, y }, lua = function(I) return ddp.atan2(I.x, I.y) end,
          py = "out = torch.atan2(I['x'], I['y'])" },
        { "atan2 reversed", inputs = { x, y }, lua = function(I) return I.y:atan2(I.x) end,
          py = "out = torch.atan2(I['y'], I['x'])" },
        { "hypot", inputs = { x, y }, lua = function(I) return ddp.hypot(I.x, I.y) end,
          py = "out = torch.hypot(I['x'], I['y'])" },
        { "logaddexp", inputs = { x, y }, lua = function(I) return ddp.logaddexp(I.x, I.y * 3) end,
          py = "out = torch.logaddexp(I['x'], I['y'] * 3)" },
        { "logaddexp2", inputs = { x, y }, lua = function(I) return I.x:logaddexp2(I.y) end,
          py = "out = torch.logaddexp2(I['x'], I['y'])" },
        { "xlogy", inputs = { x, { "y", pos({ 3 }, 3), grad = true } },
          lua = function(I) return ddp.xlogy(I.x, I.y) end, py = "out = torch.xlogy(I['x'], I['y'])" },
        { "lerp (tensor weight)", inputs = { x, { "e", R.randn({ 3, 4 }, 4), view = t12, grad = true },
          { "w", R.uniform({ 3 }, -1, 1.5, 5), grad = true } },
          lua = function(I) return I.x:lerp(I.e, I.w) end, py = "out = torch.lerp(I['x'], I['e'], I['w'])" },
        { "lerp (number weight)", inputs = { x, { "e", R.randn({ 4, 3 }, 6), grad = true } },
          lua = function(I) return ddp.lerp(I.x, I.e, 0.8) end, py = "out = torch.lerp(I['x'], I['e'], 0.8)" },
        { "addcmul", inputs = { x, y, { "z", R.randn({ 4, 1 }, 7), grad = true } },
          lua = function(I) return I.x:addcmul(I.y, I.z, 0.5) end,
          py = "out = torch.addcmul(I['x'], I['y'], I['z'], value=0.5)" },
        { "addcdiv", inputs = { x, y, { "z", pos({ 4, 1 }, 8), grad = true } },
          lua = function(I) return ddp.addcdiv(I.x, I.y, I.z, { value = -2 }) end,
          py = "out = torch.addcdiv(I['x'], I['y'], I['z'], value=-2)" },
        { "fmod", inputs = { { "x", R.randn({ 4, 3 }, 9, 5), grad = true }, { "y", pos({ 3 }, 10), grad = true } },
          lua = function(I) return I.x:fmod(I.y) end, py = "out = torch.fmod(I['x'], I['y'])" },
        { "remainder",
          inputs = { { "x", R.randn({ 4, 3 }, 11, 5), grad = true }, { "y", pos({ 3 }, 12), grad = true } },
          lua = function(I) return ddp.remainder(I.x, -I.y) end, py = "out = torch.remainder(I['x'], -I['y'])" },
        { "rsub", inputs = { x, y }, lua = function(I) return I.x:rsub(I.y, 3) end,
          py = "out = torch.rsub(I['x'], I['y'], alpha=3)" },
        { "true_divide", inputs = { x, { "y", pos({ 3 }, 13), grad = true } },
          lua = function(I) return I.x:true_divide(I.y) end, py = "out = torch.true_divide(I['x'], I['y'])" },
        { "nan_to_num", inputs = { x }, lua = function(I) return (I.x / 0.5):nan_to_num() end,
          py = "out = torch.nan_to_num(I['x'] / 0.5)" },
        { "deg2rad, rad2deg", inputs = { x }, lua = function(I) return I.x:deg2rad() + I.x:rad2deg() end,
          py = "out = torch.deg2rad(I['x']) + torch.rad2deg(I['x'])" },
        { "clip", inputs = { x }, lua = function(I) return I.x:clip(-0.5, 0.5) end,
          py = "out = torch.clip(I['x'], -0.5, 0.5)" },
        { "logit", inputs = { { "x", unit({ 4, 3 }, 14), grad = true } }, lua = function(I) return I.x:logit() end,
          py = "out = torch.logit(I['x'])" },
        { "logit(eps)", inputs = { { "x", R.uniform({ 4, 3 }, -0.1, 1.1, 15), grad = true } },
          lua = function(I) return I.x:logit(0.2) end, py = "out = torch.logit(I['x'], eps=0.2)" },
        { "frac", inputs = { { "x", R.randn({ 4, 3 }, 16, 4), grad = true } }, lua = function(I) return I.x:frac() end,
          py = "out = torch.frac(I['x'])" },
      }
    end))
    assert.are.equal(40, n)
  end)

  it("gradients at the edges as PyTorch's (xlogy at 0, logit at 0 and 1, hypot at 0)", function()
    if not TR.available() then return pending(NO_TORCH) end
    -- (xlogy at x == 0 with y 0 or NaN: a deliberate difference, the header of tensor_math.lua)
    local I = { x = ddp.tensor({ 0.0, 0.0, 3.0, 1.0, 2.0, 0.0 }, { dtype = "float64" }),
      y = ddp.tensor({ 4.0, -1.0, 2.0, nan, 0.0, 1.0 }, { dtype = "float64" }),
      p = ddp.tensor({ 0.0, 1.0, 0.5, -1.0, 2.0 }, { dtype = "float64" }) }
    local x, y, p = I.x:clone():requires_grad_(), I.y:clone():requires_grad_(), I.p:clone():requires_grad_()
    ddp.xlogy(x, y):sum():backward()
    local gx, gy = x.grad, y.grad
    x, y = I.x:clone():requires_grad_(), I.y:clone():requires_grad_()
    ddp.hypot(x, y):sum():backward()
    local hx, hy = x.grad, y.grad
    p:logit():sum():backward()
    local ref = TR.run([[
x, y, p = T['x'].clone().requires_grad_(), T['y'].clone().requires_grad_(), T['p'].clone().requires_grad_()
torch.xlogy(x, y).sum().backward()
OUT['gx'], OUT['gy'] = x.grad, y.grad
x, y = T['x'].clone().requires_grad_(), T['y'].clone().requires_grad_()
torch.hypot(x, y).sum().backward()
OUT['hx'], OUT['hy'] = x.grad, y.grad
torch.logit(p).sum().backward()
OUT['gp'] = p.grad
]], I)
    same(gx, ref.gx, 0, 1e-15, "xlogy d/dx")
    same(gy, ref.gy, 0, 1e-15, "xlogy d/dy", { nosign = true })
    same(hx, ref.hx, 0, 1e-15, "hypot d/dx")
    same(hy, ref.hy, 0, 1e-15, "hypot d/dy")
    same(p.grad, ref.gp, 0, 1e-15, "logit d/dx")
  end)

  it("gradients by finite differences", function()
    local a = R.randn({ 3, 4 }, 21, 2):requires_grad_()
    local b = R.uniform({ 4 }, 0.3, 2, 22):requires_grad_()
    gc.assert_gradcheck(function(u, v) return ddp.atan2(u, v) end, { a, b })
    gc.assert_gradcheck(function(u, v) return ddp.atan2(v:view({ 4, 1 }), u:t()) end, { a, b })
    gc.assert_gradcheck(function(u, v) return ddp.hypot(u, v) end, { a, b })
    gc.assert_gradcheck(function(u, v) return ddp.logaddexp(u, v) end, { a, b })
    gc.assert_gradcheck(function(u, v) return ddp.xlogy(u, v) end, { a, b })
    gc.assert_gradcheck(function(u, v) return u:fmod(v) end, { a, b })
    gc.assert_gradcheck(function(u, v) return u:remainder(v) end, { a, b })
    gc.assert_gradcheck(function(u, v) return u:lerp(v:expand({ 3, 4 }), v) end, { a, b })
    gc.assert_gradcheck(function(v) return (v * 0.3):logit() end, { b })
  end)

  it("empty tensors keep their shapes", function()
    local e = ddp.zeros({ 0, 3 })
    for _, name in ipairs({ "atan2", "hypot", "logaddexp", "logaddexp2", "xlogy", "fmod", "remainder", "floor_divide",
      "true_divide", "rsub", "heaviside" }) do
      assert.are.same({ 0, 3 }, ddp[name](e, e):size(), name)
    end
    assert.are.same({ 0, 3 }, e:clip(0, 1):size())
    for _, name in ipairs({ "nan_to_num", "deg2rad", "rad2deg", "sgn", "logit", "frac" }) do
      assert.are.same({ 0, 3 }, ddp[name](e):size(), name)
    end
    assert.are.same({ 0, 3 }, e:lerp(e, 0.5):size())
    assert.are.same({ 0, 3 }, e:addcmul(e, e):size())
    assert.are.same({ 0, 3 }, e:addcdiv(e, e, 2):size())
    local ei = ddp.zeros({ 0, 3 }, { dtype = "int64" })
    assert.are.same({ 0, 3 }, ei:fmod(ddp.ones({ 3 }, { dtype = "int64" })):size())
  end)

  it("methods are the ddp functions", function()
    for _, name in ipairs({ "atan2", "hypot", "logaddexp", "logaddexp2", "xlogy", "lerp", "addcmul", "addcdiv", "clip",
      "nan_to_num", "deg2rad", "rad2deg", "heaviside", "sgn", "true_divide", "rsub", "floor_divide", "fmod",
      "remainder", "logit", "frac" }) do
      assert.are.equal(ddp.Tensor[name], ddp[name], name)
    end
  end)

  it("refuses bad arguments with the function's name", function()
    local f, i = ddp.tensor({ 1.0, 2.0 }), ddp.tensor({ 1, 2 })
    R.assert_error(function() return ddp.atan2("y", f) end, "atan2", "expected a tensor")
    R.assert_error(function() return ddp.atan2(f, {}) end, "atan2", "tensor or a number")
    R.assert_error(function() return ddp.hypot(i, i) end, "hypot", "floating-point", "int64")
    R.assert_error(function() return ddp.logaddexp(i, i) end, "logaddexp", "floating-point")
    R.assert_error(function() return ddp.logaddexp2(i, 1) end, "logaddexp2", "floating-point")
    R.assert_error(function() return ddp.lerp(i, i, 0.5) end, "lerp", "floating-point")
    R.assert_error(function() return ddp.lerp(f, f:double(), 0.5) end, "lerp", "float32", "end", "float64")
    R.assert_error(function() return ddp.lerp(f, f, f:double()) end, "lerp", "weight", "float64")
    R.assert_error(function() return ddp.lerp(f, f, "w") end, "lerp", "weight")
    R.assert_error(function() return ddp.addcmul(f, f, 2) end, "addcmul", "tensor2")
    R.assert_error(function() return ddp.addcmul(f, f, f, "v") end, "addcmul", "value", "number")
    R.assert_error(function() return ddp.addcdiv(f, i, i) end, "addcdiv", "integer division")
    R.assert_error(function() return ddp.nan_to_num(f, "x") end, "nan_to_num", "nan", "number")
    R.assert_error(function() return ddp.heaviside(f, f:double()) end, "heaviside", "one dtype")
    R.assert_error(function() return ddp.rsub(i, 2, 0.5) end, "rsub", "alpha", "integer")
    R.assert_error(function() return ddp.fmod(i, ddp.tensor({ 1, 0 })) end, "fmod", "division by zero")
    R.assert_error(function() return ddp.remainder(i, 0) end, "remainder", "division by zero")
    R.assert_error(function() return ddp.floor_divide(i, 0) end, "floor_divide", "division by zero")
    R.assert_error(function() return ddp.logit(f, "e") end, "logit", "eps", "number")
    R.assert_error(function() return ddp.frac(i) end, "frac", "floating-point")
    R.assert_error(function() return ddp.sgn(3) end, "sgn", "expected a tensor")
  end)

  it("heaviside and floor_divide give no gradient; integer division by a float divides in float32", function()
    local x = ddp.tensor({ 1.5, -2.5 }):requires_grad_()
    assert.is_false(x:heaviside(ddp.tensor({ 0.5 })).requires_grad)
    assert.is_false(x:floor_divide(2).requires_grad)
    assert.are.equal("float32", ddp.tensor({ 5 }):floor_divide(2.0):dtype())
  end)
end)
