-- Elementwise ops: forward against plain-Lua float64 references (float64
-- and float32, contiguous and strided), gradients against finite
-- differences (with transposed and broadcast operands), and bad input.
local ddp = require "ddplua"
local gc = require "helpers.gradcheck"
local R = require "helpers.ref"

local function arr(t) return R.from(t) end

-- name, tensor function, Lua reference, input generator (distinct seeds)
local binary = {
  { "add", function(a, b) return a + b end, function(x, y) return x + y end },
  { "sub", function(a, b) return a - b end, function(x, y) return x - y end },
  { "mul", function(a, b) return a * b end, function(x, y) return x * y end },
  { "div", function(a, b) return a / b end, function(x, y) return x / y end },
  { "maximum", function(a, b) return a:maximum(b) end, function(x, y) return math.max(x, y) end },
  { "minimum", function(a, b) return ddp.minimum(a, b) end, function(x, y) return math.min(x, y) end },
  { "pow", function(a, b) return a:pow(b) end, function(x, y) return x ^ y end, positive_base = true },
}

local unary = {
  { "neg", function(a) return -a end, function(x) return -x end },
  { "relu", function(a) return a:relu() end, function(x) return math.max(x, 0) end },
  { "gelu", function(a) return a:gelu() end, R.gelu },
  { "tanh", function(a) return a:tanh() end, R.tanh },
  { "sigmoid", function(a) return a:sigmoid() end, R.sigmoid },
  { "exp", function(a) return a:exp() end, math.exp },
  { "log", function(a) return a:log() end, math.log, positive = true },
  { "sqrt", function(a) return a:sqrt() end, math.sqrt, positive = true },
  { "abs", function(a) return a:abs() end, math.abs },
  { "rsqrt", function(a) return a:rsqrt() end, function(x) return 1 / math.sqrt(x) end, positive = true },
  { "square", function(a) return a:square() end, function(x) return x * x end },
  { "reciprocal", function(a) return a:reciprocal() end, function(x) return 1 / x end, positive = true },
  { "sign", function(a) return a:sign() end, function(x) return x > 0 and 1 or (x < 0 and -1 or 0) end },
  { "clamp", function(a) return a:clamp(-0.5, 0.7) end, function(x) return math.min(math.max(x, -0.5), 0.7) end },
}

-- inputs away from kinks (|x| >= 0.1), or in [0.5, 2.5] where the op needs > 0
local function input(shape, seed, positive)
  if positive then return R.uniform(shape, 0.5, 2.5, seed):requires_grad_() end
  return gc.smooth_input(shape, seed)
end

describe("elementwise binary ops", function()
  for _, case in ipairs(binary) do
    local name, f, ref = case[1], case[2], case[3]
    describe(name, function()
      it("matches the float64 reference with broadcasting, in float64 and float32", function()
        local a = input({ 3, 4 }, 11, case.positive_base):detach()
        local b = gc.smooth_input({ 4 }, 12):detach()
        R.check_forward(f, { a, b }, R.map2(arr(a), arr(b), ref))
        local c, d = gc.smooth_input({ 3, 1 }, 13):detach(), gc.smooth_input({ 1, 4 }, 14):detach()
        if case.positive_base then c = R.uniform({ 3, 1 }, 0.5, 2.5, 13) end
        R.check_forward(f, { c, d }, R.map2(arr(c), arr(d), ref))
      end)

      it("matches the reference on strided (transposed) operands", function()
        local a = input({ 4, 3 }, 15, case.positive_base):detach()
        local b = gc.smooth_input({ 3, 4 }, 16):detach()
        local at = a:transpose(1, 2)
        assert.is_false(at:is_contiguous())
        R.check_forward(function(x, y) return f(x:transpose(1, 2), y) end, { a, b },
          R.map2(arr(at), arr(b), ref))
      end)

      it("has finite-difference gradients for transposed and broadcast operands", function()
        local a = input({ 4, 3 }, 17, case.positive_base)
        local b = gc.smooth_input({ 4 }, 18)
        gc.assert_gradcheck(function(x, y) return f(x:transpose(1, 2), y) end, { a, b })
        local c, d = input({ 3, 1 }, 19, case.positive_base), gc.smooth_input({ 2, 1, 4 }, 20)
        gc.assert_gradcheck(f, { c, d })
      end)
    end)
  end

  it("takes numbers on either side, as PyTorch", function()
    local a = R.uniform({ 2, 3 }, 0.5, 2.5, 21)
    local A = arr(a)
    R.assert_close(2 - a, R.map(A, function(x) return 2 - x end), 1e-15, 0)
    R.assert_close(a - 2, R.map(A, function(x) return x - 2 end), 1e-15, 0)
    R.assert_close(3 / a, R.map(A, function(x) return 3 / x end), 1e-15, 1e-15)
    R.assert_close(a * 0.5, R.map(A, function(x) return x * 0.5 end), 1e-15, 0)
    R.assert_close(a ^ 2, R.map(A, function(x) return x * x end), 1e-14, 1e-14)
    R.assert_close(ddp.pow(2, a), R.map(A, function(x) return 2 ^ x end), 1e-14, 1e-14)
    gc.assert_gradcheck(function(x) return (3 / x) + x ^ 3 - 2 ^ x + x:maximum(1.5) end,
      { R.uniform({ 2, 3 }, 0.5, 1.4, 22):requires_grad_() })
  end)

  it("splits the gradient of maximum/minimum equally at ties", function()
    local x = ddp.tensor({ 1.0, 2.0, 3.0 }, { dtype = "float64", requires_grad = true })
    local y = ddp.tensor({ 1.0, 5.0, 0.0 }, { dtype = "float64", requires_grad = true })
    x:maximum(y):sum():backward()
    assert.are.same({ 0.5, 0.0, 1.0 }, x.grad:totable())
    assert.are.same({ 0.5, 1.0, 0.0 }, y.grad:totable())
  end)
end)

