-- Batch norm, ReLU and 2-d max pooling in one op (issue 15):
-- core.batch_norm_relu_max_pool2d, BatchNorm:forward_relu_max_pool2d and
-- nn.Sequential's BatchNorm2d + ReLU + MaxPool2d. The fused op keeps
-- neither the normalised output nor the pooling indices (its backward
-- remakes both from x), and must be invisible: output, input gradient,
-- weight and bias gradients and running statistics equal the three ops'
-- bit for bit, on every kernel set the CPU has, at one thread and two, on
-- odd shapes (batch 1, planes no multiple of a vector, channel counts no
-- multiple of 16, overlapping and padded windows, ceil mode), in training
-- and evaluation, with and without affine parameters; float32 gradients
-- agree with the float64 composition; inputs it does not fuse (float64,
-- planes under 64 values) take the three ops.
local ddp = require "ddplua"
local nn = ddp.nn
local R = require "helpers.ref"
local bits = require "helpers.bits"
local core = ddp.core

-- {shape, kernel, stride, padding, ceil_mode}
local CASES = {
  { { 2, 3, 8, 8 }, 2, 2, 0, false },     -- the CNN's window
  { { 1, 5, 9, 11 }, 2, 2, 0, false },    -- batch 1, odd plane: the last row and column unused
  { { 3, 17, 10, 7 }, 3, 2, 1, false },   -- padded 3x3 windows that overlap
  { { 2, 4, 9, 9 }, 3, 1, 0, false },     -- stride 1: an input wins several windows (the scatter adds)
  { { 2, 3, 11, 10 }, 2, 2, 0, true },    -- ceil mode: partial windows at the edge
  { { 2, 6, 28, 28 }, 2, 2, 0, false },   -- the CNN's first layer's planes
}

local function max_diff(a, b) return (a - b):abs():max():item() end

local function run(fused, c, x0, w0, b0, g, training, dtype)
  local shape, k, s, p, ceil = table.unpack(c)
  local C = shape[2]
  local x = x0:clone():requires_grad_()
  local w = w0 and w0:clone():requires_grad_() or nil
  local b = b0 and b0:clone():requires_grad_() or nil
  local rm, rv = R.randn({ C }, 41, 0.5):to(dtype), R.randn({ C }, 42, 0.5):abs():add(0.5):to(dtype)
  local y
  if fused then y = core.batch_norm_relu_max_pool2d(x, rm, rv, w, b, training, 0.1, 1e-5, k, s, p, ceil)
  else y = ddp.max_pool2d(ddp.batch_norm(x, rm, rv, w, b, training, 0.1, 1e-5):relu(), k, s, p, 1, ceil) end
  y:backward(g)
  return { y = y, gx = x.grad, gw = w and w.grad, gb = b and b.grad, rm = rm, rv = rv }
end

local function inputs(c, ci, dtype, affine)
  local shape = c[1]
  local C = shape[2]
  -- an offset mean, so some outputs sit at the ReLU's kink (whole windows of zeros: ties)
  local x = R.randn(shape, 100 + ci, 1.5):add(0.3):to(dtype)
  local w = affine and R.randn({ C }, 200 + ci, 1):to(dtype) or nil
  local b = affine and R.randn({ C }, 300 + ci, 0.5):to(dtype) or nil
  local y = ddp.max_pool2d(x, c[2], c[3], c[4], 1, c[5])
  local g = R.randn(y:size(), 400 + ci, 1):to(dtype)
  return x, w, b, g
end

