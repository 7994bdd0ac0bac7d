-- The weight and bias gradients of grayscale first layers (one input channel, stride 1, up to 27 taps: the
-- Fashion-MNIST CNN's conv1, LeNet's 5x5): src/backends/cpu/cpu_conv_narrow_grad_w.c on AVX-512, the im2col + GEMM
-- path elsewhere. Held against the float64 path, PyTorch, the path it replaced (core.set_conv_narrow_grad(false)),
-- on every kernel set with one thread and two, with Inf and NaN in the input and the output gradient, odd shapes
-- (an odd number of channels, rows narrower and wider than a vector, dilation, uneven padding) and an empty batch.
local ddp = require "ddplua"
local R = require "helpers.ref"
local TR = require "helpers.torch_ref"
local core = ddp.core

-- x shape, out channels, kernel {kh, kw}, padding {ph, pw}, dilation, bias
local CASES = {
  { { 8, 1, 28, 28 }, 32, { 3, 3 }, { 1, 1 }, 1, true }, -- the CNN's conv1 (two threads' worth of images)
  { { 2, 1, 28, 28 }, 5, { 5, 5 }, { 0, 0 }, 1, true }, -- LeNet's 5x5: taps in blocks of 9, 9, 7; odd channels
  { { 2, 1, 7, 16 }, 3, { 1, 1 }, { 0, 0 }, 1, false }, -- one tap, rows of exactly one vector
  { { 3, 1, 31, 45 }, 5, { 3, 3 }, { 2, 1 }, 2, true }, -- dilated, uneven padding, rows of three vectors
  { { 1, 1, 9, 5 }, 4, { 3, 5 }, { 0, 2 }, 1, true }, -- not square, rows shorter than a vector
  { { 2, 1, 6, 7 }, 2, { 2, 4 }, { 1, 1 }, 1, true }, -- even kernel: one more output row than input
}

local function name_of(c)
  return string.format("x %s, %d out, %dx%d, padding %d,%d, dilation %d%s", table.concat(c[1], "x"), c[2], c[3][1],
    c[3][2], c[4][1], c[4][2], c[5], c[6] and ", bias" or "")
end

local function inputs(c, seed)
  local x = R.randn(c[1], seed, 1)
  local w = R.randn({ c[2], 1, c[3][1], c[3][2] }, seed + 1, 0.3)
  local b = c[6] and R.randn({ c[2] }, seed + 2, 1) or nil
  local y = ddp.conv2d(x, w, b, 1, c[4], c[5])
  return x, w, b, R.randn(y:size(), seed + 3, 1)
end

-- the layer's backward with x as data (no gradient), as a first layer's: gw, gb
local function grads(c, x, w, b, gy)
  local wl = w:clone():requires_grad_()
  local bl = b and b:clone():requires_grad_() or nil
  ddp.conv2d(x, wl, bl, 1, c[4], c[5]):backward(gy)
  return wl.grad, bl and bl.grad
end

local function torch_ref(c, x, w, b, gy)
  return TR.run(string.format([[
import torch.nn.functional as F
w = T['w'].clone().requires_grad_()
b = T['b'].clone().requires_grad_() if %s else None
F.conv2d(T['x'], w, b, 1, (%d, %d), %d).backward(T['gy'])
OUT['gw'] = w.grad
if b is not None: OUT['gb'] = b.grad
]], c[6] and "True" or "False", c[4][1], c[4][2], c[5]), { x = x, w = w, b = b or ddp.zeros(1), gy = gy })
end

local f32 = function(t) return t and t:float() end

