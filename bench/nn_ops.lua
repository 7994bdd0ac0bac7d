-- The per-op table's ddplua side: forward and forward+backward times of the
-- ops the examples run, at their shapes (float32, one thread unless
-- threads=N), as milliseconds, the median of the runs. bench/torch_nn_ops.py
-- times the same cases (same names, shapes and timing rule) in PyTorch;
-- bench/run.lua runs both alternately and prints them side by side with the
-- bytes/s of the memory-bound ones against this machine's memcpy.
--
--   ./build/bin/ddplua bench/nn_ops.lua [runs=20] [threads=1] [only=substring]
--
-- One line per case: `case=<name>|fwd_ms=<x>|both_ms=<y>|bytes=<n>|memcpy_gbs=<m>`
-- (both_ms is - for ops without a backward; bytes is the forward's memory
-- traffic, inputs read + outputs written, 0 where the op is compute-bound;
-- m is libc memcpy's GB/s, read + written, moving the same bytes on one
-- thread: the bandwidth of the cache level the op's data lives in).
local ddp = require "ddplua"
local core = ddp.core
local F = ddp.nn.F

local cfg = { runs = 20, threads = 1, only = "" }
for _, a in ipairs(arg or {}) do
  local k, v = a:match("^(%w+)=(.*)$")
  if not k or cfg[k] == nil then error("usage: ddplua bench/nn_ops.lua [runs=N] [threads=N] [only=text], got " .. a, 0) end
  cfg[k] = type(cfg[k]) == "number" and math.tointeger(tonumber(v)) or v
end
ddp.set_num_threads(cfg.threads)
ddp.manual_seed(0)

local median_of = dofile((arg and arg[0] or "bench/x.lua"):gsub("[^/]*$", "") .. "median_ms.lua")
local function median_ms(fn) return median_of(ddp, cfg.runs, fn) end

local function leaf(...) return ddp.randn(...):requires_grad_() end
local MB = 1024 * 1024

-- the cases: name, forward function, whether it has a backward, forward bytes
local cases = {}
local function case(name, fwd, opts)
  opts = opts or {}
  cases[#cases + 1] = { name = name, fwd = fwd, bwd = opts.bwd ~= false, bytes = opts.bytes or 0, step = opts.step }
end

do -- GEMMs
  local x, w, b = leaf(64, 784), leaf(1024, 784), leaf(1024)
  case("linear 64x784 -> 1024", function() return F.linear(x, w, b) end)
  local h, w2, b2 = leaf(64, 1024), leaf(1024, 1024), leaf(1024)
  case("linear 64x1024 -> 1024", function() return F.linear(h, w2, b2) end)
  local t, wq, bq = leaf(2048, 128), leaf(384, 128), leaf(384)
  case("linear 2048x128 -> 384 (GPT qkv)", function() return F.linear(t, wq, bq) end)
  local a, c = leaf(1024, 1024), leaf(1024, 1024)
  case("matmul 1024^3", function() return ddp.matmul(a, c) end)
  case("matmul 1024^3 autocast bf16", function()
    local _ <close> = ddp.autocast("bfloat16")
    return ddp.matmul(a, c)
  end)
end

do -- convolutions, norms, pooling at the Fashion-MNIST CNN's shapes (batch 64)
  local x1, w1, b1 = leaf(64, 1, 28, 28), leaf(32, 1, 3, 3), leaf(32)
  local x2, w2, b2 = leaf(64, 32, 14, 14), leaf(64, 32, 3, 3), leaf(64)
  case("conv2d 1->32 3x3 pad 1, 28x28", function() return ddp.conv2d(x1, w1, b1, 1, 1) end)
  case("conv2d 32->64 3x3 pad 1, 14x14", function() return ddp.conv2d(x2, w2, b2, 1, 1) end)
  local xb, g, bb = leaf(64, 32, 28, 28), leaf(32), leaf(32)
  local rm, rv = ddp.zeros(32), ddp.ones(32)
  local nb = 64 * 32 * 28 * 28 * 4
  case("batch_norm train 32ch 28x28", function() return ddp.batch_norm(xb, rm, rv, g, bb, true) end,
    { bytes = 3 * nb })
  case("max_pool2d 2x2 32ch 28x28", function() return ddp.max_pool2d(xb, 2) end, { bytes = nb + nb // 4 })
  -- the CNN's block after each conv, as nn.Sequential runs it (one fused op; training mode)
  local block = ddp.nn.Sequential(ddp.nn.BatchNorm2d(32), ddp.nn.ReLU(), ddp.nn.MaxPool2d(2))
  case("batch_norm+relu+max_pool2d 32ch 28x28", function() return block(xb) end, { bytes = 2 * nb + nb // 4 })
  case("avg_pool2d 2x2 32ch 28x28", function() return ddp.avg_pool2d(xb, 2) end, { bytes = nb + nb // 4 })
  -- the DCGAN example's strided 4x4 layers (batch 64, ngf = ndf = 32, no bias)
  local zg, wg2 = leaf(64, 128, 7, 7), leaf(128, 64, 4, 4)
  case("conv_transpose2d 128->64 4x4 s2 pad 1, 7x7 (DCGAN)", function() return ddp.conv_transpose2d(zg, wg2, nil, 2, 1) end)
  local xd, wd = leaf(64, 32, 14, 14), leaf(64, 32, 4, 4)
  case("conv2d 32->64 4x4 s2 pad 1, 14x14 (DCGAN)", function() return ddp.conv2d(xd, wd, nil, 2, 1) end)
  -- a ResNet's head (global average pooling), and the 3-d layers of examples/video3d's R3D (batch 8, 8 frames)
  local xh = leaf(64, 512, 7, 7)
  case("adaptive_avg_pool2d 1, 512ch 7x7 (ResNet head)", function() return F.adaptive_avg_pool2d(xh, 1) end,
    { bytes = 64 * 512 * 49 * 4 })
  local xv, wv = leaf(8, 16, 8, 28, 28), leaf(16, 16, 3, 3, 3)
  case("conv3d 16->16 3x3x3 pad 1, 8x28x28 (R3D)", function() return F.conv3d(xv, wv, nil, 1, 1) end)
  case("max_pool3d (1, 2, 2) 16ch 8x28x28", function() return F.max_pool3d(xv, { 1, 2, 2 }) end,
    { bytes = 8 * 16 * 8 * 28 * 28 * 5 })
  local xl, wl, bl = leaf(64, 3136), leaf(3136), leaf(3136)
  case("layer_norm 64x3136", function() return ddp.layer_norm(xl, 3136, wl, bl) end, { bytes = 2 * 64 * 3136 * 4 })
  local xg, wg, bg = leaf(2048, 128), leaf(128), leaf(128)
  case("layer_norm 2048x128 (GPT)", function() return ddp.layer_norm(xg, 128, wg, bg) end,
    { bytes = 2 * 2048 * 128 * 4 })
  case("dropout p=0.5 64x3136", function() return ddp.dropout(xl, 0.5) end, { bytes = 2 * 64 * 3136 * 4 })
  local ids, emb = (ddp.rand(64, 32) * 10000):long() + 1, leaf(10000, 128)
  case("embedding 10000x128, 64x32 ids", function() return ddp.embedding(ids, emb) end,
    { bytes = 2 * 64 * 32 * 128 * 4 })
end

do -- softmax family and losses
  local s = leaf(1024, 1024)
  case("softmax 1024x1024", function() return ddp.softmax(s, 2) end, { bytes = 2 * 4 * MB })
  local l = leaf(700, 13939)
  case("log_softmax 700x13939", function() return ddp.log_softmax(l, 2) end, { bytes = 2 * 700 * 13939 * 4 })
  local lg, tg = leaf(2048, 256), (ddp.rand(2048) * 256):long() + 1
  case("cross_entropy 2048x256 (GPT)", function() return F.cross_entropy(lg, tg) end, { bytes = 2048 * 256 * 4 })
  local lm, tm = leaf(64, 10), (ddp.rand(64) * 10):long() + 1
  case("cross_entropy 64x10 (MLP)", function() return F.cross_entropy(lm, tm) end)
  -- a speech recogniser's CTC: 100 steps of 16 utterances over 29 characters (blank first), 30 labels each
  local lc = leaf(100, 16, 29)
  local tc = (ddp.rand(16, 30) * 28):floor():long() + 2
  case("ctc_loss 100x16x29, 30 labels (speech)", function()
    return F.ctc_loss(F.log_softmax(lc, 3), tc, ddp.full({ 16 }, 100):long(), ddp.full({ 16 }, 30):long())
  end)
  -- the VAE example's reconstruction loss (sum over the batch's pixels)
  local pb, tb = ddp.rand(64, 784):requires_grad_(), ddp.rand(64, 784)
  case("binary_cross_entropy 64x784 (VAE)", function() return F.binary_cross_entropy(pb, tb, nil, "sum") end,
    { bytes = 2 * 64 * 784 * 4 })
end

do -- elementwise: activations, broadcasting, reductions, copies
  local x = leaf(1024, 1024)
  for _, name in ipairs({ "relu", "gelu", "tanh", "sigmoid" }) do
    local fn = F[name]
    case(name .. " 1024x1024", function() return fn(x) end, { bytes = 2 * 4 * MB })
  end
  case("leaky_relu 0.2 1024x1024 (DCGAN)", function() return F.leaky_relu(x, 0.2) end, { bytes = 2 * 4 * MB })
  local a, b = leaf(4096, 1024), leaf(1024)
  case("add broadcast 4096x1024 + 1024", function() return a + b end, { bytes = 2 * 16 * MB })
  local m1, m2 = leaf(1024, 1024), leaf(1024, 1024)
  case("mul 1024x1024 * 1024x1024", function() return m1 * m2 end, { bytes = 3 * 4 * MB })
  case("sum 4096x1024", function() return a:sum() end, { bytes = 16 * MB })
  case("sum dim 2 of 4096x1024", function() return a:sum(2) end, { bytes = 16 * MB })
  case("sum dim 1 of 4096x1024", function() return a:sum(1) end, { bytes = 16 * MB })
  case("var 4096x1024", function() return a:var() end, { bytes = 16 * MB })
  case("std dim 2 of 4096x1024", function() return a:std(2) end, { bytes = 16 * MB })
  case("var dim 1 of 4096x1024", function() return a:var(1) end, { bytes = 16 * MB })
  local big = ddp.randn(2048, 2048)
  case("transpose copy 2048x2048", function() return big:t():contiguous() end, { bwd = false, bytes = 2 * 16 * MB })
  case("clone 2048x2048", function() return big:clone() end, { bwd = false, bytes = 2 * 16 * MB })
end

do -- optimizer steps over 1M parameters (4 MiB each of p, grad, state)
  local function opt_case(name, make, arrays)
    local p = ddp.randn(1 << 20):requires_grad_()
    p.grad = ddp.randn(1 << 20) * 1e-3
    local opt = make({ p })
    case(name, function() opt:step() end, { bwd = false, bytes = arrays * 4 * MB })
  end
  -- SGD momentum: read p, g, buf; write p, buf
  opt_case("SGD momentum step, 1M params", function(ps) return ddp.optim.SGD(ps, { lr = 0.01, momentum = 0.9 }) end, 5)
  -- AdamW: read p, g, m, v; write p, m, v
  opt_case("AdamW step, 1M params", function(ps) return ddp.optim.AdamW(ps, { lr = 1e-3 }) end, 7)
end

for _, c in ipairs(cases) do
  if c.name:find(cfg.only, 1, true) then
    local fwd = median_ms(function() return ddp.no_grad(c.fwd) end)
    local both = "-"
    if c.bwd then both = string.format("%.4f", median_ms(function() c.fwd():sum():backward() end)) end
    -- memcpy moving the same bytes (half read, half written): the same
    -- cache level's bandwidth
    local mc = c.bytes > 0 and core._memcpy_gbs(c.bytes // 2, 20) or 0
    print(string.format("case=%s|fwd_ms=%.4f|both_ms=%s|bytes=%d|memcpy_gbs=%.2f", c.name, fwd, both, c.bytes, mc))
  end
end
