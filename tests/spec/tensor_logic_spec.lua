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

describe("sort, comparisons and small helpers", function()
  it("sort and argsort match PyTorch's stable sort: ties, NaN, both orders, any dim, empty and 0-dim", function()
    if not TR.available() then return pending("skipped: /usr/bin/python3 cannot import torch") end
    ddp.manual_seed(8)
    local x = (ddp.randn(4, 9) * 2):round() -- many ties
    x[2][3] = 0 / 0
    x[3][1] = math.huge
    local i = ddp.tensor({ { 3, 1, 2, 1 }, { 0, 0, -5, 9 } })
    local got = {}
    got.v1, got.p1 = x:sort()
    got.v2, got.p2 = x:sort(2, true)
    got.v3, got.p3 = x:sort({ dim = 1, descending = false })
    got.a4 = x:argsort(1, true)
    got.iv, got.ip = i:sort(2)
    local ref = TR.run([[
x, i = T["x"], T["i"]
OUT["v1"], OUT["p1"] = x.sort(stable=True)
OUT["v2"], OUT["p2"] = x.sort(dim=1, descending=True, stable=True)
OUT["v3"], OUT["p3"] = x.sort(dim=0, stable=True)
OUT["a4"] = x.sort(dim=0, descending=True, stable=True)[1]
OUT["iv"], OUT["ip"] = i.sort(dim=1, stable=True)
for k in ("p1", "p2", "p3", "a4", "ip"): OUT[k] = OUT[k] + 1
]], { x = x, i = i })
    for k, v in pairs(got) do
      local a, b = v:double():reshape(-1):totable(), ref[k]:double():reshape(-1):totable()
      assert.are.equal(#b, #a, k)
      for j = 1, #b do
        assert.is_true(a[j] == b[j] or (a[j] ~= a[j] and b[j] ~= b[j]), string.format("%s[%d]: %s vs %s", k, j, a[j], b[j]))
      end
    end
    -- rows split between threads, the heap (k small) and the whole-row sort (k large): the one-thread result
    local big = (ddp.randn(300, 257) * 3):round()
    big[7][9] = 0 / 0
    local one = {}
    for _, threads in ipairs({ 1, 2 }) do
      ddp.set_num_threads(threads)
      local tv, tp = big:topk(5, 2)
      local sv, sp = big:sort(2, true)
      local cv, cp = big:topk(200, 1, false)
      local r = { tp, sp, cp, tv, sv, cv }
      if threads == 1 then one = r end
      for k = 1, 3 do assert.are.equal(0, r[k]:ne(one[k]):sum():item(), "positions " .. k) end
      for k = 4, 6 do assert.is_true(r[k]:equal(one[k]) or r[k]:isnan():any():item() == 1, "values " .. k) end
    end
    ddp.set_num_threads(1)
    local e, ep = ddp.zeros(0, 3):sort(1)
    assert.are.same({ 0, 3 }, e:size())
    assert.are.same({ 0, 3 }, ep:size())
    local s, sp = ddp.tensor(2.5):sort()
    assert.are.same({ 2.5, 1 }, { s:item(), sp:item() })
    -- the gradient flows to the sorted positions
    local g = ddp.tensor({ 3, 1, 2 }, { dtype = "float64" }):requires_grad_()
    local v = g:sort()
    v:backward(ddp.tensor({ 10, 20, 30 }, { dtype = "float64" }))
    assert.are.same({ 30, 10, 20 }, g.grad:totable())
    R.assert_error(function() x:sort(3) end, "sort: dim 3 is out of range")
    R.assert_error(function() x:sort({ dims = 1 }) end, "sort: unknown option 'dims'")
    R.assert_error(function() x:sort(1, "yes") end, "sort: descending must be a boolean")
  end)

  it("isclose, allclose, equal and count_nonzero match PyTorch", function()
    if not TR.available() then return pending("skipped: /usr/bin/python3 cannot import torch") end
    local a = ddp.tensor({ 1, 1, math.huge, math.huge, 0 / 0, 0 / 0, 1e-9, 100, 1 }, { dtype = "float64" })
    local b = ddp.tensor({ 1 + 1e-6, 1.1, math.huge, -math.huge, 0 / 0, 1, 0, 100.001, math.huge }, { dtype = "float64" })
    local got = { c = a:isclose(b):long(), cn = a:isclose(b, { equal_nan = true }):long(),
      ct = a:isclose(b, { rtol = 0.2, atol = 0 }):long(), nz = a:count_nonzero(),
      nz2 = ddp.tensor({ { 0, 1 }, { 2, 0 }, { 0, 0 } }):count_nonzero(1) }
    local ref = TR.run([==[
a, b = T["a"], T["b"]
OUT["c"] = a.isclose(b).long()
OUT["cn"] = a.isclose(b, equal_nan=True).long()
OUT["ct"] = a.isclose(b, rtol=0.2, atol=0).long()
OUT["nz"] = a.count_nonzero()
OUT["nz2"] = torch.tensor([[0, 1], [2, 0], [0, 0]]).count_nonzero(0)
]==], { a = a, b = b })
    for k, v in pairs(got) do assert.are.same(ref[k]:totable(), v:totable(), k) end
    assert.is_true(ddp.allclose(ddp.ones(3), ddp.ones(3) * (1 + 1e-7)))
    assert.is_false(ddp.allclose(ddp.ones(3), ddp.ones(3) * 1.01))
    assert.is_true(ddp.allclose(a:narrow(1, 5, 1), a:narrow(1, 5, 1), { equal_nan = true }))
    assert.is_true(ddp.equal(ddp.tensor({ 1, 2 }), ddp.tensor({ 1, 2 })))
    assert.is_false(ddp.equal(ddp.tensor({ 1, 2 }), ddp.tensor({ { 1, 2 } })))
    assert.is_false(ddp.equal(a, a)) -- NaN equals nothing, as torch.equal
    R.assert_error(function() ddp.isclose(a, b, { tol = 1 }) end, "isclose: unknown option 'tol'")
    R.assert_error(function() ddp.isclose(a, b, { rtol = -1 }) end, "isclose: rtol and atol must be non-negative")
  end)

  it("clamp_min, clamp_max and new_zeros/new_ones/new_full", function()
    local x = ddp.tensor({ -2, 0.5, 3, 0 / 0 }, { dtype = "float64" })
    local lo, hi = x:clamp_min(0):totable(), ddp.clamp_max(x, 1):totable()
    assert.are.same({ 0, 0.5, 3 }, { lo[1], lo[2], lo[3] })
    assert.are.same({ -2, 0.5, 1 }, { hi[1], hi[2], hi[3] })
    assert.is_true(lo[4] ~= lo[4] and hi[4] ~= hi[4])
    local n = x:new_full({ 2, 2 }, 7)
    assert.are.same({ "float64", { 2, 2 }, 7 }, { n:dtype(), n:size(), n[1][2]:item() })
    assert.are.equal("float64", x:new_zeros({ 3 }):dtype())
    assert.are.equal("float32", x:new_ones({ 3 }, { dtype = "float32" }):dtype())
    assert.are.same({ 1, 1 }, ddp.tensor({ 5 }):new_ones({ 2 }):totable())
    R.assert_error(function() x:clamp_min("0") end, "clamp_min: expected a number as the bound, got string")
    R.assert_error(function() ddp.clamp_max(x, nil) end, "clamp_max: expected a number as the bound, got nil")
  end)

  it("run the usual PyTorch top-p (nucleus) filter, ported line by line", function()
    if not TR.available() then return pending("skipped: /usr/bin/python3 cannot import torch") end
    ddp.manual_seed(3)
    local logits = ddp.randn(4, 50) * 2
    local sorted, idx = logits:sort(2, true)
    local remove = ddp.softmax(sorted, 2):cumsum(2):gt(0.9)
    remove = ddp.cat({ ddp.zeros(4, 1):byte(), remove:narrow(2, 1, 49) }, 2) -- keep the first past the threshold
    local out = logits:masked_fill(ddp.zeros(4, 50):byte():scatter(2, idx, remove), -math.huge)
    local ref = TR.run([[
l = T["l"]
s, i = torch.sort(l, descending=True, dim=-1)
r = torch.softmax(s, -1).cumsum(-1) > 0.9
r[..., 1:] = r[..., :-1].clone(); r[..., 0] = False
OUT["o"] = l.masked_fill(torch.zeros_like(l, dtype=torch.bool).scatter(-1, i, r), float("-inf"))
OUT["lse"] = torch.logsumexp(OUT["o"], -1)
]], { l = logits })
    assert.is_true(out:equal(ref.o))
    R.assert_close(out:logsumexp(2), R.from(ref.lse), 1e-6, 1e-6, "logsumexp over the kept logits")
    assert.are.equal(0, out:isnan():any():item())
  end)
end)
