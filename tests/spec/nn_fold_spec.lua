-- F.unfold, F.fold, nn.Unfold, nn.Fold (src/ops/unfold.c, lua/ddplua/nn/fold.lua): the convolutions' im2col and
-- col2im as ops, each the other's gradient. Held against PyTorch's F.unfold / F.fold with their gradients over
-- kernel, dilation, padding and stride pairs, batched and unbatched, float32 and float64; finite differences;
-- fold(unfold(x)) as x times each pixel's block count; bfloat16 against float32; the modules' printing; and the
-- errors PyTorch gives for bad sizes.
local ddp = require "ddplua"
local R = require "helpers.ref"
local TR = require "helpers.torch_ref"
local gc = require "helpers.gradcheck"
local F = ddp.nn.F
local nn = ddp.nn

-- x shape, kernel, dilation, padding, stride
local CASES = {
  { { 2, 3, 5, 6 }, { 2, 3 }, 1, 1, 2 },
  { { 1, 2, 7, 7 }, 3, 1, 0, 1 },
  { { 3, 1, 9, 8 }, { 3, 2 }, { 2, 1 }, { 2, 0 }, { 1, 3 } },
  { { 4, 5, 6 }, 2, 1, 0, 2 }, -- unbatched
  { { 2, 4, 4, 4 }, 4, 1, 0, 1 }, -- one block
  { { 2, 2, 3, 3 }, 1, 1, 2, 1 }, -- padding wider than the kernel: blocks of padding only
}

local function py(v)
  if type(v) == "table" then return "(" .. v[1] .. ", " .. v[2] .. ")" end
  return tostring(v)
end

