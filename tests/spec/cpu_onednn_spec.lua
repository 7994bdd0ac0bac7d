-- float32 conv2d through oneDNN (src/backends/cpu/cpu_dnnl.c, where the
-- build found libdnnl) against ddplua's own im2col + GEMM and against
-- float64: forward with and without bias, both gradients, strides,
-- padding, 1x1 and wide kernels, few and many channels (the input
-- gradient of few-channel layers stays with col2im, the weight gradient of
-- a single-channel input with im2col + GEMM), one thread and two
-- (the batch split in chunks, an odd batch leaving a smaller last one), and
-- a batch larger than a chunk's buffer budget.
-- Without oneDNN in the build the same calls run ddplua's kernels and the
-- comparison still holds; the first case says which ran.
local ddp = require "ddplua"
local R = require "helpers.ref"
local core = ddp.core

local HAVE = core.onednn_info():match("^oneDNN %d") ~= nil

-- y, gx, gw, gb of conv2d(x, w, b) with upstream gradient g
local function run(x, w, b, g, stride, pad)
  x, w = x:clone():requires_grad_(), w:clone():requires_grad_()
  b = b and b:clone():requires_grad_() or nil
  local y = ddp.conv2d(x, w, b, stride, pad)
  y:backward(g)
  return { y:detach(), x.grad, w.grad, b and b.grad or nil }
end

local NAMES = { "output", "input gradient", "weight gradient", "bias gradient" }

