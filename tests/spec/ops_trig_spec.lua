-- The op table's trigonometric, hyperbolic, base-2 and base-10 functions (tan, asin, acos, atan, sinh, cosh, asinh,
-- acosh, atanh, log2, log10, exp2): float64 and float32 against a float64 Lua reference (contiguous and transposed),
-- gradients by finite differences (strided and broadcast views) and against the reference derivative, PyTorch 1.13's
-- values and gradients at 0, +-1, NaN, +-inf, the domain edges and large magnitudes, integer inputs (float32),
-- empty tensors, the method and ddp.core forms, and bad arguments.
local ddp = require "ddplua"
local R = require "helpers.ref"
local TR = require "helpers.torch_ref"
local gc = require "helpers.gradcheck"

local core = ddp.core
local NO_TORCH = "skipped: /usr/bin/python3 cannot import torch"
local LN2, LN10 = math.log(2), math.log(10)

local function asinh(x)
  local a = math.abs(x)
  local r = math.log(a + math.sqrt(a * a + 1))
  return x < 0 and -r or r
end

-- name, reference, derivative, the domain random values are drawn from
local OPS = {
  { "tan", math.tan, function(x) return 1 + math.tan(x) ^ 2 end, { -1.4, 1.4 } },
  { "asin", math.asin, function(x) return 1 / math.sqrt(1 - x * x) end, { -0.95, 0.95 } },
  { "acos", math.acos, function(x) return -1 / math.sqrt(1 - x * x) end, { -0.95, 0.95 } },
  { "atan", math.atan, function(x) return 1 / (1 + x * x) end, { -5, 5 } },
  { "sinh", function(x) return (math.exp(x) - math.exp(-x)) / 2 end,
    function(x) return (math.exp(x) + math.exp(-x)) / 2 end, { -5, 5 } },
  { "cosh", function(x) return (math.exp(x) + math.exp(-x)) / 2 end,
    function(x) return (math.exp(x) - math.exp(-x)) / 2 end, { -5, 5 } },
  { "asinh", asinh, function(x) return 1 / math.sqrt(x * x + 1) end, { -5, 5 } },
  { "acosh", function(x) return math.log(x + math.sqrt(x * x - 1)) end,
    function(x) return 1 / math.sqrt(x * x - 1) end, { 1.05, 6 } },
  { "atanh", function(x) return 0.5 * math.log((1 + x) / (1 - x)) end, function(x) return 1 / (1 - x * x) end,
    { -0.95, 0.95 } },
  { "log2", function(x) return math.log(x, 2) end, function(x) return 1 / (x * LN2) end, { 0.05, 8 } },
  { "log10", function(x) return math.log(x, 10) end, function(x) return 1 / (x * LN10) end, { 0.05, 8 } },
  { "exp2", function(x) return 2 ^ x end, function(x) return 2 ^ x * LN2 end, { -6, 6 } },
}

local SPECIALS = { 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 0.999, -0.999, 1.001, 2.0, -2.0, 0 / 0, math.huge, -math.huge,
  1e30, -1e30, 100.0, -100.0, 1e-30, 88.0, 709.0, 1e5 }

local function in_domain(dom, shape, seed) return R.uniform(shape, dom[1], dom[2], seed) end