describe("the weight gradient of grayscale first layers", function()
  R.describe_kernel_sets(_ENV, { 1, 2 }, function(isa)
    for ci, c in ipairs(CASES) do
      it(name_of(c) .. ": against float64, PyTorch and the GEMM path", function()
        local x, w, b, gy = inputs(c, 50 * ci)
        local gw64, gb64 = grads(c, x, w, b, gy) -- float64: im2col + GEMM, the reference
        local calls = core._conv_narrow_grad_calls()
        local gw, gb = grads(c, f32(x), f32(w), f32(b), f32(gy))
        -- the kernel runs on AVX-512 only; the other kernel sets keep the GEMM path
        assert.equal(isa == "avx512" and 1 or 0, core._conv_narrow_grad_calls() - calls, "narrow kernel calls")
        local what, tol_w = name_of(c), 2e-6 * gw64:abs():max():item()
        R.assert_close(gw, R.from(gw64), tol_w, 1e-5, what .. ": gw")
        if b then R.assert_close(gb, R.from(gb64), 2e-6 * gb64:abs():max():item(), 1e-5, what .. ": gb") end
        local ref = torch_ref(c, f32(x), f32(w), f32(b), f32(gy))
        R.assert_close(gw, R.from(ref.gw), 1e-5 * gw64:abs():max():item(), 1e-4, what .. ": gw against PyTorch")
        if b then R.assert_close(gb, R.from(ref.gb), 1e-5 * gb64:abs():max():item(), 1e-4, what .. ": gb") end
        local was = core.set_conv_narrow_grad(false)
        local ok, gw_old, gb_old = pcall(grads, c, f32(x), f32(w), f32(b), f32(gy))
        core.set_conv_narrow_grad(was)
        assert(ok, gw_old)
        R.assert_close(gw, R.from(gw_old), 1e-5 * gw64:abs():max():item(), 1e-4, what .. ": gw against the GEMM path")
        if b then R.assert_close(gb, R.from(gb_old), 1e-5 * gb64:abs():max():item(), 1e-4, what .. ": gb") end
      end)
    end

    it("gives the input gradient too when x asks for one", function()
      local c = CASES[1]
      local x, w, b, gy = inputs(c, 7)
      local xl, wl, bl = f32(x):requires_grad_(), f32(w):requires_grad_(), f32(b):requires_grad_()
      ddp.conv2d(xl, wl, bl, 1, c[4], c[5]):backward(f32(gy))
      local x64, w64 = x:clone():requires_grad_(), w:clone():requires_grad_()
      ddp.conv2d(x64, w64, b, 1, c[4], c[5]):backward(gy)
      R.assert_close(xl.grad, R.from(x64.grad), 2e-6 * x64.grad:abs():max():item(), 1e-5, "gx")
      R.assert_close(wl.grad, R.from(w64.grad), 2e-6 * w64.grad:abs():max():item(), 1e-5, "gw")
    end)
  end)

  it("keeps an Inf or a NaN of the input to the taps that read it, and a NaN of gy to its channel, as PyTorch", function()
    -- no padding: x's last column meets only the last column of taps, its first row only the first row of taps
    local c = { { 2, 1, 9, 20 }, 3, { 3, 3 }, { 0, 0 }, 1, true }
    local x, w, b, gy = inputs(c, 41)
    x, w, b, gy = f32(x), f32(w), f32(b), f32(gy)
    x[1][1][4][20] = math.huge
    x[2][1][1][7] = 0 / 0
    gy[2][3][5][9] = 0 / 0
    local gw, gb = grads(c, x, w, b, gy)
    local ref = torch_ref(c, x, w, b, gy)
    for _, p in ipairs({ { gw, ref.gw, "gw" }, { gb, ref.gb, "gb" } }) do
      local got, want, what = p[1], p[2], p[3]
      assert.equal(0, got:isfinite():ne(want:isfinite()):sum():item(), what .. ": which entries are finite")
      assert.equal(0, got:isnan():ne(want:isnan()):sum():item(), what .. ": which entries are NaN")
      local fin = want:isfinite()
      R.assert_close(got:masked_fill(fin:logical_not(), 0), R.from(want:masked_fill(fin:logical_not(), 0)), 1e-4,
        1e-4, what)
    end
    assert.is_true(gw:isfinite():sum():item() > 0, "some taps stay finite")
    assert.equal(9, gw[3]:isnan():sum():item(), "channel 3 (NaN in its gy) is NaN at every tap")
  end)

  it("gives zero gradients for an empty batch", function()
    local w = ddp.randn(4, 1, 3, 3):requires_grad_()
    local b = ddp.randn(4):requires_grad_()
    ddp.conv2d(ddp.zeros(0, 1, 10, 10), w, b, 1, 1):sum():backward()
    assert.equal(0, w.grad:abs():sum():item())
    assert.equal(0, b.grad:abs():sum():item())
  end)

  it("takes only a boolean to turn it on or off", function()
    R.assert_errors({
      { function() core.set_conv_narrow_grad("no") end, "boolean expected" },
      { function() core.set_conv_narrow_grad() end, "boolean expected" },
    })
  end)
end)