describe("elementwise unary ops", function()
  for _, case in ipairs(unary) do
    local name, f, ref = case[1], case[2], case[3]
    describe(name, function()
      it("matches the float64 reference in float64 and float32, contiguous and strided", function()
        local a = input({ 3, 5 }, 31, case.positive):detach()
        R.check_forward(f, { a }, R.map(arr(a), ref))
        local b = input({ 5, 3 }, 32, case.positive):detach()
        R.check_forward(function(x) return f(x:transpose(1, 2)) end, { b }, R.map(arr(b:transpose(1, 2)), ref))
      end)

      it("has finite-difference gradients, also through a narrowed view", function()
        gc.assert_gradcheck(f, { input({ 2, 3 }, 33, case.positive) })
        gc.assert_gradcheck(function(x) return f(x:narrow(2, 2, 3)) end, { input({ 2, 5 }, 34, case.positive) })
      end)
    end)
  end

  it("casts and copies with gradients flowing back in the input's dtype", function()
    local x = R.randn({ 2, 3 }, 35):requires_grad_()
    local y = x:float()
    assert.are.equal("float32", y:dtype())
    R.assert_close(y, R.from(x), 1e-7, 1e-7)
    local total = (y * 2):sum() + (x:clone() * 3):sum() + x:t():contiguous():sum()
    total:backward()
    assert.are.equal("float64", x.grad:dtype())
    R.assert_close(x.grad, R.array({ 2, 3 }, 6), 0, 0)
  end)

  it("add with alpha computes a + alpha * b and its gradients", function()
    local a, b = R.randn({ 2, 3 }, 36), R.randn({ 3 }, 37)
    R.check_forward(function(p, q) return p:add(q, -2.5) end, { a, b },
      R.map2(R.from(a), R.from(b), function(x, y) return x - 2.5 * y end))
    gc.assert_gradcheck(function(p, q) return p:add(q, -2.5) end,
      { a:clone():requires_grad_(), b:clone():requires_grad_() })
  end)

  it("propagates NaN through maximum and relu like PyTorch", function()
    local nan = 0 / 0
    local m = ddp.tensor({ nan, 1.0 }, { dtype = "float64" }):maximum(ddp.tensor({ 2.0, nan }, { dtype = "float64" }))
    local v = m:totable()
    assert.is_true(v[1] ~= v[1] and v[2] ~= v[2])
  end)
end)

describe("elementwise bad input", function()
  it("names both shapes when broadcasting fails", function()
    R.assert_error(function() return ddp.ones(2, 3) + ddp.ones(4) end, "[2, 3]", "[4]", "broadcast")
    R.assert_error(function() return ddp.ones(2, 3):maximum(ddp.ones(3, 2)) end, "maximum", "[2, 3]", "[3, 2]")
  end)

  it("rejects operands that are neither tensors nor numbers, naming the type", function()
    R.assert_error(function() return ddp.ones(2) + "a" end, "string")
    R.assert_error(function() return ddp.ones(2) * {} end, "table")
    R.assert_error(function() return ddp.exp("x") end, "Tensor expected", "string")
    R.assert_error(function() return ddp.ones(2):pow({ 2 }) end, "table")
  end)

  it("refuses in-place updates of a tensor that requires grad", function()
    local x = ddp.ones(2, { requires_grad = true })
    R.assert_error(function() x:add_(1) end, "in-place", "requires grad")
  end)
end)