describe("F.unfold and F.fold", function()
  R.describe_kernel_sets(_ENV, { 1, 2 }, function()
    for ci, c in ipairs(CASES) do
      local what = string.format("x %s, kernel %s, dilation %s, padding %s, stride %s", table.concat(c[1], "x"),
        py(c[2]), py(c[3]), py(c[4]), py(c[5]))
      it(what .. ": unfold and fold and their gradients as PyTorch's", function()
        for _, dt in ipairs({ "float64", "float32" }) do
          local x = R.randn(c[1], 10 * ci, 1):to(dt)
          local xl = x:clone():requires_grad_()
          local cols = F.unfold(xl, c[2], c[3], c[4], c[5])
          local gcols = R.randn(cols:size(), 10 * ci + 1, 1):to(dt)
          cols:backward(gcols)
          local H, W = c[1][#c[1] - 1], c[1][#c[1]]
          local cl = gcols:clone():requires_grad_()
          local y = F.fold(cl, { H, W }, c[2], c[3], c[4], c[5])
          local gy = R.randn(y:size(), 10 * ci + 2, 1):to(dt)
          y:backward(gy)
          local ref = TR.run(string.format([[
import torch.nn.functional as F
x = T['x'].clone().requires_grad_()
cols = F.unfold(x, %s, %s, %s, %s) if x.dim() == 4 else F.unfold(x.unsqueeze(0), %s, %s, %s, %s)[0]
cols.backward(T['gcols'])
c = T['gcols'].clone().requires_grad_()
y = F.fold(c, (%d, %d), %s, %s, %s, %s)
y.backward(T['gy'])
OUT['cols'] = cols; OUT['gx'] = x.grad; OUT['y'] = y; OUT['gc'] = c.grad
]], py(c[2]), py(c[3]), py(c[4]), py(c[5]), py(c[2]), py(c[3]), py(c[4]), py(c[5]), H, W, py(c[2]), py(c[3]),
            py(c[4]), py(c[5])), { x = x, gcols = gcols, gy = gy })
          local tol = dt == "float64" and 1e-12 or 1e-5
          R.assert_close(cols, R.from(ref.cols), 0, 0, dt .. " unfold") -- a copy: exact
          R.assert_close(xl.grad, R.from(ref.gx), tol, tol, dt .. " unfold's gradient")
          R.assert_close(y, R.from(ref.y), tol, tol, dt .. " fold")
          R.assert_close(cl.grad, R.from(ref.gc), 0, 0, dt .. " fold's gradient")
        end
      end)
    end

    it("fold(unfold(x)) is x times the number of blocks covering each pixel", function()
      local x = R.randn({ 2, 3, 11, 9 }, 5, 1):float()
      local k, d, p, s = { 3, 2 }, { 1, 2 }, 1, { 2, 1 }
      local back = F.fold(F.unfold(x, k, d, p, s), { 11, 9 }, k, d, p, s)
      local count = F.fold(F.unfold(ddp.ones(1, 1, 11, 9), k, d, p, s), { 11, 9 }, k, d, p, s)
      R.assert_close(back, R.from(x * count), 1e-5, 1e-5, "fold(unfold(x))")
      assert.is_true(count:max():item() > 1, "some pixels are in several blocks")
    end)
  end)

  it("has the gradients finite differences give", function()
    gc.assert_gradcheck(function(x) return F.unfold(x, { 2, 3 }, { 2, 1 }, 1, { 1, 2 }) end,
      { gc.smooth_input({ 2, 2, 6, 7 }, 3) })
    gc.assert_gradcheck(function(c) return F.fold(c, { 5, 6 }, 2, 1, 0, 1) end, { gc.smooth_input({ 2, 8, 20 }, 4) })
  end)

  it("runs bfloat16 as float32 rounded (a copy one way, sums the other)", function()
    local x = R.randn({ 2, 3, 8, 8 }, 9, 1):to("bfloat16")
    local u = F.unfold(x, 3, 1, 1, 1)
    assert.equal("bfloat16", u:dtype())
    R.assert_close(u:float(), R.from(F.unfold(x:float(), 3, 1, 1, 1)), 0, 0, "bfloat16 unfold")
    local f = F.fold(u, 8, 3, 1, 1, 1)
    R.assert_close(f:float(), R.from(F.fold(u:float(), 8, 3, 1, 1, 1)), 0.02, 0.01, "bfloat16 fold")
  end)

  it("takes an options table after the positional settings and empty batches", function()
    local x = R.randn({ 2, 3, 6, 6 }, 2, 1)
    R.assert_close(F.unfold(x, 3, { padding = 1, stride = 2 }), R.from(F.unfold(x, 3, 1, 1, 2)), 0, 0, "options")
    assert.same({ 0, 27, 9 }, F.unfold(ddp.zeros(0, 3, 6, 6), 3, { padding = 1, stride = 2 }):size())
    assert.same({ 0, 3, 6, 6 }, F.fold(ddp.zeros(0, 27, 9), 6, 3, { padding = 1, stride = 2 }):size())
  end)

  it("refuses bad sizes and settings, naming them", function()
    R.assert_error(function() F.fold(ddp.randn(2, 12, 11), { 4, 5 }, 2) end,
      "expected size of input's dimension 2 to match the calculated number of sliding blocks 3 * 4 = 12, but got " ..
      "input.size(2)=11")
    R.assert_error(function() F.fold(ddp.randn(2, 13, 12), { 4, 5 }, 2) end,
      "divisible by the product of kernel_size, but got input.size(1)=13")
    R.assert_error(function() F.unfold(ddp.randn(2, 3, 2, 2), 3) end, "leaves no sliding block")
    R.assert_error(function() F.unfold(ddp.randn(3, 4), 2) end, "expected a 3-D (unbatched) or 4-D (batched) input")
    R.assert_error(function() F.fold(ddp.randn(3, 4, 5, 6), 4, 2) end, "expected a 2-D (unbatched) or 3-D")
    R.assert_error(function() F.unfold(ddp.randn(1, 1, 4, 4), 0) end, "kernel_size must be a positive integer")
    R.assert_error(function() F.unfold(ddp.randn(1, 1, 4, 4), 2, { stride = 0 }) end, "stride must be a positive")
    R.assert_error(function() F.unfold(ddp.randn(1, 1, 4, 4), 2, { padding = -1 }) end, "padding")
    R.assert_error(function() F.unfold(ddp.randn(1, 1, 4, 4), 2, { strides = 1 }) end, "strides")
    R.assert_error(function() F.unfold(ddp.randint(0, 3, { 1, 1, 4, 4 }), 2) end, "floating point")
    R.assert_error(function() F.fold(ddp.randn(1, 4, 9), { 0, 4 }, 2) end, "output_size")
    R.assert_error(function() F.unfold({}, 2) end, "tensor")
    R.assert_error(function() ddp.core.fold2d(ddp.randn(1, 4, 4), 3, { math.maxinteger, 2 }) end,
      "kernel_size (9223372036854775807, 2) is too large")
    R.assert_error(function() ddp.core.unfold2d(ddp.randn(1, 1, 4, 4), math.maxinteger) end, "no sliding block")
    -- a stride past the input leaves the one block at the start, as in PyTorch
    assert.same({ 1, 4, 1 }, ddp.core.unfold2d(ddp.randn(1, 1, 4, 4), 2, 1, 0, math.maxinteger):size())
  end)
end)

describe("nn.Unfold and nn.Fold", function()
  it("print as PyTorch's and run F.unfold / F.fold", function()
    local u, f = nn.Unfold({ 2, 3 }, 1, 1, 2), nn.Fold({ 4, 5 }, 2)
    assert.equal("Unfold(kernel_size=(2, 3), dilation=1, padding=1, stride=2)", tostring(u))
    assert.equal("Fold(output_size=(4, 5), kernel_size=2, dilation=1, padding=0, stride=1)", tostring(f))
    assert.equal("Unfold(kernel_size=3, dilation=1, padding=1, stride=2)",
      tostring(nn.Unfold(3, { padding = 1, stride = 2 })))
    local x = R.randn({ 2, 3, 5, 6 }, 1, 1)
    R.assert_close(u(x), R.from(F.unfold(x, { 2, 3 }, 1, 1, 2)), 0, 0, "Unfold")
    local c = R.randn({ 2, 8, 12 }, 2, 1)
    R.assert_close(f(c), R.from(F.fold(c, { 4, 5 }, 2)), 0, 0, "Fold")
    assert.equal(0, #u:parameters())
    R.assert_error(function() nn.Unfold(2, 1, 0, 1, 5) end, "too many arguments")
  end)
end)
