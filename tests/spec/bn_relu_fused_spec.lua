-- Batch norm followed by ReLU in one pass (issue 15): ddp.batch_norm(...,
-- "relu"), BatchNorm:forward_relu and nn.Sequential's BatchNorm + ReLU.
-- The fused op must be invisible: its output, input gradient, weight and
-- bias gradients and running statistics equal the two ops' bit for bit
-- (the backward recomputes the ReLU's mask from x with the forward's own
-- kernels), on every kernel set the CPU has, at one thread and two, on odd
-- shapes (batch 1, planes that are no multiple of a vector, channel counts
-- that are no multiple of 16, 3-D input, planes below the fusing threshold
-- that take the composed path), in training and evaluation, with and
-- without affine parameters; against a plain-Lua float64 reference; and
-- by finite differences in float64.
local ddp = require "ddplua"
local nn = ddp.nn
local R = require "helpers.ref"
local N = require "helpers.ref_nn"
local gc = require "helpers.gradcheck"
local core = ddp.core

-- planes of 81, 64 (the threshold, batch 1), 77, 130 (3-D), 9 (composed)
local SHAPES = { { 2, 3, 9, 9 }, { 1, 5, 8, 8 }, { 3, 17, 7, 11 }, { 2, 4, 130 }, { 4, 6, 3, 3 } }

local function plane(shape)
  local p = 1
  for d = 3, #shape do p = p * shape[d] end
  return p
end

local function max_diff(a, b) return (a - b):abs():max():item() end

-- relu(batch_norm(x)) fused or as the two ops; returns y, the gradients
-- and the running statistics after one call
local function run(fused, x0, w0, b0, g, training, dtype)
  local C = x0:size(2)
  local x = x0:clone():requires_grad_()
  local w = w0 and w0:clone():requires_grad_() or nil
  local b = b0 and b0:clone():requires_grad_() or nil
  local rm, rv = R.randn({ C }, 41, 0.5):to(dtype), R.randn({ C }, 42, 0.5):abs():add(0.5):to(dtype)
  local y
  if fused then y = ddp.batch_norm(x, rm, rv, w, b, training, 0.1, 1e-5, "relu")
  else y = ddp.batch_norm(x, rm, rv, w, b, training, 0.1, 1e-5):relu() end
  y:backward(g)
  return { y = y, gx = x.grad, gw = w and w.grad, gb = b and b.grad, rm = rm, rv = rv }
end

