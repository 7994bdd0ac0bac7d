-- A U-Net (examples/unet/model.lua: milesial/Pytorch-UNet's layout, width 16, three downsamplings) for semantic
-- segmentation, data-parallel: each scene is a 56 x 56 canvas with two Fashion-MNIST garments at random places (the
-- second drawn over the first), and every pixel is labelled with the class of the garment it shows, or background
-- (11 classes). Per-pixel cross entropy, Adam, cosine learning rate.
--
--   ddplua examples/unet/train.lua epochs=2
--   ddplua --nproc 2 examples/unet/train.lua
--
-- Prints, per epoch, the training loss (every rank's batches) and scenes/s, and the test scenes' pixel accuracy and
-- mean IoU over the 11 classes (each test scene once, gathered from the ranks). examples/unet/torch_unet.py is the
-- same run in PyTorch. Settings: epochs=2 batch_size=32 (per process) lr=2e-3 width=16 seed=1 train_samples=10000
-- test_samples=2000 (0 = the whole split) root=<dataset dir> threads=0 log_every=100 run_name=unet
-- (runs/unet/model.safetensors).
local ddp = require "ddplua"
local F, optim, data, dist = ddp.nn.F, ddp.optim, ddp.data, ddp.distributed
local here = (arg and arg[0] or "examples/unet/train.lua"):gsub("[^/]*$", "")
local UNet = dofile(here .. "model.lua")

local cfg, run_dir = ddp.config {
  epochs = 2, batch_size = 32, lr = 2e-3, width = 16, seed = 1, train_samples = 10000, test_samples = 2000,
  root = data.FashionMNIST.default_root, threads = 0, log_every = 100, run_name = "unet",
}

dist.init_process_group()
local rank, world = dist.get_rank(), dist.get_world_size()
if cfg.threads > 0 then ddp.set_num_threads(cfg.threads) end
ddp.seed_everything(cfg.seed + rank)
local device = ddp.device()

local CLASSES, S, THR = 11, 56, 0.25
local net = UNet { in_channels = 1, classes = CLASSES, width = cfg.width }:to(device)
local model = dist.DistributedDataParallel(net)
local opt = optim.Adam(model:parameters(), { lr = cfg.lr })

local function split(name, limit) -- the first `limit` images (0: all)
  local set = data.FashionMNIST { root = cfg.root, split = name }
  return (limit > 0 and limit < #set) and data.Subset(set, ddp.arange(1, limit + 1):tolist()) or set
end
local train_set, test_set = split("train", cfg.train_samples), split("test", cfg.test_samples)
local train_sampler = data.DistributedSampler(train_set, { shuffle = true, seed = cfg.seed })
local test_sampler = data.DistributedSampler(test_set, { shuffle = false })
local train_loader = data.DataLoader(train_set, { batch_size = cfg.batch_size, sampler = train_sampler })
local test_loader = data.DataLoader(test_set, { batch_size = cfg.batch_size, sampler = test_sampler })

-- A batch of B images and labels -> B scenes: image i, then another image of the batch drawn over it, each at a
-- random place; a pixel brighter than THR belongs to its garment. x [B, 1, S, S] normalised, target [B, S, S]
-- (1 = background, 1 + the garment's class). `g` draws the places (a test scene is the same every epoch).
local function scenes(images, labels, g)
  local B = images:size(1)
  local img = images:view(B, 28, 28)
  local x, t = ddp.zeros(B, 1, S, S), ddp.ones({ B, S, S }, { dtype = "int64" })
  local pos = ddp.randint(0, S - 28 + 1, { B, 4 }, { generator = g }):tolist()
  local other = ddp.randperm(B, { generator = g }):tolist()
  local lab = labels:tolist()
  for i = 1, B do
    for k, j in ipairs({ i, other[i] }) do
      local y0, x0 = pos[i][2 * k - 1], pos[i][2 * k]
      local box = x[i][1]:narrow(1, y0 + 1, 28):narrow(2, x0 + 1, 28)
      local m = img[j]:gt(THR)
      box:copy_(ddp.where(m, img[j], box))
      t[i]:narrow(1, y0 + 1, 28):narrow(2, x0 + 1, 28):masked_fill_(m, lab[j] + 1)
    end
  end
  return ((x - 0.1) / 0.3):to(device), t:to(device)
end

-- each scene's confusion counts [B, CLASSES * CLASSES] (target-major), from the logits
local function confusion(logits, t)
  local B = t:size(1)
  local p = logits:argmax(2) -- [B, S, S]
  local idx = (t - 1) * CLASSES + (p - 1) + ddp.arange(0, B, { dtype = "int64", device = t:device() }):view(B, 1, 1) *
    (CLASSES * CLASSES)
  return ddp.bincount(idx:flatten(), { minlength = B * CLASSES * CLASSES }):view(B, CLASSES * CLASSES)
end

ddp.print(string.format("U-Net (width %d) on scenes of two Fashion-MNIST garments [%d, 1, %d, %d], %d classes, " ..
  "%d process(es) (%s): %d train / %d test scenes, Adam lr %g", cfg.width, cfg.batch_size, S, S, CLASSES, world,
  device, #train_set, #test_set, cfg.lr))

local train_g = ddp.Generator(1000 + rank)
local steps_per_epoch = math.ceil(#train_sampler / cfg.batch_size)
local total_steps, step = cfg.epochs * steps_per_epoch, 0
for epoch = 1, cfg.epochs do
  model:train()
  train_sampler:set_epoch(epoch)
  local t0, sum, n = ddp.clock(), 0, 0
  for x, y in train_loader:iter() do
    local xs, ts = scenes(x, y, train_g)
    opt.param_groups[1].lr = cfg.lr * 0.5 * (1 + math.cos(math.pi * step / total_steps))
    opt:zero_grad()
    local loss = F.cross_entropy(model(xs), ts)
    loss:backward()
    opt:step()
    step = step + 1
    sum, n = sum + loss:item() * xs:size(1), n + xs:size(1)
    if step % cfg.log_every == 0 then
      ddp.print(string.format("epoch %d step %d/%d loss %.4f", epoch, step, total_steps, loss:item()))
    end
  end
  local seconds = ddp.clock() - t0
  local totals = ddp.tensor({ sum, n }, { dtype = "float64", device = device })
  dist.all_reduce(totals, "sum")
  model:eval()
  local test_g = ddp.Generator(7 + rank)
  local conf = {}
  ddp.no_grad(function()
    for x, y in test_loader:iter() do
      local xs, ts = scenes(x, y, test_g)
      conf[#conf + 1] = confusion(model(xs), ts)
    end
  end)
  local c = dist.gather_for_metrics(ddp.cat(conf), test_sampler):sum(1):view(CLASSES, CLASSES):double()
  local hits, rows, cols = c:diagonal(), c:sum(2):flatten(), c:sum(1):flatten()
  local union = rows + cols - hits
  local present = union:gt(0)
  local miou = (hits / union:clamp(1, math.huge)):masked_select(present):mean():item()
  ddp.print(string.format("Epoch %d: train loss %.4f, %.0f scenes/s | test pixel accuracy %.2f%%, mean IoU %.2f%% " ..
    "(%d scenes)", epoch, totals[1]:item() / totals[2]:item(), totals[2]:item() / seconds,
    100 * hits:sum():item() / c:sum():item(), 100 * miou, c:sum():item() // (S * S)))
end

if ddp.is_main() then ddp.save(net:state_dict(), run_dir .. "/model.safetensors") end
dist.barrier()
dist.destroy_process_group()
