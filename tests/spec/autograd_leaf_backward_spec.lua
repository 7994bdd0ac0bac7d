-- backward() straight on a leaf, or on an op that hands its input back
-- unchanged (so the "output" is the leaf itself): the engine once released
-- the root gradient twice there, freeing the caller's gradient tensor (x:
-- backward(g) then print(g) read freed memory) or the .grad it had just
-- stored (s:backward() left s.grad dangling). Each case reuses the freed
-- sizes afterwards, so a dangling tensor shows other values (and the ASan
-- build reports the use after free).
local ddp = require "ddplua"

-- allocations of the sizes just freed: the caching allocator hands the
-- same blocks back
local function churn(n)
  for _ = 1, 8 do
    local z = ddp.full({ n }, -7.0)
    z = nil
  end
  collectgarbage()
end

local function values(t) return t:totable() end

describe("backward on a leaf", function()
  it("leaves the caller's gradient tensor intact", function()
    local x = ddp.randn(4):requires_grad_()
    local g = ddp.ones(4)
    x:backward(g)
    churn(4)
    assert.are.same({ 1, 1, 1, 1 }, values(g))
    assert.are.same({ 1, 1, 1, 1 }, values(x.grad))
    x:backward(g) -- accumulates
    churn(4)
    assert.are.same({ 1, 1, 1, 1 }, values(g))
    assert.are.same({ 2, 2, 2, 2 }, values(x.grad))
  end)

  it("keeps the implicit gradient of a 0-dim leaf as its .grad", function()
    local s = ddp.tensor(2.0):requires_grad_()
    s:backward()
    churn(1)
    assert.are.equal(1.0, s.grad:item())
    s:backward()
    assert.are.equal(2.0, s.grad:item())
  end)

  it("keeps gradients intact through ops that return their input unchanged", function()
    local cases = {
      { "eval-mode dropout", function(x) return ddp.dropout(x, 0.5, false) end },
      { "to(same dtype)", function(x) return x:to("float32") end },
      { "contiguous", function(x) return x:contiguous() end },
      { "cpu", function(x) return x:cpu() end },
      { "t() on 1-d", function(x) return x:t() end },
    }
    for _, case in ipairs(cases) do
      local x = ddp.randn(3):requires_grad_()
      local g = ddp.full({ 3 }, 2.0)
      case[2](x):backward(g)
      churn(3)
      assert.are.same({ 2, 2, 2 }, values(g), case[1])
      assert.are.same({ 2, 2, 2 }, values(x.grad), case[1])
      local s = ddp.tensor(3.0):requires_grad_()
      case[2](s):backward()
      churn(1)
      assert.are.equal(1.0, s.grad:item(), case[1])
    end
  end)
end)
