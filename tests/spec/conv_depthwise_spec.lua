-- Depthwise and grouped convolutions (groups = channels: MobileNet, EfficientNet, ConvNeXt; groups < channels:
-- ResNeXt; dilated: DeepLab): oneDNN runs them on the CPU since 2026-12-07 (they took im2col + GEMM before), and a
-- depthwise layer's weight gradient of more than 9 taps at stride 1 is ddplua's own dot products
-- (src/backends/cpu/cpu_conv_depthwise.c). Held against PyTorch's F.conv2d with every gradient, against the
-- float64 path (im2col + GEMM), on every kernel set with one thread and two, with Inf and NaN in the input, and
-- against the same layer with the weights unrolled into a dense convolution.
local ddp = require "ddplua"
local R = require "helpers.ref"
local TR = require "helpers.torch_ref"

-- x shape, out channels, kernel {kh, kw}, stride, padding {ph, pw}, dilation, groups, bias
local CASES = {
  { { 2, 6, 13, 11 }, 6, { 5, 5 }, 1, { 2, 2 }, 1, 6, true }, -- 5x5 depthwise, "same"
  { { 3, 4, 17, 20 }, 4, { 7, 7 }, 1, { 3, 3 }, 1, 4, false }, -- ConvNeXt's 7x7
  { { 1, 5, 9, 23 }, 5, { 3, 5 }, 1, { 0, 1 }, 1, 5, true }, -- not square, no padding down the rows
  { { 2, 3, 15, 12 }, 3, { 5, 3 }, 1, { 4, 2 }, 2, 3, true }, -- dilated depthwise
  { { 2, 8, 10, 10 }, 8, { 3, 3 }, 1, { 1, 1 }, 1, 8, true }, -- 3x3 depthwise: oneDNN's
  { { 2, 6, 12, 12 }, 6, { 5, 5 }, 2, { 2, 2 }, 1, 6, true }, -- strided depthwise: oneDNN's
  { { 2, 8, 9, 9 }, 8, { 3, 3 }, 1, { 1, 1 }, 1, 4, true }, -- grouped, 2 channels a group
  { { 2, 32, 9, 7 }, 64, { 3, 3 }, 1, { 1, 1 }, 1, 16, true }, -- grouped, 16 groups of 2 -> 4
  { { 2, 16, 11, 11 }, 16, { 3, 3 }, 1, { 2, 2 }, 2, 1, true }, -- dilated dense
  { { 1, 1, 30, 40 }, 1, { 9, 9 }, 1, { 4, 4 }, 1, 1, true }, -- one channel: depthwise and dense at once
}

local function name_of(c)
  return string.format("x %s, %d out, %dx%d, stride %d, padding %d,%d, dilation %d, groups %d",
    table.concat(c[1], "x"), c[2], c[3][1], c[3][2], c[4], c[5][1], c[5][2], c[6], c[7])
end

local function torch_ref(c, x, w, b, gy)
  return TR.run(string.format([[
import torch.nn.functional as F
x = T['x'].clone().requires_grad_(); w = T['w'].clone().requires_grad_()
b = T['b'].clone().requires_grad_() if %s else None
y = F.conv2d(x, w, b, %d, (%d, %d), %d, %d)
y.backward(T['gy'])
OUT['y'] = y; OUT['gx'] = x.grad; OUT['gw'] = w.grad
if b is not None: OUT['gb'] = b.grad
]], c[8] and "True" or "False", c[4], c[5][1], c[5][2], c[6], c[7]), { x = x, w = w, b = b or ddp.zeros(1), gy = gy })
end

local function run(c, x, w, b, gy)
  local xl, wl = x:clone():requires_grad_(), w:clone():requires_grad_()
  local bl = b and b:clone():requires_grad_() or nil
  local y = ddp.conv2d(xl, wl, bl, c[4], c[5], c[6], c[7])
  y:backward(gy)
  return y, xl.grad, wl.grad, bl and bl.grad
end

