-- The activations of the op table, each as a function (ddp.op(x,
-- params...)), a method, nn.F.op and an nn module: forward
-- against plain-Lua float64 references (float64 and float32, contiguous and
-- transposed), gradients against finite differences and float32 against
-- float64, both against PyTorch (/usr/bin/python3 with torch) on values
-- that include 0, NaN, +-inf and large magnitudes, empty tensors, and bad
-- arguments.
local ddp = require "ddplua"
local gc = require "helpers.gradcheck"
local R = require "helpers.ref"
local nn = ddp.nn

local TR = require "helpers.torch_ref"
local has_torch = TR.available()

local function tanh(v) -- (Lua 5.4 has none)
  local e = math.exp(-2 * math.abs(v))
  local t = (1 - e) / (1 + e)
  return v < 0 and -t or t
end
local function sigmoid(v) return 1 / (1 + math.exp(-v)) end
local ONE_SIXTH_F32 = string.unpack("<f", string.pack("<f", 1 / 6)) -- PyTorch's hardsigmoid gradient, float64 too
local SELU_ALPHA, SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
local GELU_K = math.sqrt(2 / math.pi)

-- op, nn class, the Lua reference y(x, params) and dy/dx(x, params), the
-- PyTorch function (params by keyword), default and non-default params.
-- Optional: ints ("keep": int64 stays int64 for whole parameters; "float":
-- float32; else refused), required (PyTorch has no defaults: the nn forms
-- refuse a missing one), fixed (the op's arguments, for a module that fixes
-- them: ReLU6 is hardtanh(x, 0, 6)), F (the nn.F form, default nn.F.op),
-- module_args (the module's settings, default the params), no_inplace (the
-- module has no inplace setting), bad_module (a bad setting and pieces of
-- its error, for modules without parameters)
local cases = {
  {
    op = "leaky_relu",
    module = "LeakyReLU",
    params = { "negative_slope" },
    defaults = { 0.01 },
    custom = { 0.2 },
    ref = function(x, s) return x > 0 and x or x * s end,
    dref = function(x, s) return x > 0 and 1 or s end,
    torch = "torch.nn.functional.leaky_relu(x, negative_slope=%s)",
    repr = "LeakyReLU(negative_slope=0.01)",
  },
  {
    op = "elu",
    module = "ELU",
    params = { "alpha" },
    defaults = { 1 },
    custom = { 0.5 },
    ref = function(x, a) return x > 0 and x or a * (math.exp(x) - 1) end,
    dref = function(x, a) return x > 0 and 1 or a * math.exp(x) end,
    torch = "torch.nn.functional.elu(x, alpha=%s)",
    repr = "ELU(alpha=1)",
  },
  {
    op = "silu",
    module = "SiLU",
    params = {},
    defaults = {},
    custom = {},
    ref = function(x) return x / (1 + math.exp(-x)) end,
    dref = function(x)
      local s = 1 / (1 + math.exp(-x))
      return s * (1 + x * (1 - s))
    end,
    torch = "torch.nn.functional.silu(x)",
    repr = "SiLU()",
  },
  {
    op = "softplus",
    module = "Softplus",
    params = { "beta", "threshold" },
    defaults = { 1, 20 },
    custom = { 2, 3 }, -- beta * x > 3 (x > 1.5) is the linear regime
    ref = function(x, b, t) return b * x > t and x or math.log(1 + math.exp(b * x)) / b end,
    dref = function(x, b, t)
      if b * x > t then return 1 end
      local z = math.exp(b * x)
      return z / (z + 1)
    end,
    torch = "torch.nn.functional.softplus(x, beta=%s, threshold=%s)",
    repr = "Softplus(beta=1, threshold=20)",
  },
  {
    op = "hardtanh",
    module = "Hardtanh",
    params = { "min_val", "max_val" },
    defaults = { -1, 1 },
    custom = { -0.5, 0.75 },
    ints = "keep",
    ref = function(x, lo, hi) return math.min(math.max(x, lo), hi) end,
    dref = function(x, lo, hi) return (x > lo and x < hi) and 1 or 0 end, -- 0 at the bounds (clamp: 1)
    torch = "torch.nn.functional.hardtanh(x, min_val=%s, max_val=%s)",
    repr = "Hardtanh(min_val=-1, max_val=1)",
  },
  {
    op = "hardtanh",
    module = "ReLU6",
    params = {},
    defaults = {},
    custom = {},
    fixed = { 0, 6 },
    ints = "keep",
    F = function(x) return nn.F.relu6(x) end,
    ref = function(x) return math.min(math.max(x, 0), 6) end,
    dref = function(x) return (x > 0 and x < 6) and 1 or 0 end,
    torch = "torch.nn.functional.relu6(x)",
    repr = "ReLU6()",
  },
  {
    op = "hardsigmoid",
    module = "Hardsigmoid",
    params = {},
    defaults = {},
    custom = {},
    ref = function(x) return math.min(math.max(x + 3, 0), 6) / 6 end,
    dref = function(x) return (x > -3 and x < 3) and ONE_SIXTH_F32 or 0 end,
    torch = "torch.nn.functional.hardsigmoid(x)",
    repr = "Hardsigmoid()",
  },
  {
    op = "hardswish",
    module = "Hardswish",
    params = {},
    defaults = {},
    custom = {},
    ref = function(x) return x * math.min(math.max(x + 3, 0), 6) / 6 end,
    dref = function(x)
      if x < -3 then return 0 end
      return x >= 3 and 1 or x / 3 + 0.5
    end,
    torch = "torch.nn.functional.hardswish(x)",
    repr = "Hardswish()",
  },
  {
    op = "mish",
    module = "Mish",
    params = {},
    defaults = {},
    custom = {},
    ref = function(x) return x * tanh(math.log(1 + math.exp(x))) end,
    dref = function(x)
      local t = tanh(math.log(1 + math.exp(x)))
      return t + x * sigmoid(x) * (1 - t * t)
    end,
    torch = "torch.nn.functional.mish(x)",
    repr = "Mish()",
  },
  {
    op = "selu",
    module = "SELU",
    params = {},
    defaults = {},
    custom = {},
    ref = function(x) return x > 0 and SELU_SCALE * x or SELU_SCALE * SELU_ALPHA * (math.exp(x) - 1) end,
    dref = function(x) return x > 0 and SELU_SCALE or SELU_SCALE * SELU_ALPHA * math.exp(x) end,
    torch = "torch.nn.functional.selu(x)",
    repr = "SELU()",
  },
  {
    op = "celu",
    module = "CELU",
    params = { "alpha" },
    defaults = { 1 },
    custom = { 2 },
    ref = function(x, a) return x > 0 and x or a * (math.exp(x / a) - 1) end,
    dref = function(x, a) return x > 0 and 1 or math.exp(x / a) end,
    torch = "torch.nn.functional.celu(x, alpha=%s)",
    repr = "CELU(alpha=1)",
  },
  {
    op = "logsigmoid",
    module = "LogSigmoid",
    params = {},
    defaults = {},
    custom = {},
    ref = function(x) return math.min(x, 0) - math.log(1 + math.exp(-math.abs(x))) end,
    dref = function(x) return 1 - sigmoid(x) end,
    torch = "torch.nn.functional.logsigmoid(x)",
    repr = "LogSigmoid()",
  },
  {
    op = "softsign",
    module = "Softsign",
    params = {},
    defaults = {},
    custom = {},
    ints = "float",
    ref = function(x) return x / (1 + math.abs(x)) end,
    dref = function(x) return 1 / (1 + math.abs(x)) ^ 2 end,
    torch = "torch.nn.functional.softsign(x)",
    repr = "Softsign()",
  },
  {
    op = "tanhshrink",
    module = "Tanhshrink",
    params = {},
    defaults = {},
    custom = {},
    ints = "float",
    ref = function(x) return x - tanh(x) end,
    dref = function(x) return tanh(x) ^ 2 end,
    torch = "torch.nn.functional.tanhshrink(x)",
    repr = "Tanhshrink()",
  },
  {
    op = "softshrink",
    module = "Softshrink",
    params = { "lambd" },
    defaults = { 0.5 },
    custom = { 0.3 },
    ref = function(x, l) return x > l and x - l or x < -l and x + l or 0 end,
    dref = function(x, l) return math.abs(x) > l and 1 or 0 end,
    torch = "torch.nn.functional.softshrink(x, lambd=%s)",
    repr = "Softshrink(0.5)",
  },
  {
    op = "hardshrink",
    module = "Hardshrink",
    params = { "lambd" },
    defaults = { 0.5 },
    custom = { 0.3 },
    ref = function(x, l) return math.abs(x) > l and x or 0 end,
    dref = function(x, l) return math.abs(x) > l and 1 or 0 end,
    torch = "torch.nn.functional.hardshrink(x, lambd=%s)",
    repr = "Hardshrink(0.5)",
  },
  {
    op = "threshold",
    module = "Threshold",
    params = { "threshold", "value" },
    defaults = {},
    custom = { 0.3, -2 },
    required = true,
    ints = "keep",
    ref = function(x, t, v) return x <= t and v or x end,
    dref = function(x, t) return x <= t and 0 or 1 end,
    torch = "torch.nn.functional.threshold(x, threshold=%s, value=%s)",
    repr = "Threshold(threshold=0.3, value=-2)", -- of the custom parameters
  },
  {
    op = "gelu_tanh",
    module = "GELU",
    params = {},
    defaults = {},
    custom = {},
    F = function(x) return nn.F.gelu(x, "tanh") end,
    module_args = { "tanh" },
    no_inplace = true,
    bad_module = { "sigmoid", 'GELU: approximate must be "none" or "tanh", got "sigmoid"' },
    ref = function(x) return 0.5 * x * (1 + tanh(GELU_K * (x + 0.044715 * x ^ 3))) end,
    dref = function(x)
      local t = tanh(GELU_K * (x + 0.044715 * x ^ 3))
      return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * GELU_K * (1 + 3 * 0.044715 * x * x)
    end,
    torch = "torch.nn.functional.gelu(x, approximate='tanh')",
    repr = "GELU(approximate='tanh')",
  },
}

