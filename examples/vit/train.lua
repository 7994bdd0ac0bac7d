-- A Vision Transformer (examples/vit/model.lua: patches of 4 x 4 pixels, a class token, pre-norm Transformer
-- encoder layers with GELU, the head on the class token) on Fashion-MNIST, data-parallel, in the recipe ViTs
-- train with: AdamW with weight decay, a linear warm-up then a cosine learning rate, label smoothing.
--
--   ddplua examples/vit/train.lua epochs=2
--   ddplua --nproc 2 examples/vit/train.lua
--
-- Prints, per epoch, the training loss (every rank's batches) and images/s, and the test loss and accuracy (each
-- test image once, gathered from the ranks). examples/vit/torch_vit.py is the same run in PyTorch. Settings:
-- epochs=2 batch_size=128 (per process) lr=1e-3 weight_decay=0.05 warmup=100 (steps) label_smoothing=0.1 dim=64
-- depth=4 heads=4 mlp=128 patch=4 dropout=0 seed=1 train_samples=20000 test_samples=10000 (0 = the whole split)
-- root=<dataset dir> threads=0 log_every=100 run_name=vit (runs/vit/model.safetensors).
local ddp = require "ddplua"
local F, optim, data, dist = ddp.nn.F, ddp.optim, ddp.data, ddp.distributed
local here = (arg and arg[0] or "examples/vit/train.lua"):gsub("[^/]*$", "")
local ViT = dofile(here .. "model.lua")

local cfg, run_dir = ddp.config {
  epochs = 2, batch_size = 128, lr = 1e-3, weight_decay = 0.05, warmup = 100, label_smoothing = 0.1, dim = 64,
  depth = 4, heads = 4, mlp = 128, patch = 4, dropout = 0.0, seed = 1, train_samples = 20000, test_samples = 10000,
  root = data.FashionMNIST.default_root, threads = 0, log_every = 100, run_name = "vit",
}

dist.init_process_group()
local rank, world = dist.get_rank(), dist.get_world_size()
if cfg.threads > 0 then ddp.set_num_threads(cfg.threads) end
ddp.manual_seed(cfg.seed) -- the same initial weights on every rank (DDP broadcasts rank 0's anyway)
local device = ddp.device()

local net = ViT { image = 28, patch = cfg.patch, channels = 1, dim = cfg.dim, depth = cfg.depth, heads = cfg.heads,
  mlp = cfg.mlp, num_classes = 10, dropout = cfg.dropout }:to(device)
local model = dist.DistributedDataParallel(net)
-- weight decay on the matrices only (not on biases, norms, the class token or the position embeddings)
local decay, no_decay = {}, {}
for name, p in net:named_parameters() do
  local t = (p:dim() >= 2 and not name:find("_token") and not name:find("pos_embed")) and decay or no_decay
  t[#t + 1] = p
end
local opt = optim.AdamW({ { params = decay, weight_decay = cfg.weight_decay }, { params = no_decay, weight_decay = 0 } },
  { lr = cfg.lr })
ddp.seed_everything(cfg.seed + rank) -- each rank's own dropout

local function split(name, limit) -- the first `limit` images (0: all)
  local set = data.FashionMNIST { root = cfg.root, split = name }
  return (limit > 0 and limit < #set) and data.Subset(set, ddp.arange(1, limit + 1):tolist()) or set
end
local train_set, test_set = split("train", cfg.train_samples), split("test", cfg.test_samples)
local train_sampler = data.DistributedSampler(train_set, { shuffle = true, seed = cfg.seed })
local test_sampler = data.DistributedSampler(test_set, { shuffle = false })
local train_loader = data.DataLoader(train_set, { batch_size = cfg.batch_size, sampler = train_sampler })
local test_loader = data.DataLoader(test_set, { batch_size = cfg.batch_size, sampler = test_sampler })
local function images(x) return ((x:view(x:size(1), 1, 28, 28) - 0.2860) / 0.3530):to(device) end

ddp.print(string.format("ViT (dim %d, depth %d, heads %d, patch %d) on Fashion-MNIST, %d process(es) (%s): " ..
  "%d train / %d test images, batch %d x %d, AdamW lr %g", cfg.dim, cfg.depth, cfg.heads, cfg.patch, world, device,
  #train_set, #test_set, cfg.batch_size, world, cfg.lr))

local steps_per_epoch = math.ceil(#train_sampler / cfg.batch_size)
local total_steps, step = cfg.epochs * steps_per_epoch, 0
local function lr_at(s) -- linear warm-up, then cosine to 0
  if s < cfg.warmup then return cfg.lr * (s + 1) / cfg.warmup end
  return cfg.lr * 0.5 * (1 + math.cos(math.pi * (s - cfg.warmup) / math.max(1, total_steps - cfg.warmup)))
end
local ls = { label_smoothing = cfg.label_smoothing }
for epoch = 1, cfg.epochs do
  model:train()
  train_sampler:set_epoch(epoch)
  local t0, sum, n = ddp.clock(), 0, 0
  for x, y in train_loader:iter() do
    x, y = images(x), y:to(device)
    for _, g in ipairs(opt.param_groups) do g.lr = lr_at(step) end
    opt:zero_grad()
    local loss = F.cross_entropy(model(x), y, ls)
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
  local losses, hits = {}, {}
  ddp.no_grad(function()
    for x, y in test_loader:iter() do
      x, y = images(x), y:to(device)
      local out = model(x)
      losses[#losses + 1] = F.cross_entropy(out, y, { reduction = "none" })
      hits[#hits + 1] = out:argmax(2):eq(y):to("float32")
    end
  end)
  local test_loss = dist.gather_for_metrics(ddp.cat(losses), test_sampler)
  local correct = dist.gather_for_metrics(ddp.cat(hits), test_sampler)
  ddp.print(string.format("Epoch %d: train loss %.4f, %.0f images/s | test loss %.4f, accuracy %d/%d (%.2f%%)", epoch,
    totals[1]:item() / totals[2]:item(), totals[2]:item() / seconds, test_loss:mean():item(), correct:sum():item(),
    correct:size(1), 100 * correct:mean():item()))
end

if ddp.is_main() then ddp.save(net:state_dict(), run_dir .. "/model.safetensors") end
dist.barrier()
dist.destroy_process_group()
