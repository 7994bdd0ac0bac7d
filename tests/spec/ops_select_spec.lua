-- where, masked_fill, tril / triu, gather, scatter / scatter_add, topk:
-- forward against plain-Lua references (float64, float32, int64),
-- gradients against finite differences through strided and broadcast
-- views, PyTorch's values and gradients on the same inputs (1-based
-- positions here, 0-based there), empty tensors and bad arguments.
local ddp = require "ddplua"
local gc = require "helpers.gradcheck"
local R = require "helpers.ref"
local TR = require "helpers.torch_ref"

local function vals(t) return gc.flat_values(t) end

describe("where and masked_fill", function()
  it("select elementwise with broadcasting, numbers taking the other operand's dtype", function()
    local c = ddp.tensor({ { 1, 0, 1 } }):byte()
    local a = ddp.tensor({ { 1.5 }, { 2.5 } }, { dtype = "float64" })
    local b = ddp.tensor({ -1.0, -2.0, -3.0 }, { dtype = "float64" })
    local y = ddp.where(c, a, b)
    assert.are.same({ { 1.5, -2, 1.5 }, { 2.5, -2, 2.5 } }, y:totable())
    assert.are.equal("float64", y:dtype())
    assert.are.same({ 7, 0, 7 }, ddp.where(c:view(3), 7, 0):totable())
    assert.are.equal("int64", ddp.where(c:view(3), 7, 0):dtype())
    assert.are.equal("float32", ddp.where(c:view(3), ddp.ones(3), 0):dtype())
    assert.are.same({ 0, 0, 3 }, ddp.tensor({ 1, 2, 3 }):masked_fill(ddp.tensor({ 1, 2, 3 }):lt(3), 0):totable())
    local x = ddp.arange(6, { dtype = "float32" }):view(2, 3)
    local m = x:masked_fill(ddp.tensor({ 1, 0, 0 }):byte(), -math.huge)
    assert.are.same({ -math.huge, 1, 2, -math.huge, 4, 5 }, vals(m))
  end)

  it("have the finite-difference gradients, to both branches and to a tensor fill value", function()
    local c = ddp.tensor({ { 1, 0, 1, 0 }, { 0, 0, 1, 1 }, { 1, 1, 0, 0 } }):byte()
    gc.assert_gradcheck(function(a, b) return ddp.where(c, a:t(), b:expand(3, 4)) end,
      { gc.smooth_input({ 4, 3 }, 1), gc.smooth_input({ 4 }, 2) })
    gc.assert_gradcheck(function(x, v) return x:masked_fill(c:select(1, 1), v:sum()) * 2 end,
      { gc.smooth_input({ 3, 4 }, 3), gc.smooth_input({ 2 }, 4) })
  end)

  it("match PyTorch", function()
    if not TR.available() then return pending("skipped: /usr/bin/python3 cannot import torch") end
    local a, b = R.randn({ 2, 3, 4 }, 5):requires_grad_(), R.randn({ 3, 1 }, 6):requires_grad_()
    local c = R.randn({ 4 }, 7):gt(0)
    local y = ddp.where(c, a, b)
    local z = y:masked_fill(a:lt(-0.5), 3.25)
    z:backward(R.randn({ 2, 3, 4 }, 8))
    local ref = TR.run([[
a, b = T["a"].requires_grad_(), T["b"].requires_grad_()
y = torch.where(T["c"].bool(), a, b)
z = y.masked_fill(a < -0.5, 3.25)
z.backward(T["g"])
OUT["z"], OUT["ga"], OUT["gb"] = z, a.grad, b.grad
]], { a = a, b = b, c = c, g = R.randn({ 2, 3, 4 }, 8) })
    R.assert_close(z, R.from(ref.z), 0, 0, "forward")
    R.assert_close(a.grad, R.from(ref.ga), 1e-15, 0, "a's gradient")
    R.assert_close(b.grad, R.from(ref.gb), 1e-15, 0, "b's gradient")
  end)

  it("reject bad arguments", function()
    local x = ddp.randn(3)
    R.assert_error(function() ddp.where(x, x, x) end, "where: the condition must be a boolean (uint8)", "float32")
    R.assert_error(function() x:masked_fill(x, 0) end, "masked_fill: the mask must be a boolean")
    R.assert_error(function() x:masked_fill(ddp.ones(2, 3):byte(), 0) end, "masked_fill: the mask of shape [2, 3]",
      "cannot be broadcast to the tensor's shape [3]")
    R.assert_error(function() x:masked_fill(x:gt(0), ddp.ones(2)) end, "a number or a 0-dimensional tensor")
    R.assert_error(function() ddp.where(x:gt(0), ddp.ones(2), x) end, "where", "cannot be broadcast")
    R.assert_error(function() ddp.where(x:gt(0), "a", x) end, "where: argument 2 must be a tensor or a number")
  end)
end)

