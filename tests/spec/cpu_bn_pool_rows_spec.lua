-- The float32 row kernels of the CNN's batch norm and max pooling (issue 15):
-- batch norm's statistics in one pass over memory (each row's mean and
-- squared deviations in float lanes, merged per channel in double), its
-- backward sums in float lanes against a float-rounded mean (corrected
-- exactly), and the max-pool backward split over planes (each plane zeroed
-- and scattered on its own). Each against plain-Lua float64 references on
-- the same float32-rounded values, on every kernel set the CPU has, at one
-- thread and two, on odd shapes: batch 1, rows shorter than one vector,
-- rows of several 1024-value blocks with a partial vector, channel counts
-- that are no multiple of 16, and means far from zero.
local ddp = require "ddplua"
local R = require "helpers.ref"
local N = require "helpers.ref_nn"
local core = ddp.core

local kernels = R.cpu_kernel_sets

-- N, C, H, W, offset: rows of 35 (two vectors and a tail), 1023, 2115
-- (two full blocks and a partial vector), 3 (no full vector)
local SHAPES = {
  { 1, 3, 5, 7, 0 },
  { 4, 17, 33, 31, 50 },
  { 2, 5, 45, 47, -300 },
  { 7, 19, 1, 3, 1000 },
}

-- float64 values rounded to float32 (so the reference sees the float32 inputs)
local function rounded(shape, seed, scale, offset)
  return R.randn(shape, seed, scale):add(offset):float():double()
end

describe("batch norm and max-pool row kernels (float32)", function()
  R.describe_kernel_sets(_ENV, { 1, 2 }, function(isa, threads)

    for si, s in ipairs(SHAPES) do
      local tag = table.concat(s, "x", 1, 4) .. " offset " .. s[5]
      it("batch_norm_stats " .. tag .. ": mean and variance of float64", function()
        local x64 = rounded({ s[1], s[2], s[3], s[4] }, 500 + si, 2, s[5])
        local rm, rv = N.channel_stats(R.from(x64))
        local m32, v32 = core.batch_norm_stats(x64:float())
        for c = 1, s[2] do
          assert.near(rm[c], m32[c]:item(), 1e-6 * (math.abs(rm[c]) + 1), "mean of channel " .. c)
          assert.near(rv[c], v32[c]:item(), 2e-6 * rv[c], "variance of channel " .. c)
        end
      end)

      it("batch_norm training forward and backward " .. tag .. ": float32 against float64", function()
        local shape = { s[1], s[2], s[3], s[4] }
        local x64 = rounded(shape, 600 + si, 2, s[5])
        local w64, b64 = R.randn({ s[2] }, 700 + si, 1):float():double(), R.randn({ s[2] }, 800 + si, 1)
        -- (the saved mean is float32, as PyTorch's: an upstream gradient of
        -- mean 1 would add (mean - mean32) * count to the weight gradient)
        local g64 = R.randn(shape, 900 + si, 1):float():double()
        local function run(x, w, b, g)
          x, w, b = x:clone():requires_grad_(), w:clone():requires_grad_(), b:clone():requires_grad_()
          local y = ddp.batch_norm(x, nil, nil, w, b, true)
          y:backward(g)
          return { y:detach(), x.grad, w.grad, b.grad }
        end
        local A = run(x64, w64, b64:float():double(), g64)
        local B = run(x64:float(), w64:float(), b64:float(), g64:float())
        for k, what in ipairs({ "output", "input gradient", "weight gradient", "bias gradient" }) do
          local scale = A[k]:abs():max():item()
          R.assert_close(B[k], R.from(A[k]), 2e-5 * scale, 2e-5, what)
        end
      end)
    end

    for ki, k in ipairs({ { 2, 2, 0 }, { 3, 2, 1 }, { 3, 1, 1 } }) do
      it(string.format("max_pool2d backward (kernel %d, stride %d, padding %d): float32 against float64", k[1],
        k[2], k[3]), function()
        for _, shape in ipairs({ { 1, 3, 9, 7 }, { 3, 19, 14, 15 } }) do
          -- few distinct values: ties, and overlapping windows whose
          -- gradients add up in one element
          local x64 = R.randn(shape, 1000 + ki, 1):mul(2):long():double()
          local a, b = x64:clone():requires_grad_(), x64:float():requires_grad_()
          local ya = ddp.max_pool2d(a, k[1], k[2], k[3])
          local yb = ddp.max_pool2d(b, k[1], k[2], k[3])
          local g = R.randn(ya:size(), 1100 + ki, 1):float():double()
          ya:backward(g)
          yb:backward(g:float())
          R.assert_close(yb:detach(), R.from(ya:detach()), 0, 0, "output")
          R.assert_close(b.grad, R.from(a.grad), 1e-6, 1e-6, "input gradient")
        end
      end)
    end
  end, kernels())
end)
