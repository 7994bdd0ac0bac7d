-- A 3-d ResNet (examples/video3d/model.lua: torchvision's R3D-18 recipe, narrower and shallower) on video clips,
-- data-parallel: "moving Fashion-MNIST", each clip 8 frames of a 40 x 40 canvas across which one Fashion-MNIST
-- image slides a pixel a frame in one of 8 directions from a random start; the label is the garment's class.
-- Conv3d, BatchNorm3d, AdaptiveAvgPool3d, cross entropy, SGD with momentum and weight decay, cosine learning rate.
--
--   ddplua examples/video3d/train.lua epochs=2
--   ddplua --nproc 2 examples/video3d/train.lua
--
-- Prints, per epoch, the training loss (every rank's batches) and clips/s, and the test clips' loss and accuracy
-- (each test clip once, gathered from the ranks). Settings: epochs=2 batch_size=32 lr=0.05 momentum=0.9
-- weight_decay=5e-4 width=16 frames=8 seed=1 train_samples=10000 test_samples=2000 (0 = the whole split)
-- root=<dataset dir> threads=0 log_every=100 run_name=video3d (runs/video3d/model.safetensors).
local ddp = require "ddplua"
local F, optim, data, dist = ddp.nn.F, ddp.optim, ddp.data, ddp.distributed
local here = (arg and arg[0] or "examples/video3d/train.lua"):gsub("[^/]*$", "")
local R3D = dofile(here .. "model.lua")

local cfg, run_dir = ddp.config {
  epochs = 2, batch_size = 32, lr = 0.05, momentum = 0.9, weight_decay = 5e-4, width = 16, frames = 8, seed = 1,
  train_samples = 10000, test_samples = 2000, root = data.FashionMNIST.default_root, threads = 0, log_every = 100,
  run_name = "video3d",
}

dist.init_process_group()
local rank, world = dist.get_rank(), dist.get_world_size()
if cfg.threads > 0 then ddp.set_num_threads(cfg.threads) end
ddp.seed_everything(cfg.seed + rank)
local device = ddp.device()

local net = R3D { num_classes = 10, width = cfg.width, in_channels = 1 }:to(device)
local model = dist.DistributedDataParallel(net)
local opt = optim.SGD(model:parameters(), { lr = cfg.lr, momentum = cfg.momentum, weight_decay = cfg.weight_decay })

local function split(name, limit) -- the first `limit` images (0: all)
  local set = data.FashionMNIST { root = cfg.root, split = name }
  return (limit > 0 and limit < #set) and data.Subset(set, ddp.arange(1, limit + 1):tolist()) or set
end
local train_set, test_set = split("train", cfg.train_samples), split("test", cfg.test_samples)
local train_sampler = data.DistributedSampler(train_set, { shuffle = true, seed = cfg.seed })
local test_sampler = data.DistributedSampler(test_set, { shuffle = false })
local train_loader = data.DataLoader(train_set, { batch_size = cfg.batch_size, sampler = train_sampler })
local test_loader = data.DataLoader(test_set, { batch_size = cfg.batch_size, sampler = test_sampler })

-- The clips of a batch of images: image i slides by (dy, dx) a frame, (dy, dx) one of the 8 directions, from a
-- start that keeps it inside the canvas. `g` draws the motions (a test clip is the same every epoch).
local T, SIZE, DIRS = cfg.frames, 28 + cfg.frames + 4, { { -1, -1 }, { -1, 0 }, { -1, 1 }, { 0, -1 }, { 0, 1 },
  { 1, -1 }, { 1, 0 }, { 1, 1 } }
local function clips(images, g)
  local B = images:size(1)
  local img = ((images:view(B, 28, 28) - 0.2860) / 0.3530)
  local out = ddp.full({ B, 1, T, SIZE, SIZE }, -0.2860 / 0.3530)
  local dir = ddp.randint(1, #DIRS + 1, { B }, { generator = g }):tolist()
  local room = SIZE - 28 - (T - 1)
  local jitter = ddp.randint(0, room + 1, { B, 2 }, { generator = g }):tolist()
  for i = 1, B do
    local dy, dx = DIRS[dir[i]][1], DIRS[dir[i]][2]
    -- moving up (or left) starts low (or right) enough to stay on the canvas
    local y0 = jitter[i][1] + (dy < 0 and T - 1 or 0)
    local x0 = jitter[i][2] + (dx < 0 and T - 1 or 0)
    for t = 0, T - 1 do
      out[i][1][t + 1]:narrow(1, y0 + t * dy + 1, 28):narrow(2, x0 + t * dx + 1, 28):copy_(img[i])
    end
  end
  return out:to(device)
end

ddp.print(string.format("R3D (width %d) on moving Fashion-MNIST clips [%d, 1, %d, %d, %d], %d process(es) (%s): " ..
  "%d train / %d test clips, SGD lr %g momentum %g", cfg.width, cfg.batch_size, T, SIZE, SIZE, world, device,
  #train_set, #test_set, cfg.lr, cfg.momentum))

local train_g = ddp.Generator(1000 + rank)
local steps_per_epoch = math.ceil(#train_sampler / cfg.batch_size)
local total_steps, step = cfg.epochs * steps_per_epoch, 0
for epoch = 1, cfg.epochs do
  model:train()
  train_sampler:set_epoch(epoch)
  local t0, sum, n = ddp.clock(), 0, 0
  for x, y in train_loader:iter() do
    x, y = clips(x, train_g), y:to(device)
    opt.param_groups[1].lr = cfg.lr * 0.5 * (1 + math.cos(math.pi * step / total_steps))
    opt:zero_grad()
    local loss = F.cross_entropy(model(x), y)
    loss:backward()
    opt:step()
    step = step + 1
    sum, n = sum + loss:item() * x:size(1), n + x:size(1)
    if step % cfg.log_every == 0 then
      ddp.print(string.format("epoch %d step %d/%d loss %.4f", epoch, step, total_steps, loss:item()))
    end
  end
  local seconds = ddp.clock() - t0
  local totals = ddp.tensor({ sum, n }, { dtype = "float64", device = device })
  dist.all_reduce(totals, "sum")
  model:eval()
  local test_g = ddp.Generator(7 + rank)
  local losses, hits = {}, {}
  ddp.no_grad(function()
    for x, y in test_loader:iter() do
      x, y = clips(x, test_g), y:to(device)
      local out = model(x)
      losses[#losses + 1] = F.cross_entropy(out, y, { reduction = "none" })
      hits[#hits + 1] = out:argmax(2):eq(y):to("float32")
    end
  end)
  local test_loss = dist.gather_for_metrics(ddp.cat(losses), test_sampler)
  local correct = dist.gather_for_metrics(ddp.cat(hits), test_sampler)
  ddp.print(string.format("Epoch %d: train loss %.4f, %.0f clips/s | test loss %.4f, accuracy %d/%d (%.2f%%)", epoch,
    totals[1]:item() / totals[2]:item(), totals[2]:item() / seconds, test_loss:mean():item(), correct:sum():item(),
    correct:size(1), 100 * correct:mean():item()))
end

if ddp.is_main() then ddp.save(net:state_dict(), run_dir .. "/model.safetensors") end
dist.barrier()
dist.destroy_process_group()