describe("tril and triu", function()
  -- the reference: elements with j - i <= k (upper: >= k) kept, of the array a
  local function ref(a, k, upper)
    local nd, out = #a.shape, R.array(a.shape)
    R.each_index(a.shape, function(idx, n)
      local d = idx[nd] - idx[nd - 1]
      out.v[n] = ((upper and d >= k) or (not upper and d <= k)) and a.v[n] or 0
    end)
    return out
  end

  it("keep the triangle below (above) diagonal k of the last two dims, any k, batched and strided", function()
    for _, k in ipairs({ 0, 1, -1, 5, -5 }) do
      for _, upper in ipairs({ false, true }) do
        local x = R.randn({ 2, 3, 4 }, 11)
        R.check_forward(function(t) return upper and t:triu(k) or ddp.tril(t, k) end, { x }, ref(R.from(x), k, upper))
        local xt = R.randn({ 2, 4, 3 }, 12)
        R.check_forward(function(t) return upper and t:transpose(2, 3):triu(k) or t:transpose(2, 3):tril(k) end,
          { xt }, ref(R.from(xt:transpose(2, 3)), k, upper))
      end
    end
    assert.are.same({ { 1, 0 }, { 3, 4 } }, ddp.tensor({ { 1, 2 }, { 3, 4 } }):tril():totable())
    assert.are.equal("int64", ddp.tensor({ { 1, 2 }, { 3, 4 } }):triu():dtype())
  end)

  it("have the masked gradient", function()
    gc.assert_gradcheck(function(t) return t:tril(-1) end, { gc.smooth_input({ 3, 4 }, 13) })
    gc.assert_gradcheck(function(t) return t:t():triu(1) end, { gc.smooth_input({ 4, 3 }, 14) })
    gc.assert_gradcheck(function(t) return t:expand(2, 3, 3):triu() end, { gc.smooth_input({ 3, 3 }, 15) })
  end)

  it("take empty tensors and reject 1-d ones", function()
    assert.are.same({ 0, 3 }, ddp.zeros(0, 3):tril():size())
    R.assert_error(function() ddp.ones(3):tril() end, "tril: expected a tensor with at least 2 dimensions")
  end)
end)

