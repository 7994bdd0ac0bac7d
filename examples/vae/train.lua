-- The variational autoencoder of pytorch/examples (vae/main.py) on Fashion-MNIST, data-parallel: a 784-400-20
-- encoder (fc1, then fc21 for the mean and fc22 for the log-variance), the reparameterization trick, a 20-400-784
-- decoder ending in a sigmoid, and the loss binary_cross_entropy(recon, x, sum) + KLD with
-- KLD = -0.5 * sum(1 + logvar - mu^2 - exp(logvar)); Adam, lr 1e-3, batch 128 (per process). Pixels are in [0, 1].
--
--   ddplua examples/vae/train.lua epochs=1                 (one process)
--   ddplua --nproc 2 examples/vae/train.lua epochs=1       (2 processes: DDP averages the gradients)
--
-- Prints, per epoch, the average training loss per image (over every rank's images) and the test set's loss per
-- image (each test image counted once). Settings: epochs=10 batch_size=128 lr=1e-3 seed=1 train_samples=0 and
-- test_samples=0 (0 = the whole split) root=<dataset dir> threads=0 run_name=vae (runs/vae/model.safetensors).
local ddp = require "ddplua"
local nn, F, optim, data, dist = ddp.nn, ddp.nn.F, ddp.optim, ddp.data, ddp.distributed

local cfg, run_dir = ddp.config {
  epochs = 10, batch_size = 128, lr = 1e-3, seed = 1, train_samples = 0, test_samples = 0,
  root = data.FashionMNIST.default_root, threads = 0, run_name = "vae",
}

dist.init_process_group()
local rank, world = dist.get_rank(), dist.get_world_size()
if cfg.threads > 0 then ddp.set_num_threads(cfg.threads) end
ddp.seed_everything(cfg.seed + rank) -- each rank draws its own noise; DDP copies rank 0's weights
local device = ddp.device()

local VAE = nn.Module:extend("VAE")

function VAE:__init()
  self.fc1 = nn.Linear(784, 400)
  self.fc21 = nn.Linear(400, 20)
  self.fc22 = nn.Linear(400, 20)
  self.fc3 = nn.Linear(20, 400)
  self.fc4 = nn.Linear(400, 784)
end

function VAE:encode(x)
  local h1 = self.fc1(x):relu()
  return self.fc21(h1), self.fc22(h1)
end

function VAE:reparameterize(mu, logvar)
  local std = (logvar * 0.5):exp()
  return mu + ddp.randn_like(std) * std
end

function VAE:decode(z) return self.fc4(self.fc3(z):relu()):sigmoid() end

function VAE:forward(x)
  local mu, logvar = self:encode(x:view(-1, 784))
  return self:decode(self:reparameterize(mu, logvar)), mu, logvar
end

-- per image (reduction "none" summed over the pixels): reconstruction + KL divergence
local function loss_per_image(recon, x, mu, logvar)
  local bce = F.binary_cross_entropy(recon, x:view(-1, 784), { reduction = "none" }):sum(2)
  local kld = (1 + logvar - mu:square() - logvar:exp()):sum(2) * -0.5
  return bce + kld
end

-- pytorch/examples' loss_function: the batch's sum
local function loss_function(recon, x, mu, logvar)
  local bce = F.binary_cross_entropy(recon, x:view(-1, 784), { reduction = "sum" })
  local kld = (1 + logvar - mu:square() - logvar:exp()):sum() * -0.5
  return bce + kld
end

local model = dist.DistributedDataParallel(VAE():to(device))
local opt = optim.Adam(model:parameters(), { lr = cfg.lr })

local function split(name, limit)
  local set = data.FashionMNIST { root = cfg.root, split = name }
  if limit > 0 and limit < #set then
    local idx = {}
    for i = 1, limit do idx[i] = i end
    set = data.Subset(set, idx)
  end
  return set
end
local train_set, test_set = split("train", cfg.train_samples), split("test", cfg.test_samples)
local train_sampler = data.DistributedSampler(train_set, { shuffle = true, seed = cfg.seed })
local test_sampler = data.DistributedSampler(test_set, { shuffle = false })
local train_loader = data.DataLoader(train_set, { batch_size = cfg.batch_size, sampler = train_sampler })
local test_loader = data.DataLoader(test_set, { batch_size = cfg.batch_size, sampler = test_sampler })

ddp.print(string.format("VAE on Fashion-MNIST, %d process(es) (%s): %d train / %d test images, batch %d x %d, " ..
  "Adam lr %g", world, device, #train_set, #test_set, cfg.batch_size, world, cfg.lr))

for epoch = 1, cfg.epochs do
  model:train()
  train_sampler:set_epoch(epoch)
  local sum, n = 0, 0
  for x in train_loader:iter() do
    x = x:to(device)
    opt:zero_grad()
    local recon, mu, logvar = model(x)
    local loss = loss_function(recon, x, mu, logvar)
    loss:backward()
    opt:step()
    sum, n = sum + loss:item(), n + x:size(1)
  end
  local totals = ddp.tensor({ sum, n }, { dtype = "float64", device = device })
  dist.all_reduce(totals, "sum") -- every rank's images
  model:eval()
  local per_image = {}
  ddp.no_grad(function()
    for x in test_loader:iter() do
      x = x:to(device)
      local recon, mu, logvar = model(x)
      per_image[#per_image + 1] = loss_per_image(recon, x, mu, logvar)
    end
  end)
  -- each test image once (the sampler's padding dropped)
  local test = dist.gather_for_metrics(ddp.cat(per_image), test_sampler)
  ddp.print(string.format("====> Epoch: %d Average loss: %.4f", epoch, totals[1]:item() / totals[2]:item()))
  ddp.print(string.format("====> Test set loss: %.4f", test:sum():item() / test:size(1)))
end

if ddp.is_main() then ddp.save(model.module:state_dict(), run_dir .. "/model.safetensors") end
dist.barrier()
dist.destroy_process_group()
