-- index_select: rows of a dimension picked by 1-based positions, forward
-- against a plain Lua reference, gradient against finite differences
-- (repeated positions accumulate), and the errors.
local ddp = require "ddplua"
local gc = require "helpers.gradcheck"

describe("index_select", function()
  local x = ddp.arange(12, { dtype = "float64" }):view(3, 4)

  it("picks rows along dimension 1 and 2, from a Lua list or an int64 tensor", function()
    assert.are.same({ { 8, 9, 10, 11 }, { 0, 1, 2, 3 }, { 8, 9, 10, 11 } }, x:index_select(1, { 3, 1, 3 }):totable())
    assert.are.same({ { 3, 1 }, { 7, 5 }, { 11, 9 } }, x:index_select(2, ddp.tensor({ 4, 2 })):totable())
    assert.are.same({ { 3, 1 }, { 7, 5 }, { 11, 9 } }, x:index_select(-1, { 4, 2 }):totable())
    assert.are.same({ 0, 4 }, { x:index_select(1, {}):size(1), x:index_select(1, {}):size(2) })
  end)

  it("matches finite differences, repeated positions accumulating", function()
    local a = gc.smooth_input({ 4, 3 }, 3)
    gc.assert_gradcheck(function(t) return t:index_select(1, { 2, 4, 2, 1 }) end, { a })
    local b = gc.smooth_input({ 3, 5 }, 4)
    gc.assert_gradcheck(function(t) return t:transpose(1, 2):index_select(2, { 3, 3 }) end, { b })
    local s = x:clone():requires_grad_()
    s:index_select(1, { 2, 2, 2 }):sum():backward()
    assert.are.same({ { 0, 0, 0, 0 }, { 3, 3, 3, 3 }, { 0, 0, 0, 0 } }, s.grad:totable())
  end)

  it("names a position out of range, a wrong index type and a bad dimension", function()
    local ok, err = pcall(function() return x:index_select(1, { 1, 4 }) end)
    assert.is_false(ok)
    assert.matches("index 4 at position 2 is out of range 1..3", err)
    ok, err = pcall(function() return x:index_select(1, { 0 }) end)
    assert.is_false(ok)
    assert.matches("index 0 at position 1 is out of range", err)
    ok, err = pcall(function() return x:index_select(1, ddp.tensor({ 1.0, 2.0 })) end)
    assert.is_false(ok)
    assert.matches("1%-d int64 tensor, got float32", err)
    ok, err = pcall(function() return x:index_select(1, { 1.5 }) end)
    assert.is_false(ok)
    assert.matches("position 1 of the index list is not an integer", err)
    ok, err = pcall(function() return x:index_select(3, { 1 }) end)
    assert.is_false(ok)
    assert.matches("dimension 3 out of range", err)
  end)
end)