describe("batch norm + ReLU fused", function()
  R.describe_kernel_sets(_ENV, { 1, 2 }, function(isa, threads)
    for si, shape in ipairs(SHAPES) do
      for _, dtype in ipairs({ "float32", "float64" }) do
        for _, training in ipairs({ true, false }) do
          for _, affine in ipairs({ true, false }) do
            local tag = string.format("%s %s %s%s", table.concat(shape, "x"), dtype,
              training and "training" or "eval", affine and "" or " no affine")
            it(tag .. ": equals batch_norm + relu bit for bit", function()
              local C = shape[2]
              -- an offset mean, so some outputs sit near the ReLU's kink
              local x = R.randn(shape, 100 + si, 1.5):add(0.3):to(dtype)
              local w = affine and R.randn({ C }, 200 + si, 1):to(dtype) or nil
              local b = affine and R.randn({ C }, 300 + si, 0.5):to(dtype) or nil
              local g = R.randn(shape, 400 + si, 1):to(dtype)
              local A = run(true, x, w, b, g, training, dtype)
              local B = run(false, x, w, b, g, training, dtype)
              assert.are.equal(0, max_diff(A.y, B.y), "output")
              assert.are.equal(0, max_diff(A.gx, B.gx), "input gradient")
              if affine then
                assert.are.equal(0, max_diff(A.gw, B.gw), "weight gradient")
                assert.are.equal(0, max_diff(A.gb, B.gb), "bias gradient")
              end
              assert.are.equal(0, max_diff(A.rm, B.rm), "running_mean")
              assert.are.equal(0, max_diff(A.rv, B.rv), "running_var")
              -- planes of >= 64 values run fused, smaller ones as the two ops
              local want = plane(shape) >= 64 and "BatchNormReluBackward" or "ReluBackward"
              assert.are.equal(want, A.y.grad_fn)
            end)
          end
        end
      end
    end
  end)

  it("matches a plain-Lua float64 reference (output, and zero gradient where the output is clamped)", function()
    local shape = { 3, 4, 9, 10 }
    local x64 = R.randn(shape, 7, 2)
    local w, b = R.randn({ 4 }, 8, 1), R.randn({ 4 }, 9, 1)
    local ref = N.batch_norm(R.from(x64), nil, nil, R.from(w), R.from(b), true)
    for k = 1, #ref.v do ref.v[k] = math.max(ref.v[k], 0) end
    local x = x64:clone():requires_grad_()
    local y = ddp.batch_norm(x, nil, nil, w, b, true, 0.1, 1e-5, "relu")
    R.assert_close(y:detach(), ref, 1e-12, 1e-12, "float64 output")
    local y32 = ddp.batch_norm(x64:float(), nil, nil, w:float(), b:float(), true, 0.1, 1e-5, "relu")
    R.assert_close(y32, ref, 2e-5, 2e-5, "float32 output")
    -- d(sum y)/dx through the clamped outputs: the plain op's gradient
    -- with the mask applied by hand
    y:sum():backward()
    local x2 = x64:clone():requires_grad_()
    local z = ddp.batch_norm(x2, nil, nil, w, b, true)
    z:backward(z:gt(0):double())
    assert.is_true(max_diff(x.grad, x2.grad) < 1e-12)
  end)

  for _, training in ipairs({ true, false }) do
    it("passes finite differences in float64 (" .. (training and "training" or "eval") .. ")", function()
      local x = R.randn({ 2, 3, 8, 9 }, 11, 1):add(0.2):requires_grad_()
      local w, b = R.randn({ 3 }, 12, 1):requires_grad_(), R.randn({ 3 }, 13, 0.3):requires_grad_()
      local rm, rv = R.randn({ 3 }, 14, 0.3), R.randn({ 3 }, 15, 0.3):abs():add(0.5)
      local ok, msg = gc.gradcheck(function(xx, ww, bb)
        return ddp.batch_norm(xx, rm:clone(), rv:clone(), ww, bb, training, 0.1, 1e-5, "relu")
      end, { x, w, b })
      assert(ok, msg)
    end)
  end

  it("rejects an activation other than relu", function()
    local x = ddp.randn(2, 3, 8, 8)
    assert.has_error(function() ddp.batch_norm(x, nil, nil, nil, nil, true, 0.1, 1e-5, "gelu") end,
      'batch_norm: the fused activation must be "relu" or nil, got "gelu"')
  end)
end)

describe("nn.Sequential with BatchNorm followed by ReLU", function()
  local function net()
    ddp.manual_seed(3)
    return nn.Sequential { nn.Conv2d(2, 5, 3, { padding = 1 }), nn.BatchNorm2d(5), nn.ReLU(), nn.MaxPool2d(2) }
  end

  it("runs one fused call with the modules' own results, in training and in eval mode", function()
    local seq, ref = net(), net()
    local calls = 0
    seq[2].forward_relu = function(m, z) -- spies on this instance only
      calls = calls + 1
      return nn.BatchNorm2d.forward_relu(m, z)
    end
    local x = ddp.randn(4, 2, 10, 9)
    local function by_hand(m, input) return m[4](m[3](m[2](m[1](input)))) end
    for _, mode in ipairs({ "train", "eval" }) do
      seq[mode](seq)
      ref[mode](ref)
      local a, b = seq(x), by_hand(ref, x)
      assert.are.equal(0, max_diff(a, b))
      a:sum():backward()
      b:sum():backward()
      assert.are.equal(0, max_diff(seq[2].weight.grad, ref[2].weight.grad))
      assert.are.equal(0, max_diff(seq[1].weight.grad, ref[1].weight.grad))
      assert.are.equal(0, max_diff(seq[2].running_mean, ref[2].running_mean))
      assert.are.equal(seq[2].num_batches_tracked:item(), ref[2].num_batches_tracked:item())
    end
    assert.are.equal(2, calls)
  end)

  it("does not fuse a BatchNorm2d subclass with its own forward", function()
    local Scaled = nn.BatchNorm2d:extend("ScaledBN")
    function Scaled:forward(x) return nn.BatchNorm2d.forward(self, x) * 2 end
    ddp.manual_seed(5)
    local seq = nn.Sequential { Scaled(3), nn.ReLU() }
    local x = ddp.randn(2, 3, 8, 8)
    local want = (ddp.batch_norm(x, nil, nil, nil, nil, true) * 2):relu()
    assert.is_true(max_diff(seq(x), want) < 1e-6)
  end)
end)
