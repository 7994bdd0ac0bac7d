-- PyTorch's Spatial Transformer Networks tutorial (Jaderberg et al.; pytorch/tutorials
-- intermediate_source/spatial_transformer_tutorial.py) on Fashion-MNIST, data-parallel: a localisation network
-- (conv 7 -> max pool -> ReLU -> conv 5 -> max pool -> ReLU) and a 90-32-6 regressor give each image an affine map
-- (the last layer starting at the identity), F.affine_grid and F.grid_sample resample the image through it, then
-- the tutorial's classifier (two 5x5 convolutions with max pooling, Dropout2d, 320-50-10 with dropout,
-- log_softmax) and nll_loss; SGD lr 0.01, batch 64 per process, as the tutorial.
--
--   ddplua examples/stn/train.lua epochs=2
--   ddplua --nproc 2 examples/stn/train.lua
--
-- Prints, per epoch, the training loss (every rank's batches) and the test set's loss and accuracy (each test image
-- once), and how far the transforms moved from the identity (the mean |theta - I|). Settings: epochs=5
-- batch_size=64 lr=0.01 seed=1 train_samples=0 test_samples=0 (0 = the whole split) root=<dataset dir> threads=0
-- log_every=200 run_name=stn (runs/stn/model.safetensors).
local ddp = require "ddplua"
local nn, F, optim, data, dist = ddp.nn, ddp.nn.F, ddp.optim, ddp.data, ddp.distributed

local cfg, run_dir = ddp.config {
  epochs = 5, batch_size = 64, lr = 0.01, seed = 1, train_samples = 0, test_samples = 0,
  root = data.FashionMNIST.default_root, threads = 0, log_every = 200, run_name = "stn",
}

dist.init_process_group()
local rank, world = dist.get_rank(), dist.get_world_size()
if cfg.threads > 0 then ddp.set_num_threads(cfg.threads) end
ddp.seed_everything(cfg.seed + rank)
local device = ddp.device()

local Net = nn.Module:extend("Net")

function Net:__init()
  self.conv1 = nn.Conv2d(1, 10, 5)
  self.conv2 = nn.Conv2d(10, 20, 5)
  self.conv2_drop = nn.Dropout2d()
  self.fc1 = nn.Linear(320, 50)
  self.fc2 = nn.Linear(50, 10)
  self.localization = nn.Sequential {
    nn.Conv2d(1, 8, 7), nn.MaxPool2d(2, 2), nn.ReLU(true),
    nn.Conv2d(8, 10, 5), nn.MaxPool2d(2, 2), nn.ReLU(true),
  }
  self.fc_loc = nn.Sequential { nn.Linear(10 * 3 * 3, 32), nn.ReLU(true), nn.Linear(32, 3 * 2) }
  -- the identity transform to start from
  ddp.no_grad(function()
    self.fc_loc[3].weight:zero_()
    self.fc_loc[3].bias:copy_(ddp.tensor({ 1, 0, 0, 0, 1, 0 }, { dtype = "float32" }))
  end)
end

function Net:theta(x) return self.fc_loc(self.localization(x):view(-1, 10 * 3 * 3)):view(-1, 2, 3) end

function Net:stn(x) return F.grid_sample(x, F.affine_grid(self:theta(x), x:size())) end

function Net:forward(x)
  x = self:stn(x)
  x = F.max_pool2d(self.conv1(x), 2):relu()
  x = F.max_pool2d(self.conv2_drop(self.conv2(x)), 2):relu()
  x = self.fc1(x:view(-1, 320)):relu()
  x = F.dropout(x, 0.5, self.training)
  return F.log_softmax(self.fc2(x), 2)
end

local net = Net():to(device)
local model = dist.DistributedDataParallel(net)
local opt = optim.SGD(model:parameters(), { lr = cfg.lr })

local function split(name, limit) -- the first `limit` images (0: all)
  local set = data.FashionMNIST { root = cfg.root, split = name }
  return (limit > 0 and limit < #set) and data.Subset(set, ddp.arange(1, limit + 1):tolist()) or set
end
local train_set, test_set = split("train", cfg.train_samples), split("test", cfg.test_samples)
local train_sampler = data.DistributedSampler(train_set, { shuffle = true, seed = cfg.seed })
local test_sampler = data.DistributedSampler(test_set, { shuffle = false })
local train_loader = data.DataLoader(train_set, { batch_size = cfg.batch_size, sampler = train_sampler })
local test_loader = data.DataLoader(test_set, { batch_size = cfg.batch_size, sampler = test_sampler })

-- Fashion-MNIST's pixel mean and deviation (the tutorial normalises MNIST by its own)
local function normalize(x) return ((x:to(device):view(-1, 1, 28, 28) - 0.2860) / 0.3530) end

ddp.print(string.format("STN on Fashion-MNIST, %d process(es) (%s): %d train / %d test images, batch %d x %d, " ..
  "SGD lr %g", world, device, #train_set, #test_set, cfg.batch_size, world, cfg.lr))

local identity = ddp.tensor({ { 1, 0, 0 }, { 0, 1, 0 } }, { dtype = "float32", device = device })
for epoch = 1, cfg.epochs do
  model:train()
  train_sampler:set_epoch(epoch)
  local t0, sum, n, step = ddp.clock(), 0, 0, 0
  for x, y in train_loader:iter() do
    x, y = normalize(x), y:to(device)
    opt:zero_grad()
    local loss = F.nll_loss(model(x), y)
    loss:backward()
    opt:step()
    step = step + 1
    sum, n = sum + loss:item() * x:size(1), n + x:size(1)
    if step % cfg.log_every == 0 then
      ddp.print(string.format("Train Epoch: %d [%d/%d]\tLoss: %.6f", epoch, step * cfg.batch_size * world,
        #train_set, loss:item()))
    end
  end
  local seconds = ddp.clock() - t0
  local totals = ddp.tensor({ sum, n }, { dtype = "float64", device = device })
  dist.all_reduce(totals, "sum")
  model:eval()
  local losses, hits, moved = {}, {}, {}
  ddp.no_grad(function()
    for x, y in test_loader:iter() do
      x, y = normalize(x), y:to(device)
      local out = model(x)
      losses[#losses + 1] = F.nll_loss(out, y, { reduction = "none" })
      hits[#hits + 1] = out:argmax(2):eq(y):to("float32")
      moved[#moved + 1] = (net:theta(x) - identity):abs():mean({ 2, 3 })
    end
  end)
  local test_loss = dist.gather_for_metrics(ddp.cat(losses), test_sampler)
  local correct = dist.gather_for_metrics(ddp.cat(hits), test_sampler)
  local shift = dist.gather_for_metrics(ddp.cat(moved), test_sampler)
  ddp.print(string.format("Epoch %d: train loss %.4f, %.0f images/s | Test set: Average loss: %.4f, Accuracy: " ..
    "%d/%d (%.2f%%) | mean |theta - I| %.4f", epoch, totals[1]:item() / totals[2]:item(),
    totals[2]:item() / seconds, test_loss:mean():item(), correct:sum():item(), correct:size(1),
    100 * correct:mean():item(), shift:mean():item()))
end

if ddp.is_main() then ddp.save(net:state_dict(), run_dir .. "/model.safetensors") end
dist.barrier()
dist.destroy_process_group()