local function values(t) return gc.flat_values(t) end

-- inputs away from the kinks (|x| >= 0.1)
local function smooth(shape, seed) return gc.smooth_input(shape, seed):detach() end

-- the function form: ddp.op (ddp.core.op until lua/ddplua/init.lua exports the op)
local function fn(case) return ddp[case.op] or ddp.core[case.op] end
-- the op's arguments for the params p: p, or the fixed ones
local function op_args(case, p)
  if case.fixed then return case.fixed, #case.fixed end
  return p, #case.params
end
local function call(case, x, p)
  local a, n = op_args(case, p)
  return fn(case)(x, table.unpack(a, 1, n))
end
local function method(case, x, p)
  local a, n = op_args(case, p)
  return x[case.op](x, table.unpack(a, 1, n))
end
local function functional(case, x, p)
  return (case.F or nn.F[case.op])(x, table.unpack(p, 1, #case.params))
end
-- the module's settings for the params p, positionally and by name
local function module_args(case, p) return case.module_args or p end
local function named_args(case, p)
  local named = {}
  if case.module_args then named.approximate = case.module_args[1] end
  for i, name in ipairs(case.params) do named[name] = p[i] end
  return named
end
local function module(case, p)
  local a = module_args(case, p)
  return nn[case.module](table.unpack(a, 1, case.module_args and #a or #case.params))
end

for _, case in ipairs(cases) do
  describe(case.op .. " (" .. case.module .. ")", function()
    local p = case.custom

    it("matches the float64 reference in float64 and float32, contiguous and transposed", function()
      local x = smooth({ 3, 4 }, 31)
      local ref = R.map(R.from(x), function(v) return case.ref(v, table.unpack(p)) end)
      R.check_forward(function(a) return call(case, a, p) end, { x }, ref)
      local xt = smooth({ 4, 3 }, 32)
      local reft = R.map(R.from(xt:t()), function(v) return case.ref(v, table.unpack(p)) end)
      R.check_forward(function(a) return call(case, a:t(), p) end, { xt }, reft)
      -- the defaults, through the method form
      if not case.required then
        local refd = R.map(R.from(x), function(v) return case.ref(v, table.unpack(case.defaults)) end)
        R.check_forward(function(a) return method(case, a, {}) end, { x }, refd)
      end
    end)

    it("has the finite-difference gradient, also through strided and broadcast views", function()
      gc.assert_gradcheck(function(a) return call(case, a, p) end, { gc.smooth_input({ 3, 4 }, 33) })
      gc.assert_gradcheck(function(a) return call(case, a:t(), p) end, { gc.smooth_input({ 4, 3 }, 34) })
      gc.assert_gradcheck(function(a) return call(case, a:expand(3, 4), p) end, { gc.smooth_input({ 4 }, 35) })
      gc.assert_gradcheck(function(a) return method(case, a, case.required and p or {}) end,
        { gc.smooth_input({ 5 }, 36) })
    end)

    it("has the reference gradient in float32 and float64", function()
      local x64 = smooth({ 2, 5 }, 37)
      for _, dt in ipairs({ "float64", "float32" }) do
        local x = x64:to(dt):detach():requires_grad_()
        local gy = ddp.full({ 2, 5 }, 0.5, { dtype = dt })
        call(case, x, p):backward(gy)
        local ref = R.map(R.from(x64), function(v) return 0.5 * case.dref(v, table.unpack(p)) end)
        local tol = dt == "float64" and R.TOL64 or R.TOL32
        R.assert_close(x.grad, ref, tol[1], tol[2], dt .. " gradient")
      end
    end)

    it("is the same as a function, a method, nn.F and a module", function()
      local x = smooth({ 6 }, 38)
      local y = call(case, x, p)
      assert.are.same(values(y), values(method(case, x, p)))
      assert.are.same(values(y), values(functional(case, x, p)))
      local m = module(case, p)
      assert.are.same(values(y), values(m(x)))
      assert.are.same(values(y), values(nn[case.module](named_args(case, p))(x)))
      if case.required then -- no defaults: the printed form of the custom parameters
        assert.are.equal(case.repr, tostring(m))
        return
      end
      -- PyTorch's defaults, stored on the module and printed
      local d = module(case, case.defaults)
      for i, name in ipairs(case.params) do assert.are.equal(case.defaults[i], d[name]) end
      assert.are.equal(case.repr, tostring(d))
      assert.are.same(values(call(case, x, case.defaults)), values(d(x)))
    end)

    it("takes empty tensors", function()
      for _, shape in ipairs({ { 0 }, { 2, 0, 3 } }) do
        local x = ddp.zeros(shape, { dtype = "float64" }):requires_grad_()
        local y = call(case, x, p)
        assert.are.same(shape, y:size())
        y:sum():backward()
        assert.are.same(shape, x.grad:size())
      end
    end)

    it("matches PyTorch in float64 and float32 at 0, NaN, +-inf and large magnitudes", function()
      if not has_torch then
        pending("skipped: /usr/bin/python3 cannot import torch (apt-get install python3-torch)")
        return
      end
      local xs = { 0, -0.0, 1e-8, -1e-8, 0.5, -0.5, 3, -3, 25, -25, 90, -90, 1e30, -1e30, 0 / 0, math.huge, -math.huge }
      local gys = {}
      for i = 1, #xs do gys[i] = (i % 3) - 1.25 end
      local function lit(v)
        if v ~= v then return "float('nan')" end
        if v == math.huge then return "float('inf')" end
        if v == -math.huge then return "float('-inf')" end
        return string.format("%.17g", v)
      end
      local pargs = {}
      for i = 1, #p do pargs[i] = lit(p[i]) end
      local expr = string.format(case.torch, table.unpack(pargs))
      -- the shared PyTorch process (tests/helpers/torch_ref.lua): one python per spec run, not one per op
      local ref = TR.run(table.concat({
        "for dt in (torch.float64, torch.float32):",
        "    x = T['x'].detach().to(dt).clone().requires_grad_()",
        "    y = " .. expr,
        "    y.backward(T['gy'].to(dt))",
        "    OUT['y' + str(dt)[-2:]], OUT['g' + str(dt)[-2:]] = y, x.grad",
      }, "\n") .. "\n", { x = ddp.tensor(xs, { dtype = "float64" }), gy = ddp.tensor(gys, { dtype = "float64" }) })
      local rows = { R.from(ref.y64).v, R.from(ref.g64).v, R.from(ref.y32).v, R.from(ref.g32).v }
      for k, dt in ipairs({ "float64", "float32" }) do
        local x = ddp.tensor(xs, { dtype = dt }):requires_grad_()
        local y = functional(case, x, p)
        y:backward(ddp.tensor(gys, { dtype = dt }))
        -- float32: PyTorch computes elu's exp(x) - 1 without expm1 (0 at x = -1e-8, where the float64
        -- reference gives -5e-9): an absolute slack of 1e-7 there, the relative one everywhere
        local tol = dt == "float64" and { 1e-15, 1e-12 } or { 1e-7, 2e-6 }
        R.assert_close(y, { shape = { #xs }, v = rows[2 * k - 1] }, tol[1], tol[2], dt .. " forward vs PyTorch")
        R.assert_close(x.grad, { shape = { #xs }, v = rows[2 * k] }, tol[1], tol[2], dt .. " gradient vs PyTorch")
      end
    end)

    it("rejects bad arguments with errors naming them", function()
      local x = ddp.randn(3)
      if #case.params > 0 then
        R.assert_error(function() fn(case)(x, "a") end, case.op .. ": " .. case.params[1], "must be a number",
          "string")
        R.assert_error(function() nn[case.module]("a") end, case.module, case.params[1], "must be a number")
      elseif case.bad_module then
        R.assert_error(function() nn[case.module](case.bad_module[1]) end, table.unpack(case.bad_module, 2))
      else
        R.assert_error(function() nn[case.module]("a") end, case.module, "inplace must be a boolean")
      end
      local ints = ddp.tensor({ -7, 0, 2 }, { dtype = "int64" })
      local a, n = op_args(case, p)
      if case.ints == "keep" then -- exact int64, as PyTorch, for whole parameters
        local whole = {}
        for i = 1, n do whole[i] = math.floor(a[i]) end
        local y = fn(case)(ints, table.unpack(whole, 1, n))
        assert.are.equal("int64", y:dtype())
        local want = {}
        for i, v in ipairs(ints:totable()) do want[i] = math.tointeger(case.ref(v, table.unpack(whole, 1, n))) end
        assert.are.same(want, y:totable())
      elseif case.ints == "float" then -- float32, as PyTorch's composite ops give
        assert.are.equal("float32", fn(case)(ints):dtype())
      else
        R.assert_error(function() fn(case)(ints) end, case.op, "expected a floating point tensor, got int64")
      end
      local too_many = { table.unpack(a, 1, n) }
      too_many[n + 1] = 1
      R.assert_error(function() fn(case)(x, table.unpack(too_many, 1, n + 1)) end, case.op, "at most")
      R.assert_error(function() fn(case)("x") end, "Tensor expected, got string")
      R.assert_error(function() nn[case.module] { slope = 1 } end, case.module, "unknown option 'slope'")
      if case.required then -- PyTorch's Threshold(threshold, value) and F.threshold(x, threshold, value)
        R.assert_error(function() nn[case.module]() end, case.module, case.params[1], "is required")
        R.assert_error(function() nn[case.module](p[1]) end, case.module, case.params[2], "is required")
        R.assert_error(function() functional(case, x, {}) end, case.op, case.params[1], "is required")
        R.assert_error(function() functional(case, x, { p[1] }) end, case.op, case.params[2], "is required")
      end
      if case.no_inplace then return end
      -- PyTorch's inplace=true is accepted (computed out of place: the same values)
      local named = named_args(case, p)
      local want = nn[case.module](named)(x):totable()
      named.inplace = true
      assert.are.same(want, nn[case.module](named)(x):totable())
    end)
  end)
end

-- clamp is an op-table op with two parameters (min, max: nil for none)
describe("clamp", function()
  it("follows PyTorch: ties pass the gradient, min > max gives max, NaN stays NaN", function()
    local x = ddp.tensor({ -2, -0.5, 0, 0.5, 2, 0 / 0, math.huge, -math.huge }, { dtype = "float64" })
    x:requires_grad_()
    local y = x:clamp(-0.5, 0.5)
    local v = values(y)
    assert.are.same({ -0.5, -0.5, 0, 0.5, 0.5 }, { v[1], v[2], v[3], v[4], v[5] })
    assert.is_true(v[6] ~= v[6])
    assert.are.same({ 0.5, -0.5 }, { v[7], v[8] })
    y:sum():backward()
    local g = values(x.grad)
    -- torch.clamp's gradient: 1 where min <= x <= max (the ties included), else 0 (NaN: 0)
    assert.are.same({ 0, 1, 1, 1, 0, 0, 0, 0 }, g)
    assert.are.same({ 1, 1, 1 }, values(ddp.clamp(ddp.tensor({ -5.0, 0.0, 5.0 }), 2, 1)))
    assert.are.same({ 0, 0, 3 }, values(ddp.tensor({ -1.0, 0.0, 3.0 }):clamp(0)))
    assert.are.same({ -1, 0, 1 }, values(ddp.tensor({ -1.0, 0.0, 3.0 }):clamp(nil, 1)))
  end)

  it("keeps int64 exact for whole bounds and gives float32 for fractional ones", function()
    local big = (1 << 60) + 1
    local t = ddp.tensor({ -big, 3, big }, { dtype = "int64" })
    local c = t:clamp(-5, big - 1)
    assert.are.equal("int64", c:dtype())
    assert.are.same({ -5, 3, big - 1 }, c:totable())
    assert.are.equal("float32", t:clamp(0.5):dtype())
  end)

  it("has the finite-difference gradient away from the bounds", function()
    gc.assert_gradcheck(function(a) return a:clamp(-0.45, 0.75) end, { gc.smooth_input({ 4, 3 }, 41) })
    gc.assert_gradcheck(function(a) return a:t():clamp(-0.3) end, { gc.smooth_input({ 3, 4 }, 42) })
  end)

  it("rejects a bound that is not a number", function()
    R.assert_error(function() ddp.randn(3):clamp("a") end, "clamp: min (argument 2) must be a number, got string")
    R.assert_error(function() ddp.randn(3):clamp(0, {}) end, "clamp: max (argument 3) must be a number, got table")
  end)
end)
