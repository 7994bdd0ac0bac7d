-- Core autograd: accumulation, graph freeing, no_grad, error cases.
local ddp = require "ddplua"
local gc = require "helpers.gradcheck"

describe("autograd", function()
  it("accumulates gradients into leaves across backward calls", function()
    local x = ddp.tensor({ 1.0, 2.0, 3.0 }, { dtype = "float64", requires_grad = true })
    local s1 = (x * x):sum()
    s1:backward()
    local s2 = (x * 3):sum()
    s2:backward()
    assert.are.same({ 5.0, 7.0, 9.0 }, x.grad:totable())
  end)

  it("frees the graph after backward and says so on a second backward", function()
    local x = ddp.tensor({ 1.0, 2.0 }, { dtype = "float64", requires_grad = true })
    local y = (x * x):sum()
    y:backward()
    local ok, err = pcall(function() y:backward() end)
    assert.is_false(ok)
    assert.matches("second time", err)
  end)

  it("keeps the graph with retain_graph", function()
    local x = ddp.tensor({ 1.0, 2.0 }, { dtype = "float64", requires_grad = true })
    local y = (x * x):sum()
    y:backward(nil, { retain_graph = true })
    y:backward()
    assert.are.same({ 4.0, 8.0 }, x.grad:totable())
  end)

  it("takes PyTorch's keywords as one table: backward{gradient=, retain_graph=}", function()
    local x = ddp.tensor({ 1.0, 2.0 }, { dtype = "float64", requires_grad = true })
    local y = (x * x):sum()
    y:backward { retain_graph = true }
    y:backward { gradient = ddp.tensor(0.5, { dtype = "float64" }) }
    assert.are.same({ 3.0, 6.0 }, x.grad:totable())
    local z = x * 3
    z:backward { gradient = ddp.tensor({ 1.0, -1.0 }, { dtype = "float64" }) }
    assert.are.same({ 6.0, 3.0 }, x.grad:totable())
    local w = (x * x):sum()
    for _, bad in ipairs({
      { { gradient = 5 }, "backward: option gradient must be a tensor, got number" },
      { { retain_graph = true, retain = true }, "backward: unknown option 'retain' (expected gradient, retain_graph)" },
      { { true }, "backward: options are named (gradient=, retain_graph=), got a number key" },
    }) do
      local ok, err = pcall(w.backward, w, bad[1])
      assert.is_false(ok)
      assert.is_truthy(err:find(bad[2], 1, true), err)
    end
    local ok, err = pcall(w.backward, w, {}, true)
    assert.is_false(ok)
    assert.is_truthy(err:find("after an options table, expected no more arguments", 1, true), err)
  end)

  it("records nothing under no_grad (function and <close> forms)", function()
    local x = ddp.ones(3, { requires_grad = true })
    local y = ddp.no_grad(function() return x * 2 end)
    assert.is_false(y.requires_grad)
    do
      local _ <close> = ddp.no_grad()
      assert.is_false((x + 1).requires_grad)
    end
    assert.is_true((x + 1).requires_grad)
  end)

  it("rejects backward on a non-scalar without a gradient, naming the shape", function()
    local x = ddp.ones(2, 3, { requires_grad = true })
    local ok, err = pcall(function() (x * 2):backward() end)
    assert.is_false(ok)
    assert.matches("scalar", err)
    assert.matches("%[2, 3%]", err)
  end)

  it("accepts an assigned .grad of the tensor's shape, dtype and device only, as PyTorch", function()
    local w = ddp.ones(2, 3, { requires_grad = true })
    w.grad = ddp.full({ 2, 3 }, 0.5)
    assert.are.equal(3.0, w.grad:sum():item())
    for _, bad in ipairs {
      { ddp.zeros(3, 2), "assigned grad has shape %[3, 2%] but the tensor has shape %[2, 3%]" },
      { ddp.zeros(2, 3, { dtype = "float64" }), "assigned grad is float64 but the tensor is float32" },
      { ddp.zeros(2, 3):to("bfloat16"), "assigned grad is bfloat16 but the tensor is float32" },
    } do
      local ok, err = pcall(function() w.grad = bad[1] end)
      assert.is_false(ok)
      assert.matches(bad[2], err)
      assert.are.equal(3.0, w.grad:sum():item()) -- the refused one left the old gradient
    end
    w.grad = nil
    assert.is_nil(w.grad)
    -- a gradient then accumulates into what was assigned, as into its own
    w.grad = ddp.full({ 2, 3 }, 1.0)
    ;(w * 2):sum():backward()
    assert.are.equal(18.0, w.grad:sum():item())
  end)

  it("rejects backward on a tensor that does not require grad", function()
    local ok, err = pcall(function() ddp.ones(2):sum():backward() end)
    assert.is_false(ok)
    assert.matches("does not require grad", err)
  end)

  it("detects in-place modification of a saved tensor", function()
    local x = ddp.tensor({ 1.0, 2.0 }, { dtype = "float64", requires_grad = true })
    local y = x * 2
    local z = (y * y):sum()
    ddp.no_grad(function() y:add_(1) end)
    local ok, err = pcall(function() z:backward() end)
    assert.is_false(ok)
    assert.matches("in%-place", err)
  end)

  it("checks a composite expression against finite differences", function()
    local a = gc.smooth_input({ 3, 4 }, 1)
    local b = gc.smooth_input({ 4 }, 2)
    gc.assert_gradcheck(function(x, y)
      return ((x * y + x:exp()) / (y:abs() + 1)):tanh():sum(2)
    end, { a, b })
  end)
end)
