-- The README's training script: an MLP on Fashion-MNIST under DDP, step by step.
--   ddplua --nproc 2 examples/quickstart.lua [epochs=1 lr=0.1 ...]
local ddp = require "ddplua"
local nn, optim, data, dist = ddp.nn, ddp.optim, ddp.data, ddp.distributed

local cfg, run_dir = ddp.config { epochs = 5, lr = 0.05, batch_size = 64, seed = 0 } -- defaults < YAML < key=value
dist.init_process_group()                       -- env:// from the launcher (a world of 1 without one)
local rank, world = dist.get_rank(), dist.get_world_size()
ddp.seed_everything(cfg.seed + rank)            -- seed + rank: per-rank dropout/augmentation

local device = ddp.device()                     -- "cuda:<local rank>" with a GPU, else "cpu"
local model = nn.Sequential { nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 10) }:to(device)
model = nn.SyncBatchNorm.convert_sync_batchnorm(model) -- BatchNorm -> SyncBatchNorm (none in this MLP)
model = dist.DistributedDataParallel(model)     -- rank 0's weights everywhere; gradients averaged in backward
local opt = optim.SGD(model:parameters(), { lr = cfg.lr, momentum = 0.9 }) -- the optimizer after DDP

local train_set = data.FashionMNIST { split = "train" } -- /usr/share/datasets/fashion-mnist
local sampler = data.DistributedSampler(train_set, { shuffle = true, seed = cfg.seed }) -- the same seed everywhere
local loader = data.DataLoader(train_set, { batch_size = cfg.batch_size, sampler = sampler })
local test_set = data.FashionMNIST { split = "test" }
local test_sampler = data.DistributedSampler(test_set, { shuffle = false })
local test_loader = data.DataLoader(test_set, { batch_size = 1000, sampler = test_sampler })

for epoch = 1, cfg.epochs do
  model:train()
  sampler:set_epoch(epoch)                      -- a new shuffle per epoch, the same on every rank
  local loss
  for x, y in loader:iter() do
    x, y = x:to(device), y:to(device)           -- the batch where the model is (a no-op on the cpu)
    opt:zero_grad()
    loss = ddp.cross_entropy(model(x), y)       -- labels are 1..10
    loss:backward()                             -- buckets are averaged across ranks while backward runs
    opt:step()
  end
  model:eval()
  local preds, labels = {}, {}
  ddp.no_grad(function()
    for x, y in test_loader:iter() do
      preds[#preds + 1], labels[#labels + 1] = model(x:to(device)):argmax(2), y:to(device)
    end
  end)
  preds = dist.gather_for_metrics(ddp.cat(preds), test_sampler) -- every test image once, from all ranks
  labels = dist.gather_for_metrics(ddp.cat(labels), test_sampler)
  local accuracy = preds:eq(labels):float():mean():item()
  ddp.print(string.format("epoch %d  loss %.4f  test accuracy %.2f%%", epoch, loss:item(), 100 * accuracy))
end
if ddp.is_main() then ddp.save(model.module:state_dict(), run_dir .. "/model.safetensors") end -- rank 0 saves
dist.barrier()
dist.destroy_process_group()
