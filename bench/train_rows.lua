-- The training rows of `make bench` (bench/run.lua loads this file): the
-- examples as a user runs them, start to end, each beside the same recipe
-- in PyTorch in the same run, at 1 and 2 processes, under /usr/bin/time -v
-- for the peak RSS of the largest process (a rank; the launcher and
-- mp.spawn's parent are smaller).
--
-- Each entry is {group = <bench/run.lua's only= group>, run = function(ctx)}.
-- The process counts are ctx.nprocs ({1, 2}; {1} under BENCH_QUICK).
-- - MLP: examples/fashion_mnist/train.lua, ctx.mlp_epochs (5) epochs, against
--   bench/torch_fashion_mnist.py: epoch 5's samples/s (goal >= 2x), epoch 5
--   against epoch 1 (goal: within 10%: denormals and allocator growth show
--   as a slowdown), the whole run's seconds, the peak RSS (goal <= 1/2).
-- - CNN: the same example with model=cnn (BatchNorm), `cnn_epochs` epochs
--   (default 2: two passes over the 60000 images), the last epoch's
--   samples/s (goal >= 2x), the peak RSS (goal <= 1/2).
-- - GPT: examples/gpt/train.lua against ../shared/peers/torch_gpt.py (500
--   steps at 1 process, 250 at 2; the peer runs 1 thread per rank
--   (OPENBLAS_NUM_THREADS=1 with it: see bench/run.lua), so at 1 process
--   both are pinned to one core with taskset, which ddplua's thread count
--   follows; ddplua ignores OMP_NUM_THREADS): tokens/s (goal
--   >= 2x), peak RSS (goal <= 1/2), at 1 process also the example with attention=manual (the peer's
--   attention op by op, as a port of its code runs; a figure); and autocast=bfloat16 against its own
--   float32 on a CPU with AMX (goal >= 2x at a validation loss within 0.05; with AVX512-BF16 and no AMX the same
--   row as a figure, its loss still checked).
-- - LSTM: examples/lstm_lm/train.lua (1 epoch over the first 100000 words
--   of the corpus, 20000 under BENCH_QUICK) against
--   examples/lstm_lm/torch_lm.py on the corpus.safetensors it wrote (the
--   same tokens): tokens/s (goal >= 1.5x), peak RSS; at 1 process both on
--   one core (taskset, as for GPT: the peer runs 1 thread), at 2 each rank
--   takes its share of the batch columns (the peer: --nproc 2, DDP on gloo).
-- - ViT and U-Net: below, beside DCGAN.
-- - ResNet: examples/resnet/train.lua (width 16, 32x32, 3 epochs over 2000
--   CSV images) against bench/torch_resnet.py (torchvision's BasicBlock,
--   the same layout, data and optimizer): the median epoch's images/s
--   (goal >= 2x), peak RSS; at 2 processes both under DDP with plain
--   BatchNorm (sync_bn=false: PyTorch 1.13's SyncBatchNorm needs CUDA).
-- (GPT, LSTM and ResNet are the `models` group; their examples live on the
-- modelsops branch until it is merged.)
-- A row whose example is not in this tree prints "not yet available"; no
-- figure stands in for it.
local M = {}

local function exists(path)
  local f = io.open(path)
  if f then f:close() end
  return f ~= nil
end

local function unavailable(name, why)
  return { name = name, note = "not yet available (" .. why .. ")" }
end

--- Runs cmd under /usr/bin/time -v: its output, the peak RSS in MiB of its
--- largest process, its wall seconds.
local function timed(c, cmd)
  local out = c.run("/usr/bin/time -v " .. cmd)
  local kib = c.field(out, "Maximum resident set size (kbytes)", cmd)
  local h, m, s = out:match("Elapsed %(wall clock%) time %(h:mm:ss or m:ss%): (%d+):(%d+):([%d.]+)")
  if not h then
    m, s = out:match("Elapsed %(wall clock%) time %(h:mm:ss or m:ss%): (%d+):([%d.]+)")
    h = 0
  end
  if not m then error("bench: no wall time in the output of `" .. cmd .. "`", 0) end
  return out, kib / 1024, tonumber(h) * 3600 + tonumber(m) * 60 + tonumber(s)
end

--- The "epoch k/n ... (T s, S samples/s)" lines of the Fashion-MNIST
--- example and its peer: a list of samples/s by epoch.
local function epochs(out, cmd)
  local list = {}
  for k, v in out:gmatch("epoch (%d+)/%d+%s+train loss[^\n]-, ([%d.]+) samples/s%)") do list[tonumber(k)] = tonumber(v) end
  if #list == 0 then error("bench: no epoch lines in the output of `" .. cmd .. "`:\n" .. out, 0) end
  return list
end

-- ours and the peer's command alternated c.train_reps times, each output read by rate(out, cmd): the two rows of a
-- training figure (the rate against a goal of `ratio`x, then the peak RSS against 1/2), medians
local function rate_rows(c, name, cmd, peer_cmd, rate, ratio)
  local ours, theirs = c.repeat_n(c.train_reps, function()
    local out, rss = timed(c, cmd)
    return { v = rate(out, cmd), rss = rss }
  end, function()
    local out, rss = timed(c, peer_cmd)
    return { v = rate(out, peer_cmd), rss = rss }
  end)
  local a, b, ra, rb = c.median(ours.v), c.median(theirs.v), c.median(ours.rss), c.median(theirs.rss)
  return {
    { name = name, ours = a, theirs = b, fmt = "%.0f", ratio = a / b, goal = string.format(">= %.2fx", ratio),
      pass = a / b >= ratio },
    { name = "  peak RSS of a process, MiB", ours = ra, theirs = rb, fmt = "%.0f", ratio = ra / rb, goal = "<= 0.50x",
      pass = ra / rb <= 0.5 },
  }
end

-- Fashion-MNIST example rows for one model and process count.
-- The CNN runs with sync_bn=false beside the peer: PyTorch's SyncBatchNorm
-- runs on GPUs only, so the peer's ranks normalise over their own batch;
-- ddplua's default (SyncBatchNorm under DDP, as the tutorial does) gets a
-- row of its own.
local function fashion(c, model, nproc, n_epochs)
  local tag = string.format("bench_%s_%dp", model, nproc)
  local launch = nproc > 1 and ("--nproc " .. nproc .. " ") or ""
  local ours_cmd = string.format("%s %s%s/examples/fashion_mnist/train.lua model=%s epochs=%d run_name=%s " ..
    "log_every=1000000%s", c.ddplua, launch, c.root, model, n_epochs, tag, model == "cnn" and " sync_bn=false" or "")
  -- the peer's ranks take cores / nproc threads each (its threads=0 rule), OpenBLAS's too
  local peer_cmd = string.format("%s %s/bench/torch_fashion_mnist.py model=%s nproc=%d epochs=%d",
    c.python_for(math.max(1, c.cores // nproc)), c.root, model, nproc, n_epochs)
  local ours, theirs = c.repeat_n(c.train_reps, function()
    local out, rss, wall = timed(c, ours_cmd)
    local e = epochs(out, ours_cmd)
    return { last = e[n_epochs], first = e[1], rss = rss, wall = wall }
  end, function()
    local out, rss, wall = timed(c, peer_cmd)
    local e = epochs(out, peer_cmd)
    return { last = e[n_epochs], first = e[1], rss = rss, wall = wall }
  end)
  local m = c.median
  local last, tlast = m(ours.last), m(theirs.last)
  local rss, trss = m(ours.rss), m(theirs.rss)
  local label = string.format("%s %d proc", model == "mlp" and "MLP" or "CNN", nproc)
  local rows = {
    { name = string.format("%s, epoch %d samples/s", label, n_epochs), ours = last, theirs = tlast, fmt = "%.0f",
      ratio = last / tlast, goal = ">= 2.00x", pass = last / tlast >= 2 },
  }
  if model == "mlp" then
    local drift, tdrift = {}, {}
    for i = 1, #ours.last do drift[i] = ours.last[i] / ours.first[i] end
    for i = 1, #theirs.last do tdrift[i] = theirs.last[i] / theirs.first[i] end
    rows[#rows + 1] = { name = string.format("  epoch %d / epoch 1", n_epochs), ours = m(drift), theirs = m(tdrift),
      fmt = "%.2f", goal = ">= 0.90", pass = m(drift) >= 0.9 }
  end
  if model == "cnn" and nproc > 1 then -- the tutorial's SyncBatchNorm: no peer to compare with
    local sync_cmd = ours_cmd:gsub(" sync_bn=false", "")
    local e = epochs(c.run(sync_cmd), sync_cmd)
    rows[#rows + 1] = { name = string.format("  with SyncBatchNorm, epoch %d samples/s", n_epochs), ours = e[n_epochs],
      fmt = "%.0f", goal = "(info)", pass = true }
  end
  rows[#rows + 1] = { name = string.format("  whole run (%d epochs), s", n_epochs), ours = m(ours.wall),
    theirs = m(theirs.wall), fmt = "%.1f", ratio = m(ours.wall) / m(theirs.wall), goal = "(info)", pass = true }
  rows[#rows + 1] = { name = "  peak RSS of a process, MiB", ours = rss, theirs = trss, fmt = "%.0f",
    ratio = rss / trss, goal = "<= 0.50x", pass = rss / trss <= 0.5 }
  return rows
end

M[#M + 1] = { group = "train", run = function(c)
  local rows = {}
  for _, nproc in ipairs(c.nprocs) do
    for _, r in ipairs(fashion(c, "mlp", nproc, c.mlp_epochs)) do rows[#rows + 1] = r end
  end
  return rows
end }

M[#M + 1] = { group = "train", run = function(c)
  local rows = {}
  for _, nproc in ipairs(c.nprocs) do
    for _, r in ipairs(fashion(c, "cnn", nproc, c.cnn_epochs)) do rows[#rows + 1] = r end
  end
  return rows
end }

-- GPT: tokens/s against torch_gpt.py; bf16 autocast against own float32.
M[#M + 1] = { group = "models", run = function(c)
  local script = c.root .. "/examples/gpt/train.lua"
  if not exists(script) then
    return { unavailable("GPT 1 proc, tokens/s", "examples/gpt is not in this tree"),
      unavailable("GPT 2 proc, tokens/s", "examples/gpt is not in this tree"),
      unavailable("GPT bf16 autocast / float32", "examples/gpt is not in this tree") }
  end
  local rows = {}
  local f32 = {}
  for _, nproc in ipairs(c.nprocs) do
    local steps = (nproc == 1 and 500 or 250) // (c.quick == 1 and 5 or 1)
    local launch = nproc > 1 and ("--nproc " .. nproc .. " ") or ""
    local pin = nproc == 1 and os.execute("taskset -c 0 true >/dev/null 2>&1") and "taskset -c 0 " or ""
    if nproc == 1 and pin == "" then error("bench: the GPT row needs taskset to run on one core as its peer", 0) end
    local ours_cmd = string.format("%s%s %s%s steps=%d out=runs/bench_gpt", pin, c.ddplua, launch,
      script, steps)
    local peer_cmd = string.format("%s%s %s/torch_gpt.py %d %d", pin, c.python, c.peers, nproc, steps)
    local ours, theirs = c.repeat_n(c.train_reps, function()
      local out, rss = timed(c, ours_cmd)
      return { tps = c.field(out, "tokens/s", ours_cmd), val = c.field(out, "val_loss", ours_cmd), rss = rss }
    end, function()
      local out, rss = timed(c, peer_cmd)
      return { tps = c.field(out, "tokens/s", peer_cmd), val = c.field(out, "val_loss", peer_cmd), rss = rss }
    end)
    local tps, ttps = c.median(ours.tps), c.median(theirs.tps)
    f32[nproc] = { tps = tps, val = c.median(ours.val), cmd = ours_cmd }
    rows[#rows + 1] = { name = string.format("GPT %d proc, tokens/s", nproc), ours = tps, theirs = ttps, fmt = "%.0f",
      ratio = tps / ttps, goal = ">= 2.00x", pass = tps / ttps >= 2 }
    rows[#rows + 1] = { name = string.format("  val loss (%d steps)", steps), ours = c.median(ours.val),
      theirs = c.median(theirs.val), fmt = "%.3f", goal = "(info)", pass = true }
    rows[#rows + 1] = { name = "  peak RSS of a process, MiB", ours = c.median(ours.rss),
      theirs = c.median(theirs.rss), fmt = "%.0f", ratio = c.median(ours.rss) / c.median(theirs.rss),
      goal = "<= 0.50x", pass = c.median(ours.rss) / c.median(theirs.rss) <= 0.5 }
    if nproc == 1 then
      -- the peer's code as a user ports it: attention op by op (split, view, transpose, q @ k^T, a mask
      -- buffer, softmax, @ v, transpose, contiguous) instead of the fused op; a figure beside the goal
      local manual_cmd = ours_cmd .. " attention=manual"
      local man = c.repeat_n(c.train_reps, function()
        return { tps = c.field(c.run(manual_cmd), "tokens/s", manual_cmd) }
      end)
      rows[#rows + 1] = { name = "  the peer's attention op by op, tokens/s", ours = c.median(man.tps), theirs = ttps,
        fmt = "%.0f", ratio = c.median(man.tps) / ttps, goal = "(info)", pass = true }
    end
  end
  -- the 2x goal is AMX's; a CPU with AVX512-BF16 only (AMD Zen 4: oneDNN's avx512_core_bf16 matmuls, ~2x its
  -- float32 GEMM rate) runs the same row as a figure beside it
  local amx = c.cpu:find("amx_bf16", 1, true) ~= nil
  if not amx and not c.cpu:find("avx512_bf16", 1, true) then
    rows[#rows + 1] = unavailable("GPT bf16 autocast / float32", "this CPU has neither AMX-BF16 nor AVX512-BF16")
    return rows
  end
  local cmd = f32[1].cmd .. " autocast=bfloat16"
  local runs = c.repeat_n(c.train_reps, function()
    local out = c.run(cmd)
    return { tps = c.field(out, "tokens/s", cmd), val = c.field(out, "val_loss", cmd) }
  end)
  local speed, dval = c.median(runs.tps) / f32[1].tps, math.abs(c.median(runs.val) - f32[1].val)
  rows[#rows + 1] = { name = amx and "GPT 1 proc bf16 autocast, tokens/s" or "GPT 1 proc bf16 (AVX512-BF16), tokens/s",
    ours = c.median(runs.tps), fmt = "%.0f", ratio = speed, goal = amx and ">= 2.00x own f32" or "(info)",
    pass = not amx or speed >= 2 }
  rows[#rows + 1] = { name = "  |val loss - float32's|", ours = dval, fmt = "%.3f", goal = "<= 0.05",
    pass = dval <= 0.05 }
  return rows
end }

-- LSTM: tokens/s against torch_lm.py on the same corpus file, at 1 process (both pinned to one core) and at 2
-- (each rank its share of the batch columns; the peer under DistributedDataParallel with gloo).
M[#M + 1] = { group = "models", run = function(c)
  if not exists(c.root .. "/examples/lstm_lm/train.lua") then
    return { unavailable("LSTM 1 proc, tokens/s", "examples/lstm_lm is not in this tree") }
  end
  local limit = c.quick == 1 and 20000 or 100000
  local out_dir = "runs/bench_lstm"
  if not os.execute("taskset -c 0 true >/dev/null 2>&1") then
    error("bench: the LSTM row needs taskset to run on one core as its peer", 0)
  end
  local tps = "([%d.]+) tokens/s"
  local rows = {}
  for _, nproc in ipairs(c.nprocs) do
    local pin = nproc == 1 and "taskset -c 0 " or ""
    local ours_cmd = string.format("%s%s %s%s/examples/lstm_lm/train.lua epochs=1 limit=%d out=%s " ..
      "log_interval=1000000", pin, c.ddplua, nproc > 1 and ("--nproc " .. nproc .. " ") or "", c.root, limit, out_dir)
    -- (the corpus file is the one ours_cmd writes: ours runs first in every repetition)
    local peer_cmd = string.format("%s%s %s/examples/lstm_lm/torch_lm.py %s/corpus.safetensors --epochs 1 " ..
      "--log_interval 1000000 --nproc %d", pin, c.python, c.root, out_dir, nproc)
    local ours, theirs = c.repeat_n(c.train_reps, function()
      local out, rss = timed(c, ours_cmd)
      return { tps = tonumber(out:match(tps)) or error("bench: no tokens/s from `" .. ours_cmd .. "`:\n" .. out, 0),
        rss = rss }
    end, function()
      local out, rss = timed(c, peer_cmd)
      return { tps = tonumber(out:match(tps)) or error("bench: no tokens/s from `" .. peer_cmd .. "`:\n" .. out, 0),
        rss = rss }
    end)
    local a, b, ra, rb = c.median(ours.tps), c.median(theirs.tps), c.median(ours.rss), c.median(theirs.rss)
    rows[#rows + 1] = { name = string.format("LSTM %d proc, tokens/s", nproc), ours = a, theirs = b, fmt = "%.0f",
      ratio = a / b, goal = ">= 1.50x", pass = a / b >= 1.5 }
    rows[#rows + 1] = { name = "  peak RSS of a process, MiB", ours = ra, theirs = rb, fmt = "%.0f", ratio = ra / rb,
      goal = "<= 0.50x", pass = ra / rb <= 0.5 }
  end
  return rows
end }

-- ResNet: the example's images/s against bench/torch_resnet.py (the same
-- recipe on the same CSV images), 1 process each with its default threads,
-- and 2 processes under DDP with plain BatchNorm on both sides (sync_bn=false:
-- PyTorch 1.13's SyncBatchNorm needs CUDA; the CNN rows show SyncBatchNorm).
M[#M + 1] = { group = "models", run = function(c)
  if not exists(c.root .. "/examples/resnet/train.lua") then
    return { unavailable("ResNet-18 w16 1 proc, images/s", "examples/resnet is not in this tree") }
  end
  local dir = "runs/bench_resnet_csv"
  if not exists(dir .. "/labels.csv") then
    c.run(string.format("%s %s/examples/csv_images/make_dataset.lua out=%s n=2500", c.ddplua, c.root, dir))
  end
  local limit = c.quick == 1 and 300 or 2000
  local function ips(out, what)
    local per_epoch = {}
    for v in out:gmatch("([%d.]+) images/s") do per_epoch[#per_epoch + 1] = tonumber(v) end
    if #per_epoch == 0 then error("bench: no images/s from `" .. what .. "`:\n" .. out, 0) end
    return c.median(per_epoch)
  end
  local rows = {}
  for _, nproc in ipairs(c.nprocs) do
    -- 3 epochs, each side's median epoch: an epoch is under a second here, and one stall of the machine (seen
    -- once: 8 s, 246 images/s against 2800-3600 in every other run) would otherwise be the row
    local cmd = string.format("%s %s%s/examples/resnet/train.lua data=%s epochs=3 width=16 limit=%d%s", c.ddplua,
      nproc > 1 and ("--nproc " .. nproc .. " ") or "", c.root, dir, limit, nproc > 1 and " sync_bn=false" or "")
    local peer_cmd = string.format("%s %s/bench/torch_resnet.py data=%s epochs=3 width=16 limit=%d threads=%d " ..
      "nproc=%d", c.python_for(c.cores), c.root, dir, limit, c.cores, nproc)
    for _, r in ipairs(rate_rows(c, string.format("ResNet-18 w16 %d proc, images/s", nproc), cmd, peer_cmd, ips, 2)) do
      rows[#rows + 1] = r
    end
  end
  return rows
end }

-- an example at one process beside its PyTorch peer, all cores on both sides: the rate `pattern` reads from its
-- output (goal >= 2x, as the CNN), peak RSS
local function one_proc_rows(c, name, cmd, peer_cmd, pattern)
  local function rate(out, what)
    local v = out:match(pattern)
    if not v then error(string.format("bench: no %s from `%s`:\n%s", name, what, out), 0) end
    return tonumber(v)
  end
  return rate_rows(c, name, cmd, peer_cmd, rate, 2)
end

-- - DCGAN: examples/dcgan/train.lua (pytorch/examples' DCGAN at 28 x 28: transposed convolutions, BCELoss, two
--   models and three backwards a step) against examples/dcgan/torch_dcgan.py, one epoch over the first 6400 images
--   (1280 under BENCH_QUICK): images/s.
M[#M + 1] = { group = "models", run = function(c)
  local n = c.quick == 1 and 1280 or 6400
  return one_proc_rows(c, "DCGAN 1 proc, images/s",
    string.format("%s %s/examples/dcgan/train.lua epochs=1 train_samples=%d run_name=bench_dcgan", c.ddplua, c.root, n),
    string.format("%s %s/examples/dcgan/torch_dcgan.py epochs=1 train_samples=%d threads=%d", c.python_for(c.cores),
      c.root, n, c.cores), "D%(G%(z%)%) [%d.]+  %([%d.]+ s, ([%d.]+) images/s%)")
end }

-- - ViT: examples/vit/train.lua (a Vision Transformer: patches by a strided Conv2d, a class token, pre-norm
--   nn.TransformerEncoder layers with GELU, AdamW, label smoothing) against examples/vit/torch_vit.py (the same
--   network in torch.nn), one epoch over the first 5000 images (1280 under BENCH_QUICK): images/s.
M[#M + 1] = { group = "models", run = function(c)
  local n = c.quick == 1 and 1280 or 5000
  return one_proc_rows(c, "ViT 1 proc, images/s",
    string.format("%s %s/examples/vit/train.lua epochs=1 train_samples=%d test_samples=1000 run_name=bench_vit",
      c.ddplua, c.root, n),
    string.format("%s %s/examples/vit/torch_vit.py 1 %d 1000 %d", c.python_for(c.cores), c.root, n, c.cores),
    "Epoch 1: train loss [%d.]+, ([%d.]+) images/s")
end }

-- - U-Net: examples/unet/train.lua (segmentation: Conv2d, BatchNorm2d, MaxPool2d, ConvTranspose2d, skip connections
--   by cat, per-pixel cross entropy) against examples/unet/torch_unet.py, one epoch over the first 1600 scenes (320
--   under BENCH_QUICK): scenes/s.
M[#M + 1] = { group = "models", run = function(c)
  local n = c.quick == 1 and 320 or 1600
  return one_proc_rows(c, "U-Net 1 proc, scenes/s",
    string.format("%s %s/examples/unet/train.lua epochs=1 train_samples=%d test_samples=320 run_name=bench_unet",
      c.ddplua, c.root, n),
    string.format("%s %s/examples/unet/torch_unet.py 1 %d 320 %d", c.python_for(c.cores), c.root, n, c.cores),
    "Epoch 1: train loss [%d.]+, ([%d.]+) scenes/s")
end }

-- - R3D: examples/video3d's 3-d ResNet (Conv3d, BatchNorm3d, AdaptiveAvgPool3d), its training step on a batch of
--   [8, 3, 8, 56, 56] clips, one thread each side pinned to one core: bench/conv3d.lua against bench/torch_conv3d.py
--   (the same network in torch.nn), steps per second (goal >= 1x: both convolve through oneDNN's direct 3-d
--   kernels, so the rest of the step decides; bench/conv3d.lua prints the layers too, and the composition of 2-d
--   convolutions the other devices run).
M[#M + 1] = { group = "video", run = function(c)
  local steps = c.quick == 1 and 3 or 9
  local function rate(out, what)
    local v = out:match("R3D width 16 train step, batch 8x3x8x56x56: ([%d.]+) ms")
    if not v then error("bench: no R3D step time from `" .. what .. "`:\n" .. out, 0) end
    return 1000 / tonumber(v)
  end
  local cmd = string.format("%s%s %s/bench/conv3d.lua steps=%d", c.pin1(), c.ddplua, c.root, steps)
  local peer_cmd = string.format("%s%s %s/bench/torch_conv3d.py %d", c.pin1(), c.python, c.root, steps)
  local rows = rate_rows(c, "R3D (3-d ResNet) 1 thread, steps/s", cmd, peer_cmd, rate, 1)
  rows[1].fmt = "%.2f"
  return rows
end }

return M