describe("batch norm + ReLU + max pool fused", function()
  R.describe_kernel_sets(_ENV, { 1, 2 }, function(isa, threads)
    for ci, c in ipairs(CASES) do
      for _, training in ipairs({ true, false }) do
        for _, affine in ipairs({ true, false }) do
          local tag = string.format("%s k%d s%d p%d%s %s%s", table.concat(c[1], "x"), c[2], c[3], c[4],
            c[5] and " ceil" or "", training and "training" or "eval", affine and "" or " no affine")
          it(tag .. ": equals the three ops bit for bit", function()
            local x, w, b, g = inputs(c, ci, "float32", affine)
            local A = run(true, c, x, w, b, g, training, "float32")
            local B = run(false, c, x, w, b, g, training, "float32")
            assert.are.equal("BatchNormReluMaxPoolBackward", A.y.grad_fn)
            assert.are.same(B.y:size(), A.y:size())
            assert.are.equal(0, max_diff(A.y, B.y), "output")
            assert.are.equal(0, max_diff(A.gx, B.gx), "input gradient")
            if affine then
              assert.are.equal(0, max_diff(A.gw, B.gw), "weight gradient")
              assert.are.equal(0, max_diff(A.gb, B.gb), "bias gradient")
            end
            assert.are.equal(0, max_diff(A.rm, B.rm), "running_mean")
            assert.are.equal(0, max_diff(A.rv, B.rv), "running_var")
          end)
        end
      end
    end
  end)

  -- The 2x2 / stride 2 window runs one kernel per plane (cpu_vec_pool2x2_t.h): bit for bit (NaN equal NaN, -0
  -- differs from +0) on planes whose output rows are 7 (half a vector), 17 and 35 (blocks of 16 and a rest)
  -- wide, odd sizes (the last row and column in no window), with NaN, -0 and ties in x and NaN and -0 in the
  -- pooled gradient; eval mode keeps a NaN where it is (training spreads it over the channel's statistics).
  local W2 = { { 2, 4, 14, 14 }, { 1, 3, 6, 70 }, { 2, 3, 33, 35 }, { 3, 2, 8, 8 } }
  local function with_specials(t, every, seed)
    local v = t:reshape(-1):totable()
    for i = seed % every + 1, #v, every do
      local k = (i // every) % 4
      v[i] = k == 0 and 0 / 0 or k == 1 and -0.0 or k == 2 and (v[i - 1] or 0.5) or 0.0
    end
    return ddp.tensor(v):view(table.unpack(t:size()))
  end
  for _, isa in ipairs(R.cpu_kernel_sets()) do
    for si, shape in ipairs(W2) do
      for _, training in ipairs({ true, false }) do
        it(string.format("%s, %s %s: the 2x2 kernel equals the three ops bit for bit with NaN, -0 and ties", isa,
          table.concat(shape, "x"), training and "training" or "eval"), function()
          local prev = core.set_cpu_kernels(isa)
          local ok, err = pcall(function()
            local c = { shape, 2, 2, 0, false }
            local x, w, b, g = inputs(c, 50 + si, "float32", true)
            x = with_specials(x, training and 997 or 13, si)
            g = with_specials(g, 11, si + 1)
            local A = run(true, c, x, w, b, g, training, "float32")
            local B = run(false, c, x, w, b, g, training, "float32")
            assert.are.equal("BatchNormReluMaxPoolBackward", A.y.grad_fn)
            bits.same_bits(A.y, B.y, "output", "the three ops")
            bits.same_bits(A.gx, B.gx, "input gradient", "the three ops")
            bits.same_bits(A.gw, B.gw, "weight gradient", "the three ops")
            bits.same_bits(A.gb, B.gb, "bias gradient", "the three ops")
          end)
          core.set_cpu_kernels(prev)
          assert(ok, err)
        end)
      end
    end
  end

  for _, training in ipairs({ true, false }) do
    it("has float32 gradients close to the float64 three ops (" .. (training and "training" or "eval") .. ")",
      function()
        local c = CASES[3]
        local x, w, b, g = inputs(c, 3, "float64", true)
        local A = run(true, c, x:float(), w:float(), b:float(), g:float(), training, "float32")
        local B = run(false, c, x, w, b, g, training, "float64")
        assert.are.equal("MaxPool2DBackward", B.y.grad_fn) -- float64: the three ops
        R.assert_close(A.y:double(), R.from(B.y), 1e-5, 1e-5, "output")
        R.assert_close(A.gx:double(), R.from(B.gx), 1e-4, 1e-4, "input gradient")
        R.assert_close(A.gw:double(), R.from(B.gw), 1e-4, 1e-4, "weight gradient")
        R.assert_close(A.gb:double(), R.from(B.gb), 1e-4, 1e-4, "bias gradient")
      end)
  end

  it("runs small planes and float64 as the three ops, with their results", function()
    for _, c in ipairs({ { { 2, 3, 6, 6 }, 2, 2, 0, false, "float32" }, { { 2, 3, 8, 8 }, 2, 2, 0, false, "float64" } }) do
      local x, w, b, g = inputs(c, 9, c[6], true)
      local A = run(true, c, x, w, b, g, true, c[6])
      local B = run(false, c, x, w, b, g, true, c[6])
      assert.are.equal("MaxPool2DBackward", A.y.grad_fn)
      assert.are.equal(0, max_diff(A.y, B.y))
      assert.are.equal(0, max_diff(A.gx, B.gx))
    end
  end)

  it("leaves nothing for autograd under no_grad, and gives the same output", function()
    local c = CASES[1]
    local x, w, b = inputs(c, 1, "float32", true)
    local y = ddp.no_grad(function()
      return core.batch_norm_relu_max_pool2d(x, nil, nil, w, b, true, 0.1, 1e-5, 2)
    end)
    assert.is_nil(y.grad_fn)
    assert.are.equal(0, max_diff(y, ddp.max_pool2d(ddp.batch_norm(x, nil, nil, w, b, true):relu(), 2)))
  end)

  it("names a bad window as max_pool2d does", function()
    local x = ddp.randn(2, 3, 8, 8)
    assert.has_error(function() core.batch_norm_relu_max_pool2d(x, nil, nil, nil, nil, true, 0.1, 1e-5, 2, 2, 3) end,
      "max_pool2d: padding 3x3 must be >= 0 and at most half the kernel size 2x2")
    assert.has_error(function() core.batch_norm_relu_max_pool2d(x, nil, nil, nil, nil, true, 0.1, 1e-5) end,
      "batch_norm_relu_max_pool2d: kernel_size is required")
  end)
end)

describe("nn.Sequential with BatchNorm2d, ReLU and MaxPool2d", function()
  -- the specs after this file count live objects (DDP's post-backward hooks): leave this file's garbage collected
  teardown(function() collectgarbage() end)
  local function net()
    ddp.manual_seed(3)
    return nn.Sequential { nn.Conv2d(2, 5, 3, { padding = 1 }), nn.BatchNorm2d(5), nn.ReLU(), nn.MaxPool2d(2),
      nn.Flatten(), nn.Linear(5 * 5 * 4, 3) }
  end

  it("runs one fused call with the modules' own results, in training and in eval mode", function()
    local seq, ref = net(), net()
    local calls = 0
    local orig = nn.BatchNorm2d.forward_relu_max_pool2d
    nn.BatchNorm2d.forward_relu_max_pool2d = function(m, z, p) -- spies on the class (an instance field stops fusion)
      calls = calls + 1
      return orig(m, z, p)
    end
    local x = ddp.randn(4, 2, 10, 9)
    local function by_hand(m, input)
      local h = input
      for i = 1, #m do h = m[i](h) end
      return h
    end
    local ok, err = pcall(function()
      for _, mode in ipairs({ "train", "eval" }) do
        seq[mode](seq)
        ref[mode](ref)
        local a, b = seq(x), by_hand(ref, x)
        assert.are.equal(0, max_diff(a, b))
        a:sum():backward()
        b:sum():backward()
        assert.are.equal(0, max_diff(seq[2].weight.grad, ref[2].weight.grad))
        assert.are.equal(0, max_diff(seq[2].bias.grad, ref[2].bias.grad))
        assert.are.equal(0, max_diff(seq[1].weight.grad, ref[1].weight.grad))
        assert.are.equal(0, max_diff(seq[2].running_mean, ref[2].running_mean))
        assert.are.equal(0, max_diff(seq[2].running_var, ref[2].running_var))
        assert.are.equal(seq[2].num_batches_tracked:item(), ref[2].num_batches_tracked:item())
      end
      ddp.no_grad(function() assert.are.equal(0, max_diff(seq(x), by_hand(ref, x))) end)
    end)
    nn.BatchNorm2d.forward_relu_max_pool2d = orig
    assert(ok, err)
    assert.are.equal(3, calls)
  end)

  it("does not fuse a MaxPool2d subclass, nor a BatchNorm2d whose instance has its own forward_relu", function()
    local Half = nn.MaxPool2d:extend("HalfPool")
    function Half:forward(x) return nn.MaxPool2d.forward(self, x) * 0.5 end
    ddp.manual_seed(5)
    local seq = nn.Sequential { nn.BatchNorm2d(3), nn.ReLU(), Half(2) }
    local x = ddp.randn(2, 3, 8, 8)
    local want = ddp.max_pool2d(ddp.batch_norm(x, nil, nil, nil, nil, true):relu(), 2) * 0.5
    assert.is_true(max_diff(seq(x), want) < 1e-6)
    local seq2 = nn.Sequential { nn.BatchNorm2d(3), nn.ReLU(), nn.MaxPool2d(2) }
    local calls = 0
    seq2[1].forward_relu = function(m, z)
      calls = calls + 1
      return nn.BatchNorm2d.forward_relu(m, z)
    end
    assert.are.equal("MaxPool2DBackward", seq2(x:clone():requires_grad_()).grad_fn)
    assert.are.equal(1, calls)
  end)
end)