local function inputs(c, seed)
  local x = R.randn(c[1], seed, 1)
  local w = R.randn({ c[2], c[1][2] // c[7], c[3][1], c[3][2] }, seed + 1, 0.3)
  local b = c[8] and R.randn({ c[2] }, seed + 2, 1) or nil
  local y = ddp.conv2d(x, w, b, c[4], c[5], c[6], c[7])
  return x, w, b, R.randn(y:size(), seed + 3, 1)
end

describe("depthwise, grouped and dilated convolutions", function()
  R.describe_kernel_sets(_ENV, { 1, 2 }, function()
    for ci, c in ipairs(CASES) do
      it(name_of(c) .. ": float32 against float64 and PyTorch, every gradient", function()
        local x, w, b, gy = inputs(c, 100 * ci)
        local y64, gx64, gw64, gb64 = run(c, x, w, b, gy) -- float64: im2col + GEMM, the reference
        local f = function(t) return t and t:float() end
        local y, gx, gw, gb = run(c, f(x), f(w), f(b), f(gy))
        local what = name_of(c)
        R.assert_close(y, R.from(y64), 2e-5 * y64:abs():max():item(), 1e-4, what .. ": y")
        R.assert_close(gx, R.from(gx64), 2e-5 * gx64:abs():max():item(), 1e-4, what .. ": gx")
        R.assert_close(gw, R.from(gw64), 2e-5 * gw64:abs():max():item(), 1e-4, what .. ": gw")
        if b then R.assert_close(gb, R.from(gb64), 2e-5 * gb64:abs():max():item(), 1e-4, what .. ": gb") end
        local ref = torch_ref(c, f(x), f(w), f(b), f(gy))
        R.assert_close(gw, R.from(ref.gw), 2e-5 * gw64:abs():max():item(), 1e-4, what .. ": gw against PyTorch")
        R.assert_close(gx, R.from(ref.gx), 2e-5 * gx64:abs():max():item(), 1e-4, what .. ": gx against PyTorch")
        if b then R.assert_close(gb, R.from(ref.gb), 2e-5 * gb64:abs():max():item(), 1e-4, what .. ": gb") end
      end)
    end

    it("a depthwise weight gradient over enough channels for two threads, without the input's gradient", function()
      local x = R.randn({ 3, 40, 14, 14 }, 7, 1)
      local w = R.randn({ 40, 1, 7, 7 }, 8, 0.2)
      local gy = R.randn({ 3, 40, 14, 14 }, 9, 1)
      local wl = w:float():requires_grad_()
      ddp.conv2d(x:float(), wl, nil, 1, 3, 1, 40):backward(gy:float())
      local w64 = w:clone():requires_grad_()
      ddp.conv2d(x, w64, nil, 1, 3, 1, 40):backward(gy)
      R.assert_close(wl.grad, R.from(w64.grad), 2e-5 * w64.grad:abs():max():item(), 1e-4, "gw")
    end)
  end)

  it("keeps an Inf or a NaN of the input to the taps that read it, as PyTorch does", function()
    -- no padding: x's last column meets only the last column of taps, its first row only the first row
    local c = { { 1, 2, 9, 12 }, 2, { 5, 5 }, 1, { 0, 0 }, 1, 2, false }
    local x, w, _, gy = inputs(c, 41)
    x = x:float()
    x[1][1][3][12] = math.huge
    x[1][2][1][4] = 0 / 0
    local _, _, gw = run(c, x, w:float(), nil, gy:float())
    local ref = torch_ref(c, x, w:float(), nil, gy:float())
    local want = ref.gw
    -- the same taps are finite, and those equal PyTorch's
    assert.equal(0, gw:isfinite():ne(want:isfinite()):sum():item(), "which taps are finite")
    assert.is_true(gw:isfinite():sum():item() > 0, "some taps stay finite")
    local fin = want:isfinite()
    R.assert_close(gw:masked_fill(fin:logical_not(), 0), R.from(want:masked_fill(fin:logical_not(), 0)), 1e-4, 1e-4,
      "gw")
  end)

  it("gives a depthwise layer the gradient of the dense layer its weights unroll into", function()
    -- a depthwise conv is a dense conv whose weights are zero off the diagonal of channels
    local x = R.randn({ 2, 5, 11, 11 }, 3, 1):float()
    local wd = R.randn({ 5, 1, 5, 5 }, 4, 0.3):float()
    local mask = ddp.eye(5):float():reshape({ 5, 5, 1, 1 })
    local wdl = wd:clone():requires_grad_()
    local wfull = (wd:reshape({ 5, 1, 5, 5 }):expand(5, 5, 5, 5) * mask):clone():requires_grad_()
    local gy = R.randn({ 2, 5, 11, 11 }, 5, 1):float()
    ddp.conv2d(x, wdl, nil, 1, 2, 1, 5):backward(gy)
    ddp.conv2d(x, wfull, nil, 1, 2, 1, 1):backward(gy)
    local diag = (wfull.grad * mask):sum(2, true)
    R.assert_close(wdl.grad, R.from(diag), 1e-4, 1e-4, "depthwise against the dense layer's diagonal")
  end)
end)