describe("gather and scatter", function()
  local x = ddp.arange(12, { dtype = "float64" }):view(3, 4)

  it("gather picks along a dim by 1-based positions, the index no larger than the input elsewhere", function()
    local idx = ddp.tensor({ { 4, 1 }, { 2, 2 } })
    assert.are.same({ { 3, 0 }, { 5, 5 } }, x:gather(2, idx):totable())
    assert.are.same({ { 8, 1 }, { 4, 5 } }, x:gather(1, ddp.tensor({ { 3, 1 }, { 2, 2 } })):totable())
    assert.are.same({ { 3, 0 }, { 5, 5 } }, ddp.gather(x, -1, idx):totable())
    assert.are.same({ { 0, 4, 8 }, { 3, 7, 11 } }, x:t():gather(1, ddp.tensor({ { 1, 1, 1 }, { 4, 4, 4 } })):totable())
  end)

  it("scatter writes and scatter_add accumulates, out of place and in place", function()
    local z = ddp.zeros(2, 4, { dtype = "float64" })
    local idx = ddp.tensor({ { 1, 3, 3 }, { 4, 4, 2 } })
    local src = ddp.tensor({ { 1, 2, 3, 9 }, { 4, 5, 6, 9 } }, { dtype = "float64" })
    assert.are.same({ { 1, 0, 5, 0 }, { 0, 6, 0, 9 } }, z:scatter_add(2, idx, src):totable())
    assert.are.same({ { 1, 0, 3, 0 }, { 0, 6, 0, 5 } }, z:scatter(2, idx, src):totable())
    assert.are.same({ { 7, 0, 7, 0 }, { 0, 7, 0, 7 } }, z:scatter(2, idx, 7):totable())
    assert.are.same({ { 0, 0, 0, 0 }, { 0, 0, 0, 0 } }, z:totable()) -- out of place
    z:scatter_(2, idx, src)
    assert.are.same({ { 1, 0, 3, 0 }, { 0, 6, 0, 5 } }, z:totable())
    z:scatter_add_(2, idx, src)
    assert.are.same({ { 2, 0, 8, 0 }, { 0, 12, 0, 14 } }, z:totable())
    -- one-hot, PyTorch's idiom
    local oh = ddp.zeros(3, 4):scatter_(2, ddp.tensor({ { 2 }, { 4 }, { 1 } }), 1)
    assert.are.same({ { 0, 1, 0, 0 }, { 0, 0, 0, 1 }, { 1, 0, 0, 0 } }, oh:totable())
    local i64 = ddp.zeros({ 3 }, { dtype = "int64" }):scatter_add(1, ddp.tensor({ 1, 1, 3 }), ddp.tensor({ 5, 6, 7 }))
    assert.are.same({ 11, 0, 7 }, i64:totable())
  end)

  it("have the finite-difference gradients through strided views", function()
    local idx = ddp.tensor({ { 3, 1, 3 }, { 2, 2, 1 } })
    gc.assert_gradcheck(function(t) return t:t():gather(2, idx) end, { gc.smooth_input({ 4, 2 }, 21) })
    local uniq = ddp.tensor({ { 3, 1 }, { 2, 4 } }) -- scatter: no repeated targets (the winner is unspecified)
    gc.assert_gradcheck(function(t, s) return t:scatter(2, uniq, s:t()) end,
      { gc.smooth_input({ 2, 4 }, 22), gc.smooth_input({ 3, 2 }, 23) })
    gc.assert_gradcheck(function(t, s) return t:scatter_add(2, idx, s) end,
      { gc.smooth_input({ 2, 4 }, 24), gc.smooth_input({ 2, 3 }, 25) })
  end)

  it("match PyTorch's values and gradients", function()
    if not TR.available() then return pending("skipped: /usr/bin/python3 cannot import torch") end
    local a = R.randn({ 3, 5, 2 }, 26):requires_grad_()
    local s = R.randn({ 3, 4, 2 }, 27):requires_grad_()
    local idx = ddp.tensor({ { { 5, 1 }, { 2, 2 }, { 1, 3 }, { 4, 4 } }, { { 1, 1 }, { 3, 3 }, { 5, 5 }, { 2, 2 } },
      { { 3, 2 }, { 3, 2 }, { 3, 2 }, { 1, 1 } } })
    local g = a:gather(2, idx)
    local y = a:scatter_add(2, idx, s) * 2 + g:sum()
    y:backward(R.randn({ 3, 5, 2 }, 28))
    local ref = TR.run([[
a, s, i = T["a"].requires_grad_(), T["s"].requires_grad_(), T["i"] - 1
g = a.gather(1, i)
y = a.scatter_add(1, i, s) * 2 + g.sum()
y.backward(T["gy"])
OUT["g"], OUT["y"], OUT["ga"], OUT["gs"] = g, y, a.grad, s.grad
]], { a = a, s = s, i = idx, gy = R.randn({ 3, 5, 2 }, 28) })
    R.assert_close(g, R.from(ref.g), 0, 0, "gather")
    R.assert_close(y, R.from(ref.y), 1e-14, 1e-14, "scatter_add")
    R.assert_close(a.grad, R.from(ref.ga), 1e-13, 1e-13, "input gradient")
    R.assert_close(s.grad, R.from(ref.gs), 1e-13, 1e-13, "source gradient")
  end)

  it("name an index out of range with its position, and other bad arguments", function()
    R.assert_error(function() x:gather(2, ddp.tensor({ { 1, 5 } })) end, "gather: index 5 at position (1, 2)",
      "out of range for dimension 2 of size 4 (expected 1..4)")
    R.assert_error(function() x:gather(2, ddp.tensor({ { 0 } })) end, "gather: index 0 at position (1, 1)")
    R.assert_error(function() x:scatter(1, ddp.tensor({ { 4 } }), 1) end, "scatter: index 4 at position (1, 1)")
    local z = ddp.zeros(2, 2)
    R.assert_error(function() z:scatter_(1, ddp.tensor({ { 1, 3 } }), 1) end, "scatter: index 3")
    assert.are.same({ { 0, 0 }, { 0, 0 } }, z:totable()) -- nothing written
    R.assert_error(function() x:gather(1, ddp.tensor({ 1, 2 })) end, "the index (shape [2]) must have as many dimensions")
    R.assert_error(function() x:gather(1, ddp.tensor({ { 1.0 } })) end, "the index must be an int64 tensor")
    R.assert_error(function() x:gather(1, ddp.ones({ 1, 5 }, { dtype = "int64" })) end, "larger than the tensor")
    R.assert_error(function() x:scatter_add(1, ddp.tensor({ { 1 } }), 2) end, "scatter_add: the source must be a tensor")
    R.assert_error(function() x:gather(3, ddp.tensor({ { 1 } })) end, "dimension 3 out of range")
    local w = ddp.zeros(2):requires_grad_()
    R.assert_error(function() w:scatter_(1, ddp.tensor({ 1 }), 1) end, "in-place operation on a tensor that requires grad")
  end)
end)

