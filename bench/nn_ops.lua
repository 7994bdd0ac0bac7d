-- Forward and forward+backward times of the layer ops at the shapes of the
-- Fashion-MNIST CNN example (batch 64, float32, one BLAS thread), printed
-- as milliseconds (median of the runs). bench/torch_nn_ops.py times the
-- same ops in PyTorch; run both in one session and compare:
--   ./build/bin/ddplua bench/nn_ops.lua
--   /usr/bin/python3 bench/torch_nn_ops.py
local ddp = require "ddplua"
ddp.set_num_threads(1)
ddp.manual_seed(0)

local RUNS = tonumber(arg and arg[1]) or 20

local function median_ms(fn)
  -- warm up: BLAS initialisation, blocks for the allocator cache
  for _ = 1, 5 do fn() end
  local t = {}
  for i = 1, RUNS do
    -- free the previous run's tensors into the allocator cache first
    -- (untimed), as PyTorch frees them at once: the figure is the op's
    -- steady-state cost, not the page faults of fresh memory
    collectgarbage()
    local t0 = ddp.clock()
    fn()
    t[i] = (ddp.clock() - t0) * 1e3
  end
  table.sort(t)
  return t[(RUNS + 1) // 2]
end

local function leaf(...) return ddp.randn(...):requires_grad_() end

local x1, w1, b1 = leaf(64, 1, 28, 28), leaf(32, 1, 3, 3), leaf(32)
local x2, w2, b2 = leaf(64, 32, 14, 14), leaf(64, 32, 3, 3), leaf(64)
local xb, g, bb = leaf(64, 32, 28, 28), leaf(32), leaf(32)
local rm, rv = ddp.zeros(32), ddp.ones(32)
local xl, wl, bl = leaf(64, 3136), leaf(3136), leaf(3136)
local ids, emb
ids = (ddp.rand(64, 32) * 10000):long() + 1
emb = leaf(10000, 128)

local cases = {
  { "conv2d 1->32 3x3 pad 1, 28x28", function() return ddp.conv2d(x1, w1, b1, 1, 1) end },
  { "conv2d 32->64 3x3 pad 1, 14x14", function() return ddp.conv2d(x2, w2, b2, 1, 1) end },
  { "batch_norm train 32ch 28x28", function() return ddp.batch_norm(xb, rm, rv, g, bb, true) end },
  { "max_pool2d 2x2 32ch 28x28", function() return ddp.max_pool2d(xb, 2) end },
  { "avg_pool2d 2x2 32ch 28x28", function() return ddp.avg_pool2d(xb, 2) end },
  { "layer_norm 3136", function() return ddp.layer_norm(xl, 3136, wl, bl) end },
  { "dropout p=0.5 64x3136", function() return ddp.dropout(xl, 0.5) end },
  { "embedding 10000x128, 64x32 ids", function() return ddp.embedding(ids, emb) end },
}

print(string.format("%-34s %10s %14s", "op", "fwd ms", "fwd+bwd ms"))
for _, c in ipairs(cases) do
  local fwd = median_ms(function() return ddp.no_grad(c[2]) end)
  local both = median_ms(function() c[2]():sum():backward() end)
  print(string.format("%-34s %10.3f %14.3f", c[1], fwd, both))
end