local CASES = {
  -- N, C, O, H, W, k, stride, pad, bias
  { 5, 32, 48, 14, 12, 3, 1, 1, true },
  { 4, 16, 16, 9, 9, 3, 2, 1, false },
  { 3, 1, 8, 28, 28, 3, 1, 1, true },   -- one input channel: the input gradient by col2im
  { 2, 20, 24, 8, 8, 1, 1, 0, true },   -- 1x1
  { 3, 16, 32, 11, 13, 5, 2, 2, true }, -- wide kernel, odd sizes
  -- more images than one chunk's 4 MiB of blocked buffers holds (16 of
  -- 64 x 32 x 32): the forward and the input gradient in chunks of 16, 16
  -- and 5 at any thread count
  { 37, 64, 8, 32, 32, 3, 1, 1, true },
  -- Winograd (3x3, stride 1, 32+ channels): ResNet's 64 -> 64 at 7x7, and
  -- no padding over odd sizes (partial 4x4 output tiles on both edges)
  { 3, 64, 64, 7, 7, 3, 1, 1, false },
  { 2, 32, 48, 9, 11, 3, 1, 0, true },
}
-- the cases whose three calls run Winograd (cpu_dnnl_conv_prim.c's use_winograd)
local WINOGRAD = { [1] = true, [7] = true, [8] = true }

describe("conv2d on the cpu", function()
  after_each(function()
    core.set_onednn(true)
    ddp.set_num_threads(1)
  end)

  it("reports whether oneDNN is in the build", function()
    local info = core.onednn_info()
    assert(HAVE or info:match("not built with oneDNN"), info)
  end)

  for _, threads in ipairs({ 1, 2 }) do
    for ci, c in ipairs(CASES) do
      it(string.format("case %d (%d thread(s)): oneDNN, ddplua's kernels and float64 agree", ci, threads), function()
        ddp.set_num_threads(threads)
        local N, C, O, H, W, k, s, p, bias = table.unpack(c)
        local x = R.randn({ N, C, H, W }, 100 + ci, 1)
        local w = R.randn({ O, C, k, k }, 200 + ci, 1):mul(0.3)
        local b = bias and R.randn({ O }, 300 + ci, 1) or nil
        local oh, ow = (H + 2 * p - k) // s + 1, (W + 2 * p - k) // s + 1
        local g = R.randn({ N, O, oh, ow }, 400 + ci, 1)
        local ref = run(x, w, b, g, s, p) -- float64: ddplua's reference path
        local function f32(on)
          core.set_onednn(on)
          return run(x:float(), w:float(), b and b:float() or nil, g:float(), s, p)
        end
        local before, wino = core._onednn_calls(), core._onednn_winograd_calls()
        local dn = f32(true)
        local used = core._onednn_calls() - before
        wino = core._onednn_winograd_calls() - wino
        local own = f32(false)
        assert.equal(before + used, core._onednn_calls(), "oneDNN ran with set_onednn(false)")
        -- forward and the two backwards (C < 16: the input gradient is col2im's;
        -- C = 1: the weight gradient is im2col + GEMM's)
        local want = 1 + (C >= 16 and 1 or 0) + (C > 1 and 1 or 0)
        if HAVE then assert.equal(want, used, "oneDNN calls") else assert.equal(0, used) end
        assert.equal(HAVE and WINOGRAD[ci] and 3 or 0, wino, "Winograd calls")
        for i = 1, 4 do
          if ref[i] then
            local scale = ref[i]:abs():max():item()
            R.assert_close(dn[i], R.from(ref[i]), 2e-5 * scale, 1e-5, NAMES[i] .. " (oneDNN) vs float64")
            R.assert_close(own[i], R.from(ref[i]), 2e-5 * scale, 1e-5, NAMES[i] .. " (own) vs float64")
          end
        end
      end)
    end
  end

  it("starts no OpenMP threads: oneDNN computes on the thread that calls it", function()
    -- a fresh process (this one may have started OpenMP's threads already):
    -- its thread count before and after a convolution's first (primitive
    -- creating) call; a primitive created with OpenMP's default thread
    -- count ran on a second OpenMP thread beside the pool's
    local io_util = require "helpers.io_util"
    local path = os.tmpname()
    io_util.write(path, string.format("package.path = %q\npackage.cpath = %q\n", package.path, package.cpath) .. [[
      local ddp = require "ddplua"
      ddp.set_num_threads(1)
      local function threads()
        local f = assert(io.open("/proc/self/status"))
        local n = tonumber(f:read("a"):match("Threads:%s+(%d+)"))
        f:close()
        return n
      end
      ddp.matmul(ddp.randn(64, 64), ddp.randn(64, 64))
      local before, calls = threads(), ddp.core._onednn_calls()
      local x, w = ddp.randn(8, 32, 14, 14):requires_grad_(), ddp.randn(64, 32, 3, 3):requires_grad_()
      ddp.conv2d(x, w, nil, 1, 1):sum():backward()
      print(string.format("threads %d %d calls %d", before, threads(), ddp.core._onednn_calls() - calls))
    ]])
    local p = assert(io.popen("lua5.4 " .. path .. " 2>&1"))
    local out = p:read("a")
    p:close()
    os.remove(path)
    local before, after, calls = out:match("threads (%d+) (%d+) calls (%d+)")
    assert(before, "the child printed: " .. out)
    if HAVE then assert(tonumber(calls) > 0, "the convolution did not run through oneDNN") end
    assert.equal(tonumber(before), tonumber(after))
  end)

  it("runs 3x3 stride-1 convolutions of 32+ channels by Winograd, direct after set_conv_winograd(false)", function()
    local x = R.randn({ 4, 32, 10, 10 }, 501, 1):float()
    local w = R.randn({ 32, 32, 3, 3 }, 502, 1):float():mul(0.2)
    local g = R.randn({ 4, 32, 10, 10 }, 503, 1):float()
    local ref = run(x:double(), w:double(), nil, g:double(), 1, 1)
    local function calls(on)
      local was = core.set_conv_winograd(on)
      local before = core._onednn_winograd_calls()
      local out = run(x, w, nil, g, 1, 1)
      core.set_conv_winograd(was)
      return out, core._onednn_winograd_calls() - before
    end
    local wg, nw = calls(true)
    local direct, nd = calls(false)
    assert.equal(HAVE and 3 or 0, nw)
    assert.equal(0, nd)
    for i = 1, 3 do
      local scale = ref[i]:abs():max():item()
      R.assert_close(wg[i], R.from(ref[i]), 2e-5 * scale, 1e-5, NAMES[i] .. " (Winograd) vs float64")
      R.assert_close(direct[i], R.from(ref[i]), 2e-5 * scale, 1e-5, NAMES[i] .. " (direct) vs float64")
    end
    -- a 16-channel or a strided layer stays direct
    local before = core._onednn_winograd_calls()
    run(R.randn({ 2, 16, 8, 8 }, 504, 1):float(), R.randn({ 16, 16, 3, 3 }, 505, 1):float(), nil,
      R.randn({ 2, 16, 8, 8 }, 506, 1):float(), 1, 1)
    run(R.randn({ 2, 32, 8, 8 }, 507, 1):float(), R.randn({ 32, 32, 3, 3 }, 508, 1):float(), nil,
      R.randn({ 2, 32, 4, 4 }, 509, 1):float(), 2, 1)
    assert.equal(before, core._onednn_winograd_calls())
    assert.has_error(function() core.set_conv_winograd("yes") end)
  end)

  it("leaves a Winograd primitive whose scratchpad would pass 64 MiB to direct (512 channels' weight gradient)",
    function()
    -- one thread: the weight gradient's one chunk of 8 images wants 84 MiB of Winograd scratch
    ddp.set_num_threads(1)
    local x = R.randn({ 8, 512, 7, 7 }, 511, 1):float()
    local w = R.randn({ 512, 512, 3, 3 }, 512, 1):float():mul(0.02)
    local g = R.randn({ 8, 512, 7, 7 }, 513, 1):float()
    local before = core._onednn_winograd_calls()
    local out = run(x, w, nil, g, 1, 1)
    -- the forward and the input gradient by Winograd, the weight gradient direct
    assert.equal(HAVE and 2 or 0, core._onednn_winograd_calls() - before)
    local ref = run(x:double(), w:double(), nil, g:double(), 1, 1)
    for i = 1, 3 do
      local scale = ref[i]:abs():max():item()
      R.assert_close(out[i], R.from(ref[i]), 2e-5 * scale, 1e-5, NAMES[i] .. " vs float64")
    end
  end)

  it("caches a primitive per shape: repeated calls give the same result", function()
    local x, w = ddp.randn(6, 16, 10, 10), ddp.randn(8, 16, 3, 3)
    local a = ddp.conv2d(x, w, nil, 1, 1)
    for _ = 1, 3 do
      local b = ddp.conv2d(x, w, nil, 1, 1)
      R.assert_close(b, R.from(a), 0, 0, "repeat")
    end
  end)
end)
