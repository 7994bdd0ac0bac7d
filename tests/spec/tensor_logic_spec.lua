-- isnan, isinf, isfinite, any, all, logical_not/and/or, logsumexp and bmm (lua/ddplua/tensor_logic.lua) against
-- PyTorch on the same values (NaN, +-inf, integers, empty tensors, broadcasting), logsumexp's gradient against
-- finite differences and PyTorch, and the errors.
local ddp = require "ddplua"
local R = require "helpers.ref"
local TR = require "helpers.torch_ref"
local gc = require "helpers.gradcheck"

local function bools(t) return t:long() end -- uint8 truth values, compared as integers with PyTorch's bool as long

describe("truth-value ops and logsumexp", function()
  it("match PyTorch on specials, integers, empty tensors and broadcasting", function()
    if not TR.available() then return pending("skipped: /usr/bin/python3 cannot import torch") end
    local x = ddp.tensor({ { 1, 0 / 0, math.huge, 0 }, { -math.huge, 0, 2, -0.0 }, { 3, 4, 5, 6 } }, { dtype = "float32" })
    local i = ddp.tensor({ { 0, 2 }, { 3, 0 } })
    local e = ddp.zeros(0, 3)
    local got = {
      nan = bools(x:isnan()), inf = bools(x:isinf()), fin = bools(x:isfinite()), any = bools(x:any()),
      all2 = bools(x:all(2)), any1k = bools(x:any(1, true)), lnot = bools(x:logical_not()),
      land = bools(x:logical_and(x:narrow(1, 3, 1))), lor = bools(x:logical_or(ddp.zeros(1, 4))),
      iany = bools(i:any(2)), iall = bools(i:all()), inan = bools(i:isnan()), ifin = bools(i:isfinite()),
      eall = bools(e:all(1)), eany = bools(e:any()), lse = x:logsumexp(2), lse1 = x:narrow(1, 3, 1):logsumexp(2, true),
    }
    local ref = TR.run([[
x, i, e = T["x"], T["i"], T["e"]
b = lambda t: t.long()
OUT.update(nan=b(x.isnan()), inf=b(x.isinf()), fin=b(x.isfinite()), any=b(x.any()), all2=b(x.all(1)),
           any1k=b(x.any(0, keepdim=True)), lnot=b(x.logical_not()), land=b(x.logical_and(x[2:3])),
           lor=b(x.logical_or(torch.zeros(1, 4))), iany=b(i.any(1)), iall=b(i.all()), inan=b(i.isnan()),
           ifin=b(i.isfinite()), eall=b(e.all(0)), eany=b(e.any()), lse=torch.logsumexp(x, 1),
           lse1=torch.logsumexp(x[2:3], 1, keepdim=True))
]], { x = x, i = i, e = e })
    for k, v in pairs(got) do
      assert.are.same(ref[k]:size(), v:size(), k .. ": shape")
      local a, b = v:double():reshape(-1):totable(), ref[k]:double():reshape(-1):totable()
      for j = 1, #a do
        local same = a[j] == b[j] or (a[j] ~= a[j] and b[j] ~= b[j]) or math.abs(a[j] - b[j]) <= 1e-6 * math.abs(b[j])
        assert.is_true(same, string.format("%s[%d]: %s vs PyTorch %s", k, j, tostring(a[j]), tostring(b[j])))
      end
    end
  end)

  it("logsumexp: large and infinite rows, several dims, its gradient", function()
    local big = ddp.tensor({ { 1000, 1000 }, { -math.huge, -math.huge }, { -math.huge, 0 }, { math.huge, 1 } },
      { dtype = "float64" })
    local r = big:logsumexp(2):totable()
    assert.is_true(math.abs(r[1] - (1000 + math.log(2))) < 1e-12)
    assert.are.same({ -math.huge, 0, math.huge }, { r[2], r[3], r[4] })
    local x = ddp.randn(2, 3, 4, { dtype = "float64" })
    local want = x:exp():sum({ 2, 3 }):log()
    R.assert_close(x:logsumexp({ 2, 3 }), R.from(want), 1e-14, 1e-13, "two dims")
    assert.are.same({ 2, 1, 1 }, x:logsumexp({ 2, 3 }, true):size())
    assert.are.equal("float32", ddp.tensor({ 1, 2 }):logsumexp(1):dtype()) -- integers: float32, as PyTorch
    gc.assert_gradcheck(function(t) return t:logsumexp(2) end, { gc.smooth_input({ 3, 5 }, 41) })
    gc.assert_gradcheck(function(t) return t:logsumexp({ 1, 3 }, true) end, { gc.smooth_input({ 2, 3, 2 }, 42) })
    -- its gradient is the softmax
    local y = ddp.randn(4, 6):requires_grad_()
    y:logsumexp(2):sum():backward()
    R.assert_close(y.grad, R.from(ddp.softmax(y:detach(), 2)), 1e-6, 1e-6, "softmax")
  end)

  it("bmm is matmul of two batches, refusing other shapes", function()
    local a, b = ddp.randn(3, 2, 4, { dtype = "float64" }), ddp.randn(3, 4, 5, { dtype = "float64" })
    local c = ddp.bmm(a, b)
    for k = 1, 3 do R.assert_close(c[k], R.from(a[k]:matmul(b[k])), 1e-14, 1e-13, "batch " .. k) end
    R.assert_error(function() ddp.bmm(ddp.randn(2, 3), ddp.randn(3, 2)) end, "bmm: expected [B, n, m] and [B, m, p]",
      "[2, 3]")
    R.assert_error(function() ddp.bmm(ddp.randn(2, 3, 4), ddp.randn(3, 4, 5)) end, "[2, 3, 4] and [3, 4, 5]")
    R.assert_error(function() ddp.bmm(ddp.randn(2, 3, 4), ddp.randn(2, 3, 5)) end, "bmm: expected")
    R.assert_error(function() ddp.isnan(3) end, "isnan: expected a tensor, got number")
    R.assert_error(function() ddp.randn(2):any(3) end, "any: dim 3 is out of range for a 1-dimensional tensor")
    R.assert_error(function() ddp.randn(2):logsumexp() end, "logsumexp: expected dim")
    R.assert_error(function() ddp.randn(2):logical_and(1) end, "logical_and: expected a tensor as the second operand")
  end)
end)
