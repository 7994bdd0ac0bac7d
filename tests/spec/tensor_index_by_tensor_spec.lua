-- t[mask], t[positions] and their assignments (tensor_index.lua), against PyTorch's advanced indexing on the same
-- values (positions 1-based here, 0-based there; negative ones from the end in both): masks of the whole shape and
-- of the first dims, position tensors of any shape (0-dim, empty, repeated, negative), values broadcast, the
-- gradients through reads and through writes into a tensor computed from a leaf; the int64 and uint8 paths; errors.
local ddp = require "ddplua"
local R = require "helpers.ref"
local TR = require "helpers.torch_ref"

local function i64(v) return ddp.tensor(v, { dtype = "int64" }) end

describe("indexing by a tensor", function()
  it("reads as PyTorch's advanced indexing, with gradients", function()
    ddp.manual_seed(11)
    local x = ddp.randn({ 4, 3, 5 }, { dtype = "float64" })
    local m3 = x:gt(0.3)                      -- the whole shape
    local m2 = x:select(3, 1):gt(0)           -- the first two dims
    local m1 = ddp.tensor({ true, false, true, true })
    local p2 = i64({ { 2, 4 }, { 1, 2 }, { -1, 3 } })
    local ref = TR.run([==[
import torch
x = T['x'].clone().requires_grad_()
outs = [x[T['m3'].bool()], x[T['m2'].bool()], x[T['m1'].bool()], x[T['p2'] - (T['p2'] > 0).long()], x[2],
        x[torch.tensor([], dtype=torch.long)]]
for i, o in enumerate(outs): OUT['y%d' % i] = o
(sum((o * (i + 1)).sum() for i, o in enumerate(outs))).backward()
OUT['gx'] = x.grad
]==], { x = x, m3 = m3, m2 = m2, m1 = m1, p2 = p2 })
    local xl = x:clone():requires_grad_()
    local outs = { xl[m3], xl[m2], xl[m1], xl[p2], xl[i64(3)], xl[ddp.empty({ 0 }, { dtype = "int64" })] }
    local total = nil
    for i, o in ipairs(outs) do
      R.assert_close(o, R.from(ref["y" .. (i - 1)]), 0, 0, "read " .. i)
      local s = (o * i):sum()
      total = total and total + s or s
    end
    total:backward()
    R.assert_close(xl.grad, R.from(ref.gx), 1e-12, 0, "gradient")
  end)

  it("writes as PyTorch's index assignment, recorded by autograd", function()
    ddp.manual_seed(12)
    local x = ddp.randn({ 5, 4 }, { dtype = "float64" })
    local v4, v2x4 = ddp.randn({ 4 }, { dtype = "float64" }), ddp.randn({ 2, 4 }, { dtype = "float64" })
    local rows = ddp.tensor({ false, true, false, true, false })
    local ref = TR.run([[
import torch
x = T['x'].clone().requires_grad_()
h = x * 2
h[h < -1] = 0.5
h[T['rows'].bool()] = T['v2x4']
h[torch.tensor([0, -1])] = T['v4']
h[torch.tensor([2])] = 7.0
OUT['h'] = h
(h * h).sum().backward()
OUT['gx'] = x.grad
]], { x = x, rows = rows, v4 = v4, v2x4 = v2x4 })
    local xl = x:clone():requires_grad_()
    local h = xl * 2
    h[h:lt(-1)] = 0.5
    h[rows] = v2x4
    h[i64({ 1, -1 })] = v4
    h[i64({ 3 })] = 7
    R.assert_close(h, R.from(ref.h), 0, 0, "values")
    ;(h * h):sum():backward()
    R.assert_close(xl.grad, R.from(ref.gx), 1e-12, 0, "gradient")
    -- without autograd the same writes run in place, on int64 too
    local n = ddp.arange(1, 13):view(4, 3)
    n[n:gt(9)] = 0
    n[i64({ 2 })] = i64({ -1, -2, -3 })
    n[n:select(2, 1):eq(7)] = 70
    assert.same({ { 1, 2, 3 }, { -1, -2, -3 }, { 70, 70, 70 }, { 0, 0, 0 } }, n:tolist())
  end)

  it("names bad keys and values", function()
    local x = ddp.zeros(4, 3)
    R.assert_errors({
      { function() return x[ddp.tensor({ 1.5 })] end, "index: a tensor index must hold int64 positions" },
      { function() return x[ddp.tensor({ true, false })] end, "the mask [2] must have the shape of the tensor [4, 3]" },
      { function() return x[ddp.zeros({ 4, 3, 1 }, { dtype = "uint8" })] end, "the mask [4, 3, 1]" },
      { function() return x[i64({ 5 })] end, "out of range" },
      { function() return x[i64({ -5 })] end, "out of range" },
      { function() return ddp.tensor(3)[i64({ 1 })] end, "cannot index a 0-dimensional tensor by positions" },
      { function() x[i64({ 1 })] = ddp.ones(2) end, "the value [2] cannot be broadcast to the indexed shape [1, 3]" },
      { function() x[x:gt(0)] = "a" end, "the value must be a number or a tensor, got string" },
      { function() x[ddp.tensor({ true, true, false, false })] = ddp.ones(3, 3) end, "indexed shape [2, 3]" },
      { function() return x[{}] end, "tensors are indexed by integer positions, tensors of them, masks" },
    })
  end)
end)
