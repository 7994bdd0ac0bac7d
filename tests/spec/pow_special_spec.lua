-- The powers computed without pow (ops/elementwise.c's pow_special: the unary result itself, no copy) and x^1
-- (a square's backward: the vector kernel's copy instead of powf per element), against float64 and PyTorch's values.
local ddp = require "ddplua"
local R = require "helpers.ref"

describe("special powers", function()
  it("x^1 is x, bit for bit: -0, NaN, inf, denormal-free tiny values, strided", function()
    local x = ddp.tensor({ -0.0, 0 / 0, math.huge, -math.huge, 1e-30, -3.5, 7 }, { dtype = "float32" })
    local y = x:pow(1):totable()
    assert.are.equal(-math.huge, 1 / y[1])
    assert.is_true(y[2] ~= y[2])
    assert.are.same({ math.huge, -math.huge }, { y[3], y[4] })
    assert.are.same(x:narrow(1, 5, 3):totable(), { y[5], y[6], y[7] })
    local m = ddp.randn(9, 4)
    local col = m:narrow(2, 3, 1)
    assert.are.equal(0, col:pow(1):ne(col):sum():item())
  end)
  it("a square and its gradient are x * x and 2 x, a fresh tensor", function()
    ddp.manual_seed(4)
    local x = (ddp.randn(1001) * 3):requires_grad_()
    local y = x:pow(2)
    assert.are.equal(0, y:ne((x:detach():double() ^ 2):float()):sum():item())
    y:sum():backward()
    assert.are.equal(0, x.grad:ne(x:detach() * 2):sum():item())
    y:detach():fill_(0) -- the result is its own storage, not x's
    assert.is_true(x:detach():abs():sum():item() > 0)
    for _, e in ipairs({ 0.5, -0.5, -1, 3, -2, 1, 2 }) do
      local p = ddp.rand(50, { dtype = "float64" }) + 0.5
      R.assert_close(p:pow(e), R.map(R.from(p), function(v) return v ^ e end), 1e-15, 1e-14, "power " .. e)
    end
  end)
end)
