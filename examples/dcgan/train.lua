-- DCGAN on Fashion-MNIST, ported from pytorch/examples' dcgan/main.py (Radford et al.) to 28 x 28 images:
-- a generator of transposed convolutions (z [100, 1, 1] -> 7 x 7 -> 14 x 14 -> 28 x 28, BatchNorm + ReLU, Tanh) and a
-- discriminator of strided convolutions (LeakyReLU 0.2, BatchNorm, Sigmoid), BCELoss, Adam(lr 2e-4, betas 0.5,
-- 0.999), weights from N(0, 0.02) (BatchNorm's from N(1, 0.02)), as the original. Each step trains D on a real
-- batch and on a generated one (two backwards, the gradients summed), then G through D. Both models are wrapped in
-- DDP: every backward averages that model's gradients over the ranks.
--
--   ddplua examples/dcgan/train.lua epochs=1
--   ddplua --nproc 2 examples/dcgan/train.lua
--
-- Settings: epochs=5 batch_size=64 (per process) lr=0.0002 beta1=0.5 nz=100 ngf=32 ndf=32 seed=1
-- train_samples=0 (0 = all 60000) root=<dataset dir> log_every=100 run_name=dcgan (runs/<run_name>/: the config,
-- metrics.jsonl, samples_<epoch>.pgm: an 8 x 8 grid of images from a fixed noise, and the models) threads=0
local ddp = require "ddplua"
local nn, optim, data, dist = ddp.nn, ddp.optim, ddp.data, ddp.distributed

local cfg, run_dir = ddp.config {
  epochs = 5, batch_size = 64, lr = 0.0002, beta1 = 0.5, nz = 100, ngf = 32, ndf = 32, seed = 1, train_samples = 0,
  root = data.FashionMNIST.default_root, log_every = 100, run_name = "dcgan", threads = 0,
}

dist.init_process_group()
local rank, world = dist.get_rank(), dist.get_world_size()
if cfg.threads > 0 then ddp.set_num_threads(cfg.threads) end
ddp.seed_everything(cfg.seed + rank)
local device = ddp.device()
local nz, ngf, ndf = cfg.nz, cfg.ngf, cfg.ndf

local netG = nn.Sequential {
  nn.ConvTranspose2d(nz, ngf * 4, 7, 1, 0, { bias = false }), nn.BatchNorm2d(ngf * 4), nn.ReLU(true), -- 7 x 7
  nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, { bias = false }), nn.BatchNorm2d(ngf * 2), nn.ReLU(true), -- 14 x 14
  nn.ConvTranspose2d(ngf * 2, 1, 4, 2, 1, { bias = false }), nn.Tanh(), -- 1 x 28 x 28
}
local netD = nn.Sequential {
  nn.Conv2d(1, ndf, 4, 2, 1, { bias = false }), nn.LeakyReLU(0.2, true), -- 14 x 14
  nn.Conv2d(ndf, ndf * 2, 4, 2, 1, { bias = false }), nn.BatchNorm2d(ndf * 2), nn.LeakyReLU(0.2, true), -- 7 x 7
  nn.Conv2d(ndf * 2, 1, 7, 1, 0, { bias = false }), nn.Sigmoid(), -- 1 x 1 x 1
}

-- the original's weights_init, by class name
local function weights_init(m)
  local name = m:_class_name()
  if name:find("Conv") then
    nn.init.normal_(m.weight, 0.0, 0.02)
  elseif name:find("BatchNorm") then
    nn.init.normal_(m.weight, 1.0, 0.02)
    nn.init.zeros_(m.bias)
  end
end
ddp.no_grad(function()
  netG:apply(weights_init)
  netD:apply(weights_init)
end)
netG = dist.DistributedDataParallel(netG:to(device))
netD = dist.DistributedDataParallel(netD:to(device))

local criterion = nn.BCELoss()
local optD = optim.Adam(netD:parameters(), { lr = cfg.lr, betas = { cfg.beta1, 0.999 } })
local optG = optim.Adam(netG:parameters(), { lr = cfg.lr, betas = { cfg.beta1, 0.999 } })

