-- matmul (1-d, 2-d, batched, broadcast batch dims, transposed operands) and
-- linear (bias, fused activation): forward against a plain-Lua float64
-- reference, gradients against finite differences, and bad input.
local ddp = require "ddplua"
local gc = require "helpers.gradcheck"
local R = require "helpers.ref"

local matmul_cases = {
  { "1-d by 1-d", { 4 }, { 4 } },
  { "2-d by 1-d", { 3, 4 }, { 4 } },
  { "1-d by 2-d", { 4 }, { 4, 5 } },
  { "2-d by 2-d", { 3, 4 }, { 4, 5 } },
  { "batched by batched", { 2, 3, 4 }, { 2, 4, 5 } },
  { "batched by 2-d", { 2, 3, 4 }, { 4, 5 } },
  { "1-d by batched", { 4 }, { 2, 4, 5 } },
  { "broadcast batch dims", { 2, 1, 3, 4 }, { 3, 4, 2 } },
}

describe("matmul", function()
  for i, c in ipairs(matmul_cases) do
    local name, sa, sb = c[1], c[2], c[3]
    it(name .. " matches the reference in float64 and float32", function()
      local a, b = R.randn(sa, 200 + i), R.randn(sb, 300 + i)
      R.check_forward(function(x, y) return x:matmul(y) end, { a, b }, R.matmul(R.from(a), R.from(b)))
    end)

    it(name .. " has finite-difference gradients", function()
      local a, b = R.randn(sa, 400 + i):requires_grad_(), R.randn(sb, 500 + i):requires_grad_()
      gc.assert_gradcheck(function(x, y) return ddp.matmul(x, y) end, { a, b })
    end)
  end

  it("handles transposed and narrowed operands without changing results", function()
    local a, b = R.randn({ 4, 3 }, 601), R.randn({ 6, 4 }, 602)
    local ref = R.matmul(R.from(a:t():contiguous()), R.from(b:narrow(1, 2, 4):contiguous()))
    R.check_forward(function(x, y) return x:t():matmul(y:narrow(1, 2, 4)) end, { a, b }, ref)
    local bt = R.randn({ 2, 5, 4 }, 603)
    R.check_forward(function(x, y) return R.randn({ 2, 3, 4 }, 604):to(x:dtype()):matmul(y:transpose(2, 3)) end,
      { bt, bt }, R.matmul(R.from(R.randn({ 2, 3, 4 }, 604)), R.from(bt:transpose(2, 3):contiguous())))
    gc.assert_gradcheck(function(x, y) return x:t():matmul(y:narrow(1, 2, 4)) end,
      { a:clone():requires_grad_(), b:clone():requires_grad_() })
    gc.assert_gradcheck(function(x, y) return x:transpose(2, 3):matmul(y:transpose(1, 2)) end,
      { R.randn({ 2, 4, 3 }, 605):requires_grad_(), R.randn({ 5, 4 }, 606):requires_grad_() })
  end)

  it("names both shapes when the inner sizes differ", function()
    R.assert_error(function() return ddp.ones(2, 3):matmul(ddp.ones(4, 5)) end, "matmul", "[2, 3]", "[4, 5]",
      "3 != 4")
    R.assert_error(function() return ddp.ones(3):matmul(ddp.ones(4)) end, "[3]", "[4]")
  end)

  it("names both shapes when batch dims cannot broadcast", function()
    R.assert_error(function() return ddp.ones(2, 3, 4):matmul(ddp.ones(3, 4, 5)) end, "[2, 3, 4]", "[3, 4, 5]",
      "broadcast")
  end)

  it("multiplies int64 matrices exactly and refuses mixed dtypes, naming them", function()
    -- exact beyond 2^53, wrapping like int64 arithmetic (PyTorch's CPU int matmul)
    local big = 4611686018427387903
    local r = ddp.tensor({ { big, 1 } }):matmul(ddp.tensor({ { 1 }, { 2 } }))
    assert.are.same({ { big + 2 } }, r:totable())
    assert.are.equal("int64", r:dtype())
    assert.are.same({ 11 }, { ddp.tensor({ 1, 2 }):matmul(ddp.tensor({ 3, 4 })):item() })
    R.assert_error(function() return ddp.ones(2, 2):matmul(ddp.ones(2, 2, { dtype = "float64" })) end, "float32",
      "float64")
  end)

  it("refuses 0-dimensional operands and non-tensors", function()
    R.assert_error(function() return ddp.ones(2):matmul(ddp.tensor(1.0)) end, "at least 1 dimension")
    R.assert_error(function() return ddp.matmul("a", ddp.ones(2)) end, "Tensor expected", "string")
    R.assert_error(function() return ddp.ones(2):mm(ddp.ones(2, 2)) end, "2-dimensional")
  end)
end)

describe("linear", function()
  local x, w, b = R.randn({ 5, 4 }, 701), R.randn({ 3, 4 }, 702), R.randn({ 3 }, 703)
  local X, W, B = R.from(x), R.from(w), R.from(b)

  it("matches x w^T + b in float64 and float32, with and without bias", function()
    R.check_forward(function(i, j, k) return ddp.linear(i, j, k) end, { x, w, b }, R.linear(X, W, B))
    R.check_forward(function(i, j) return ddp.linear(i, j) end, { x, w }, R.linear(X, W, nil))
    local x3 = R.randn({ 2, 5, 4 }, 704)
    R.check_forward(function(i, j, k) return ddp.linear(i, j, k) end, { x3, w, b }, R.linear(R.from(x3), W, B))
  end)

  it("fuses relu, tanh and sigmoid into the epilogue", function()
    R.check_forward(function(i, j, k) return ddp.linear(i, j, k, "relu") end, { x, w, b }, R.linear(X, W, B, true))
    local lin = R.linear(X, W, B)
    R.check_forward(function(i, j, k) return ddp.linear(i, j, k, "tanh") end, { x, w, b }, R.map(lin, R.tanh))
    R.check_forward(function(i, j, k) return ddp.linear(i, j, k, "sigmoid") end, { x, w, b },
      R.map(lin, R.sigmoid))
  end)

  it("matches the reference for transposed inputs and weights", function()
    local xt, wt = R.randn({ 4, 5 }, 705), R.randn({ 4, 3 }, 706)
    R.check_forward(function(i, j, k) return ddp.linear(i:t(), j:t(), k) end, { xt, wt, b },
      R.linear(R.from(xt:t():contiguous()), R.from(wt:t():contiguous()), B))
  end)

  it("has finite-difference gradients for input, weight and bias (plain and fused)", function()
    local xi, wi, bi = x:clone():requires_grad_(), w:clone():requires_grad_(), b:clone():requires_grad_()
    gc.assert_gradcheck(function(i, j, k) return ddp.linear(i, j, k) end, { xi, wi, bi })
    for _, act in ipairs({ "relu", "tanh", "sigmoid" }) do
      gc.assert_gradcheck(function(i, j, k) return ddp.linear(i, j, k, act) end, { xi, wi, bi })
    end
    local xt, wt = R.randn({ 4, 2, 3 }, 707):requires_grad_(), R.randn({ 4, 3 }, 708):requires_grad_()
    gc.assert_gradcheck(function(i, j) return ddp.linear(i:transpose(1, 3), j:t()) end, { xt, wt })
  end)

  it("names the shapes of a mismatched input, weight or bias", function()
    R.assert_error(function() return ddp.linear(ddp.ones(5, 4), ddp.ones(3, 5)) end, "[5, 4]", "[3, 5]")
    R.assert_error(function() return ddp.linear(ddp.ones(5, 4), ddp.ones(3, 4), ddp.ones(4)) end, "bias", "[4]",
      "[3]")
    R.assert_error(function() return ddp.linear(ddp.ones(5, 4), ddp.ones(4)) end, "2-dimensional", "[4]")
  end)

  it("refuses other dtypes and unknown activations", function()
    R.assert_error(function() return ddp.linear(ddp.ones(2, 2, { dtype = "float64" }), ddp.ones(2, 2)) end,
      "float64", "float32")
    R.assert_error(function() return ddp.linear(ddp.ones(2, 2), ddp.ones(2, 2), nil, "swish") end, "swish")
    R.assert_error(function() return ddp.linear(ddp.ones(2, 2), 3) end, "Tensor expected", "number")
  end)
end)