describe("trigonometric, hyperbolic, log2 / log10 / exp2 (op table)", function()
  it("match the float64 reference in float64 and float32, contiguous and transposed", function()
    for i, op in ipairs(OPS) do
      local name, f = op[1], op[2]
      local x = in_domain(op[4], { 4, 6 }, 10 + i)
      local ref = R.map(R.from(x), f)
      R.check_forward(function(t) return t[name](t) end, { x }, ref, { 1e-6, 2e-6 }, { 1e-14, 1e-13 })
      local xt = x:t():contiguous():t() -- a transposed view with x's values
      assert.is_false(xt:is_contiguous())
      R.assert_close(xt[name](xt), ref, 1e-14, 1e-13, name .. " of a transposed view")
      R.assert_close(core[name](x), ref, 1e-14, 1e-13, "ddp.core." .. name)
    end
  end)

  it("gradients: finite differences (strided and broadcast), the reference derivative, float32 against float64",
    function()
      for i, op in ipairs(OPS) do
        local name, df = op[1], op[3]
        local x = in_domain(op[4], { 3, 4 }, 40 + i):requires_grad_()
        gc.assert_gradcheck(function(t) return t[name](t) end, { x })
        gc.assert_gradcheck(function(t) return t:t()[name](t:t()) end, { x })
        local row = in_domain(op[4], { 4 }, 60 + i):requires_grad_()
        gc.assert_gradcheck(function(t) local e = t:expand({ 3, 4 }) return e[name](e) end, { row })
        local leaf = x:detach():clone():requires_grad_()
        leaf[name](leaf):sum():backward()
        R.assert_close(leaf.grad, R.map(R.from(x:detach()), df), 1e-12, 1e-10, name .. "'s derivative")
        local l32 = x:detach():float():requires_grad_()
        l32[name](l32):sum():backward()
        R.assert_close(l32.grad, R.from(leaf.grad), 1e-5, 1e-5, name .. "'s float32 derivative")
      end
    end)

  it("integers give float32; empty tensors; the core form is the method", function()
    local xi = ddp.tensor({ 0, 1, 2 })
    for _, op in ipairs(OPS) do
      local name = op[1]
      local y = xi[name](xi)
      assert.are.equal("float32", y:dtype())
      -- (within an ulp: the integer path computes in float64 and rounds, the float32 one in float32)
      R.assert_close(y, R.from(xi:float()[name](xi:float())), 0, 2.4e-7, name .. " of int64")
      local e = ddp.zeros({ 0, 3 }):requires_grad_()
      local ye = e[name](e)
      assert.are.same({ 0, 3 }, ye:size())
      ye:sum():backward()
      assert.are.same({ 0, 3 }, e.grad:size())
      assert.are.equal(core.Tensor[name], core[name])
    end
  end)

  it("the domain edges: NaN outside, atanh(+-1) = +-inf, infinite gradients at the edges", function()
    local x = ddp.tensor({ -1.0, 1.0, 2.0 }, { dtype = "float64" }):requires_grad_()
    local v = x:atanh():totable()
    assert.are.same({ -math.huge, math.huge }, { v[1], v[2] })
    assert.is_true(v[3] ~= v[3])
    x:atanh():sum():backward()
    assert.are.same({ math.huge, math.huge }, { x.grad:totable()[1], x.grad:totable()[2] })
    assert.is_true(ddp.tensor({ 1.5 }):asin():isnan():item() == 1)
    assert.is_true(ddp.tensor({ 0.5 }):acosh():isnan():item() == 1)
    assert.are.equal(-math.huge, ddp.tensor({ 0.0 }):log2():item())
    assert.are.equal(1024, ddp.tensor({ 10.0 }, { dtype = "float64" }):exp2():item())
    assert.are.equal(3, ddp.tensor({ 1000.0 }, { dtype = "float64" }):log10():item())
    -- sinh and cosh of 710 are finite (1.117e308, libm's); PyTorch 1.13's float64 kernels give inf from 709.79 on
    local big = ddp.tensor({ 710.0, -710.0 }, { dtype = "float64" })
    R.assert_close(big:cosh(), { shape = { 2 }, v = { 1.1169973830808557e308, 1.1169973830808557e308 } }, 0, 1e-15)
    R.assert_close(big:sinh(), { shape = { 2 }, v = { 1.1169973830808557e308, -1.1169973830808557e308 } }, 0, 1e-15)
  end)

  it("match PyTorch 1.13: values and gradients at specials and large magnitudes, float32 and float64", function()
    if not TR.available() then return pending(NO_TORCH) end
    local inputs, body, runs = {}, {}, {}
    for _, dt in ipairs({ "float32", "float64" }) do
      local base = ddp.tensor(SPECIALS, { dtype = dt })
      local rand = R.randn({ 40 }, 7, 3):to(dt)
      local x = ddp.cat({ base, rand })
      local g = R.randn(x:size(), 8):to(dt)
      inputs["x_" .. dt], inputs["g_" .. dt] = x, g
      for _, op in ipairs(OPS) do
        local name = op[1]
        local leaf = x:clone():requires_grad_()
        local y = leaf[name](leaf);
        (y * g):sum():backward()
        local key = name .. "_" .. dt
        runs[#runs + 1] = { key = key, y = y:detach(), gx = leaf.grad, dt = dt }
        body[#body + 1] = string.format(
          "x = T['x_%s'].clone().requires_grad_(); y = torch.%s(x); (y * T['g_%s']).sum().backward()\n" ..
          "OUT['%s'] = y.detach(); OUT['%s_g'] = x.grad", dt, name, dt, key, key)
      end
    end
    local ref = TR.run(table.concat(body, "\n") .. "\n", inputs)
    local fails = {}
    for _, r in ipairs(runs) do
      -- libm's and PyTorch's (SLEEF's) functions each within an ulp or so; float32 sinh / cosh / exp2 of large
      -- arguments are relative
      local tol = r.dt == "float32" and { 1e-6, 4e-6 } or { 1e-15, 4e-15 }
      for _, c in ipairs({ { r.y, ref[r.key], " value" }, { r.gx, ref[r.key .. "_g"], " gradient" } }) do
        local ok, err = pcall(R.assert_close, c[1], R.from(c[2]), tol[1], tol[2], r.key .. c[3])
        if not ok then fails[#fails + 1] = err end
      end
    end
    assert(#fails == 0, table.concat(fails, "\n"))
  end)

  it("bad arguments", function()
    R.assert_error(function() return core.asin("x") end, "asin", "Tensor expected")
    R.assert_error(function() return core.exp2() end, "exp2", "Tensor expected")
  end)
end)
