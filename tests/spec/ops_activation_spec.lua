-- The parameterised activations of the op table, each as a function
-- (ddp.op(x, params...)), a method, nn.F.op and an nn module: forward
-- against plain-Lua float64 references (float64 and float32, contiguous and
-- transposed), gradients against finite differences and float32 against
-- float64, both against PyTorch (/usr/bin/python3 with torch) on values
-- that include 0, NaN, +-inf and large magnitudes, empty tensors, and bad
-- arguments.
local ddp = require "ddplua"
local gc = require "helpers.gradcheck"
local R = require "helpers.ref"
local nn = ddp.nn

local has_torch = os.execute("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1")

-- op, nn class, the Lua reference y(x, params) and dy/dx(x, params), the
-- PyTorch function (params by keyword), default and non-default params
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
}

local function values(t) return gc.flat_values(t) end

-- inputs away from the kinks (|x| >= 0.1)
local function smooth(shape, seed) return gc.smooth_input(shape, seed):detach() end

local function call(case, x, p) return ddp[case.op](x, table.unpack(p, 1, #case.params)) end

for _, case in ipairs(cases) do
  describe(case.op, function()
    local p = case.custom

    it("matches the float64 reference in float64 and float32, contiguous and transposed", function()
      local x = smooth({ 3, 4 }, 31)
      local ref = R.map(R.from(x), function(v) return case.ref(v, table.unpack(p)) end)
      R.check_forward(function(a) return call(case, a, p) end, { x }, ref)
      local xt = smooth({ 4, 3 }, 32)
      local reft = R.map(R.from(xt:t()), function(v) return case.ref(v, table.unpack(p)) end)
      R.check_forward(function(a) return call(case, a:t(), p) end, { xt }, reft)
      -- the defaults, through the method form
      local refd = R.map(R.from(x), function(v) return case.ref(v, table.unpack(case.defaults)) end)
      R.check_forward(function(a) return a[case.op](a) end, { x }, refd)
    end)

    it("has the finite-difference gradient, also through strided and broadcast views", function()
      gc.assert_gradcheck(function(a) return call(case, a, p) end, { gc.smooth_input({ 3, 4 }, 33) })
      gc.assert_gradcheck(function(a) return call(case, a:t(), p) end, { gc.smooth_input({ 4, 3 }, 34) })
      gc.assert_gradcheck(function(a) return call(case, a:expand(3, 4), p) end, { gc.smooth_input({ 4 }, 35) })
      gc.assert_gradcheck(function(a) return a[case.op](a) end, { gc.smooth_input({ 5 }, 36) })
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
      assert.are.same(values(y), values(x[case.op](x, table.unpack(p))))
      assert.are.same(values(y), values(nn.F[case.op](x, table.unpack(p))))
      local m = nn[case.module](table.unpack(p))
      assert.are.same(values(y), values(m(x)))
      local named = {}
      for i, name in ipairs(case.params) do named[name] = p[i] end
      assert.are.same(values(y), values(nn[case.module](named)(x)))
      -- PyTorch's defaults, stored on the module and printed
      local d = nn[case.module]()
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
      local function list(t)
        local out = {}
        for i, v in ipairs(t) do out[i] = lit(v) end
        return "[" .. table.concat(out, ", ") .. "]"
      end
      local pargs = {}
      for i = 1, #p do pargs[i] = lit(p[i]) end
      local expr = string.format(case.torch, table.unpack(pargs))
      local script = table.concat({
        "import torch",
        "for dt in (torch.float64, torch.float32):",
        "    x = torch.tensor(" .. list(xs) .. ", dtype=dt, requires_grad=True)",
        "    y = " .. expr,
        "    y.backward(torch.tensor(" .. list(gys) .. ", dtype=dt))",
        "    print(' '.join(repr(v) for v in y.tolist()))",
        "    print(' '.join(repr(v) for v in x.grad.tolist()))",
      }, "\n")
      local src = os.tmpname()
      local f = assert(io.open(src, "w"))
      f:write(script)
      f:close()
      local pipe = io.popen("/usr/bin/python3 " .. src .. " 2>&1")
      local out = pipe:read("a")
      local ok = pipe:close()
      os.remove(src)
      assert(ok, out)
      local rows = {}
      for line in out:gmatch("[^\n]+") do
        local row = {}
        for w in line:gmatch("%S+") do
          row[#row + 1] = w == "nan" and 0 / 0 or w == "inf" and math.huge or w == "-inf" and -math.huge
            or assert(tonumber(w), w)
        end
        rows[#rows + 1] = row
      end
      assert.are.equal(4, #rows, out)
      for k, dt in ipairs({ "float64", "float32" }) do
        local x = ddp.tensor(xs, { dtype = dt }):requires_grad_()
        local y = call(case, x, p)
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
        R.assert_error(function() ddp[case.op](x, "a") end, case.op .. ": " .. case.params[1], "must be a number",
          "string")
        R.assert_error(function() nn[case.module]("a") end, case.module, case.params[1], "must be a number")
      else
        R.assert_error(function() nn[case.module]("a") end, case.module, "inplace must be a boolean")
      end
      R.assert_error(function() ddp[case.op](ddp.tensor({ 1, 2 }, { dtype = "int64" })) end, case.op,
        "expected a floating point tensor, got int64")
      local too_many = { table.unpack(p) }
      too_many[#too_many + 1] = 1
      R.assert_error(function() ddp[case.op](x, table.unpack(too_many)) end, case.op, "at most")
      R.assert_error(function() ddp[case.op]("x") end, "Tensor expected, got string")
      R.assert_error(function() nn[case.module] { slope = 1 } end, case.module, "unknown option 'slope'")
      -- PyTorch's inplace=true is accepted (computed out of place: the same values)
      local m = nn[case.module] { inplace = true }
      assert.are.same(nn[case.module]()(x):totable(), m(x):totable())
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