local train_set = data.FashionMNIST { root = cfg.root, split = "train" }
if cfg.train_samples > 0 then
  local idx = {}
  for i = 1, math.min(cfg.train_samples, #train_set) do idx[i] = i end
  train_set = data.Subset(train_set, idx)
end
local sampler = data.DistributedSampler(train_set, { shuffle = true, seed = cfg.seed })
local loader = data.DataLoader(train_set, { batch_size = cfg.batch_size, sampler = sampler, drop_last = true })

-- the same noise every epoch (drawn with the shared seed: rank 0's samples are the ones written)
ddp.manual_seed(cfg.seed)
local fixed_noise = ddp.randn(64, nz, 1, 1):to(device)
ddp.manual_seed(cfg.seed + 1000 + rank)

-- images in [-1, 1] [64, 1, 28, 28] as an 8 x 8 grid, a binary PGM (any image viewer reads it)
local function write_grid(path, imgs)
  local v = ((imgs:detach():cpu():float() + 1) * 127.5):clamp(0, 255):round():to("uint8"):reshape(8, 8, 28, 28)
  local t = v:permute(1, 3, 2, 4):contiguous():reshape(8 * 28, 8 * 28):totable()
  local rows = {}
  for r = 1, #t do rows[r] = string.char(table.unpack(t[r])) end
  local tmp = path .. ".tmp"
  local f = assert(io.open(tmp, "wb"))
  f:write(string.format("P5\n%d %d\n255\n", 8 * 28, 8 * 28), table.concat(rows))
  f:close()
  assert(os.rename(tmp, path))
end

local function count(m)
  local n = 0
  for _, p in ipairs(m:parameters()) do n = n + p:numel() end
  return n
end
ddp.print(string.format("DCGAN on Fashion-MNIST, %d process(es) (%s): %d images, batch %d x %d, Adam lr %g betas "
  .. "(%g, 0.999), G %d parameters, D %d", world, device, #train_set, cfg.batch_size, world, cfg.lr, cfg.beta1,
  count(netG), count(netD)))
local log = ddp.metrics.open()
local step = 0
local sums
for epoch = 1, cfg.epochs do
  sampler:set_epoch(epoch)
  sums = { d = 0, g = 0, dx = 0, dgz = 0, n = 0 }
  local t0 = ddp.clock()
  local bar = ddp.progress(#loader, { desc = "epoch " .. epoch, batch_size = cfg.batch_size * world })
  for x in loader:iter() do
    local real = x:to(device) * 2 - 1 -- [0, 1] -> [-1, 1], the original's Normalize((0.5,), (0.5,))
    local b = real:size(1)
    -- (1) D: maximise log D(x) + log(1 - D(G(z)))
    optD:zero_grad()
    local label = ddp.ones(b, { device = device })
    local out = netD(real):view(-1)
    local errD_real = criterion(out, label)
    errD_real:backward()
    local d_x = out:mean():item()
    local fake = netG(ddp.randn(b, nz, 1, 1):to(device))
    label = ddp.zeros(b, { device = device })
    out = netD(fake:detach()):view(-1)
    local errD_fake = criterion(out, label)
    errD_fake:backward()
    optD:step()
    -- (2) G: maximise log D(G(z)) (the fake labelled real)
    optG:zero_grad()
    out = netD(fake):view(-1)
    local errG = criterion(out, ddp.ones(b, { device = device }))
    errG:backward()
    optG:step()
    step = step + 1
    local ld, lg = errD_real:item() + errD_fake:item(), errG:item()
    sums.d, sums.g, sums.dx, sums.dgz, sums.n = sums.d + ld, sums.g + lg, sums.dx + d_x, sums.dgz + out:mean():item(),
        sums.n + 1
    if step % cfg.log_every == 0 then log:log { step = step, epoch = epoch, loss_d = ld, loss_g = lg } end
    bar:update(1, { loss_d = ld, loss_g = lg })
  end
  bar:close()
  local secs = ddp.clock() - t0
  -- the epoch's means over every rank's batches
  local m = ddp.tensor({ sums.d, sums.g, sums.dx, sums.dgz }, { dtype = "float64", device = device }) / sums.n
  dist.all_reduce(m, "avg")
  local v = m:totable()
  log:log_epoch { epoch = epoch, loss_d = v[1], loss_g = v[2], d_x = v[3], d_g_z = v[4], train_seconds = secs }
  ddp.print(string.format("epoch %d/%d  Loss_D %.4f  Loss_G %.4f  D(x) %.4f  D(G(z)) %.4f  (%.1f s, %.0f images/s)",
    epoch, cfg.epochs, v[1], v[2], v[3], v[4], secs, sums.n * cfg.batch_size * world / secs))
  if ddp.is_main() then
    netG:eval()
    ddp.no_grad(function() write_grid(string.format("%s/samples_%d.pgm", run_dir, epoch), netG(fixed_noise)) end)
    netG:train()
  end
end
log:close()
if ddp.is_main() then
  ddp.save(netG.module:state_dict(), run_dir .. "/netG.safetensors")
  ddp.save(netD.module:state_dict(), run_dir .. "/netD.safetensors")
  print("saved " .. run_dir .. "/netG.safetensors and netD.safetensors")
end
dist.barrier()
dist.destroy_process_group()