describe("topk", function()
  it("gives the k largest (smallest) values and their 1-based positions, sorted, any dim", function()
    local x = ddp.tensor({ { 3, 1, 4, 1, 5 }, { 9, 2, 6, 5, 3 } }, { dtype = "float64" })
    local v, i = x:topk(2)
    assert.are.same({ { 5, 4 }, { 9, 6 } }, v:totable())
    assert.are.same({ { 5, 3 }, { 1, 3 } }, i:totable())
    v, i = x:topk(3, 2, false)
    assert.are.same({ { 1, 1, 3 }, { 2, 3, 5 } }, v:totable())
    assert.are.same({ { 2, 4, 1 }, { 2, 5, 4 } }, i:totable()) -- ties: the lower position first
    v, i = ddp.topk(x, 1, { dim = 1 })
    assert.are.same({ { 9, 2, 6, 5, 5 } }, v:totable())
    assert.are.same({ { 2, 2, 2, 2, 1 } }, i:totable())
    v, i = x:t():topk(1, 1, true, true)
    assert.are.same({ { 5, 9 } }, v:totable())
    assert.are.same({ { 5, 1 } }, i:totable())
    local n = ddp.tensor({ 1, 0 / 0, 3 })
    v, i = n:topk(2)
    assert.is_true(vals(v)[1] ~= vals(v)[1]) -- NaN counts as the largest, as in PyTorch
    assert.are.same({ 2, 3 }, i:totable())
    v = ddp.tensor({ 5, 7, 6 }):topk(2)
    assert.are.same({ 7, 6 }, v:totable())
    assert.are.equal("int64", v:dtype())
    assert.are.same({ 2, 0 }, x:topk(0):size())
  end)

  it("matches a sort in float32 and float64 on random rows, and PyTorch", function()
    local x = R.randn({ 4, 37 }, 31)
    for _, dt in ipairs({ "float64", "float32" }) do
      local xd = x:to(dt)
      local v, i = xd:topk(10)
      for r = 1, 4 do
        local row = gc.flat_values(xd[r])
        local sorted = { table.unpack(row) }
        table.sort(sorted, function(a, b) return a > b end)
        local vr, ir = gc.flat_values(v[r]), gc.flat_values(i[r])
        for k = 1, 10 do
          assert.are.equal(sorted[k], vr[k])
          assert.are.equal(row[ir[k]], vr[k])
        end
      end
    end
    if not TR.available() then return pending("skipped: /usr/bin/python3 cannot import torch") end
    local a = R.randn({ 3, 9, 2 }, 32):requires_grad_()
    local v, i = a:topk(4, 2, false)
    v:backward(R.randn({ 3, 4, 2 }, 33))
    local ref = TR.run([[
a = T["a"].requires_grad_()
v, i = a.topk(4, 1, largest=False)
v.backward(T["g"])
OUT["v"], OUT["i"], OUT["ga"] = v, i + 1, a.grad
]], { a = a, g = R.randn({ 3, 4, 2 }, 33) })
    R.assert_close(v, R.from(ref.v), 0, 0, "values")
    R.assert_close(i, R.from(ref.i), 0, 0, "positions")
    R.assert_close(a.grad, R.from(ref.ga), 0, 0, "gradient")
  end)

  it("has the finite-difference gradient", function()
    gc.assert_gradcheck(function(t) return t:topk(3, 1) end, { gc.smooth_input({ 5, 2 }, 34) })
    gc.assert_gradcheck(function(t) return t:t():topk(2) end, { gc.smooth_input({ 4, 3 }, 35) })
  end)

  it("rejects a k out of range and bad options", function()
    local x = ddp.randn(2, 3)
    R.assert_error(function() x:topk(4) end, "topk: k = 4 is out of range for a dimension of size 3")
    R.assert_error(function() x:topk(-1) end, "topk: k = -1")
    R.assert_error(function() x:topk(1, { dims = 1 }) end, "topk: unknown option 'dims'")
    R.assert_error(function() x:topk(1, 1, "yes") end, "topk: largest must be a boolean")
    R.assert_error(function() x:topk(1, 3) end, "dimension 3 out of range")
  end)
end)
