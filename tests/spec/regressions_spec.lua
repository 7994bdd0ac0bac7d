-- Results that once came out wrong: the gradient of vector @ vector (a
-- reshaped scalar gradient has zero strides, which BLAS rejected, leaving
-- the result unwritten), max/min over a dim (the 1-based indices handed to
-- Lua were made in place from the 0-based ones saved for backward), and
-- int64 neg/abs/relu/square/sign (computed through double, so inexact
-- beyond 2^53; the GPU computes them exactly and must agree).
local ddp = require "ddplua"
local gc = require "helpers.gradcheck"

describe("regressions", function()
  it("vector @ vector and matrix/vector products have correct gradients", function()
    ddp.manual_seed(21)
    local v = ddp.randn(7, { dtype = "float64" }):requires_grad_()
    local u = ddp.randn(7, { dtype = "float64" }):requires_grad_()
    local m = ddp.randn(3, 7, { dtype = "float64" }):requires_grad_()
    assert(gc.gradcheck(function(a, b) return a:matmul(b) end, { v, u }))
    assert(gc.gradcheck(function(a, b) return a:matmul(b) end, { m, v }))
    assert(gc.gradcheck(function(a, b) return a:matmul(b:t()) end, { v, m }))
    local w = ddp.randn(1, 1, { dtype = "float64" }):requires_grad_()
    assert(gc.gradcheck(function(a, b) return a:matmul(b:view(1, 7)) end, { w, v }))
  end)

  it("keeps the sign of -0: ddp.full(shape, -0.0) and a broadcast value in + - * / over long rows", function()
    local function neg_zero(v) return v == 0 and 1 / v == -math.huge end
    assert.is_true(neg_zero(ddp.full({ 3 }, -0.0)[1]:item()), "full(-0.0) was +0 (a memset)")
    for _, n in ipairs({ 3, 16, 17, 40 }) do
      local s = {}
      for i = 1, n do s[i] = 1.0 end
      s[2] = -0.0
      local col = ddp.tensor(s):view(n, 1) -- each row's value broadcast along the row
      local what = string.format("n = %d", n)
      -- the vector kernel made the value's lanes as 0 + v: -0 became +0 from 16 elements on
      assert.is_true(neg_zero((col * ddp.ones(n))[2][n]:item()), "-0 * 1, " .. what)
      assert.is_true(neg_zero((col / ddp.ones(n))[2][n]:item()), "-0 / 1, " .. what)
      assert.is_true(neg_zero((col + ddp.full({ n }, -0.0))[2][n]:item()), "-0 + -0, " .. what)
      assert.is_true(neg_zero((col - ddp.zeros(n))[2][n]:item()), "-0 - 0, " .. what)
    end
  end)

  it("batch_norm in evaluation mode has a gradient on an empty batch (its count of 0 was refused)", function()
    local x = ddp.zeros(0, 4, 3):requires_grad_()
    local w, b = ddp.randn(4):requires_grad_(), ddp.randn(4):requires_grad_()
    ddp.batch_norm(x, ddp.zeros(4), ddp.ones(4), w, b, false):sum():backward()
    assert.are.same({ 0, 4, 3 }, x.grad:size())
    assert.are.same({ 0, 0, 0, 0 }, w.grad:totable())
    assert.are.same({ 0, 0, 0, 0 }, b.grad:totable())
  end)

  it("max and min over a dim return 1-based indices and correct gradients", function()
    local x = ddp.tensor({ { 1.0, 5.0, 2.0 }, { 7.0, 0.0, 7.0 } }, { dtype = "float64", requires_grad = true })
    local vals, idx = x:max(2)
    assert.are.equal("int64", idx:dtype())
    assert.are.same({ 2, 1 }, idx:totable())
    assert.are.same({ 5.0, 7.0 }, vals:totable())
    vals:sum():backward()
    assert.are.same({ { 0.0, 1.0, 0.0 }, { 1.0, 0.0, 0.0 } }, x.grad:totable())
    local _, imin = x:min(1, true)
    assert.are.same({ { 1, 2, 1 } }, imin:totable())
    ddp.manual_seed(22)
    local y = ddp.randn(4, 5, { dtype = "float64" }):requires_grad_()
    assert(gc.gradcheck(function(a) return (a:max(2)) end, { y }))
    assert(gc.gradcheck(function(a) return (a:min(1, true)) end, { y }))
  end)

  it("keeps int64 unary ops exact beyond 2^53", function()
    local big = ddp.tensor({ (1 << 60) + 1, -(1 << 59) - 3, 7 })
    assert.are.equal("int64", big:dtype())
    assert.are.same({ -(1 << 60) - 1, (1 << 59) + 3, -7 }, (-big):totable())
    assert.are.same({ (1 << 60) + 1, (1 << 59) + 3, 7 }, big:abs():totable())
    assert.are.same({ (1 << 60) + 1, 0, 7 }, big:relu():totable())
    assert.are.same({ 1, -1, 1 }, big:sign():totable())
    assert.are.same({ 49 }, ddp.tensor({ -7 }):square():totable())
  end)
end)
