-- Fashion-MNIST, data-parallel, written the way the seed tutorial teaches:
--   init_process_group -> seed + rank -> model -> SyncBatchNorm -> DDP(model)
--   -> optimizer after DDP -> DistributedSampler (shared seed) + set_epoch
--   -> train -> all_gather predictions for whole-test-set accuracy
--   -> print and save on rank 0 -> barrier -> destroy_process_group
--
--   ddplua --nproc 2 examples/fashion_mnist/train.lua                 (the MLP, 2 processes)
--   ddplua --nproc 2 examples/fashion_mnist/train.lua model=cnn
--   ddplua examples/fashion_mnist/train.lua                           (one process)
--   ddplua --config configs/fashion_mlp.yaml                          (settings from YAML)
--   ddplua --nproc 2 examples/fashion_mnist/train.lua resume=runs/fashion_mnist/last.safetensors epochs=6
--   ddplua --watch --nproc 2 examples/fashion_mnist/train.lua epochs=1  (reruns on every save, data kept)
--
-- Settings (key=value, or YAML via --config): model=mlp|cnn epochs=5 lr=0.05 (for a global batch of 64,
-- scaled linearly with batch_size x processes) momentum=0.9
-- schedule=cosine|none batch_size=64 (per process) seed=0 batchnorm=true (CNN: BatchNorm2d after
-- each conv) sync_bn=true (SyncBatchNorm under DDP; false: each rank's BatchNorm uses its own batch, as
-- PyTorch's CPU-only peer must: its SyncBatchNorm runs on GPUs only) train_samples=0 (0 = all 60000) root=<dataset dir> threads=0
-- run_name=fashion_mnist (runs/<run_name>/: config.yaml, metrics.jsonl, last.safetensors) resume=""
-- stop_after=0 (stop after that many epochs of this process, as if interrupted; 0 = run to the end)
-- eval_batch_size=250 (test images per forward: the CNN's first conv output is 100 KB per image in
-- float32, so 1000 at once held 200 MB of activations, four times the dataset)
local ddp = require "ddplua"
local nn, optim, data, dist = ddp.nn, ddp.optim, ddp.data, ddp.distributed

local cfg, run_dir = ddp.config {
  model = "mlp", epochs = 5, lr = 0.05, momentum = 0.9, schedule = "cosine", batch_size = 64, seed = 0,
  batchnorm = true, sync_bn = true, train_samples = 0, root = data.FashionMNIST.default_root, threads = 0,
  run_name = "fashion_mnist", resume = "", log_every = 50, stop_after = 0, eval_batch_size = 250,
}

-- 1. the process group (env:// from the launcher; a 1-process group without it)
dist.init_process_group()
local rank, world = dist.get_rank(), dist.get_world_size()
if cfg.threads > 0 then ddp.set_num_threads(cfg.threads) end
-- seed + rank: dropout/augmentation differ per rank; the model's initial
-- weights do not matter (DDP copies rank 0's to every rank)
ddp.seed_everything(cfg.seed + rank)
local device = ddp.device()

-- 2. the model, SyncBatchNorm, DDP, and the optimizer created after DDP
local function build_model(kind)
  if kind == "mlp" then
    return nn.Sequential {
      nn.Flatten(),
      nn.Linear(784, 1024), nn.ReLU(),
      nn.Linear(1024, 1024), nn.ReLU(),
      nn.Linear(1024, 10),
    }
  elseif kind == "cnn" then
    local function bn(c) return cfg.batchnorm and nn.BatchNorm2d(c) or nil end
    local layers = {}
    local function add(m) if m then layers[#layers + 1] = m end end
    add(nn.Conv2d(1, 32, 3, { padding = 1 })); add(bn(32)); add(nn.ReLU()); add(nn.MaxPool2d(2))  -- 32 x 14 x 14
    add(nn.Conv2d(32, 64, 3, { padding = 1 })); add(bn(64)); add(nn.ReLU()); add(nn.MaxPool2d(2)) -- 64 x 7 x 7
    add(nn.Flatten())
    add(nn.Linear(64 * 7 * 7, 128)); add(nn.ReLU())
    add(nn.Linear(128, 10))
    return nn.Sequential(layers)
  end
  error("model must be mlp or cnn, got " .. tostring(kind), 0)
end

local model = build_model(cfg.model):to(device)
if world > 1 and cfg.sync_bn then model = nn.SyncBatchNorm.convert_sync_batchnorm(model) end
model = dist.DistributedDataParallel(model)
-- lr is given for a global batch of 64 and scaled linearly with the global
-- batch (Goyal et al., "Accurate, Large Minibatch SGD"): 2 ranks x 64 -> 2x
local lr = cfg.lr * cfg.batch_size * world / 64
local opt = optim.SGD(model:parameters(), { lr = lr, momentum = cfg.momentum })
local criterion = nn.CrossEntropyLoss()

-- 3. the data: every rank sees its own shard, the shuffle seed is shared. ddp.keep: under
-- `ddplua --watch` a rerun after an edit takes the decoded images from the last run
local function fashion(split)
  return ddp.keep("fashion-mnist/" .. split .. "/" .. cfg.root, function()
    return data.FashionMNIST { root = cfg.root, split = split }
  end)
end
local train_set = fashion("train")
if cfg.train_samples > 0 then
  local idx = {}
  for i = 1, math.min(cfg.train_samples, #train_set) do idx[i] = i end
  train_set = data.Subset(train_set, idx)
end
local test_set = fashion("test")
local train_sampler = data.DistributedSampler(train_set, { shuffle = true, seed = cfg.seed })
local test_sampler = data.DistributedSampler(test_set, { shuffle = false })
local train_loader = data.DataLoader(train_set, { batch_size = cfg.batch_size, sampler = train_sampler })
local test_loader = data.DataLoader(test_set, { batch_size = cfg.eval_batch_size, sampler = test_sampler })

local scheduler
if cfg.schedule == "cosine" then
  scheduler = optim.lr_scheduler.CosineAnnealingLR(opt, { T_max = cfg.epochs * #train_loader })
elseif cfg.schedule ~= "none" then
  error("schedule must be cosine or none, got " .. tostring(cfg.schedule), 0)
end

local start_epoch, step = 1, 0
if cfg.resume ~= "" then
  local info = ddp.load_checkpoint(cfg.resume, { model = model, optimizer = opt, scheduler = scheduler,
    sampler = train_sampler })
  start_epoch, step = info.epoch + 1, info.step
  ddp.print(string.format("resumed from %s after epoch %d (step %d)", cfg.resume, info.epoch, info.step))
end

-- whole-test-set accuracy: each rank predicts its shard, all_gather
-- collects every rank's results and drops the sampler's padding duplicates
local function evaluate()
  model:eval()
  local preds, labels = {}, {}
  ddp.no_grad(function()
    for x, y in test_loader:iter() do
      preds[#preds + 1] = model(x:to(device)):argmax(2)
      labels[#labels + 1] = y:to(device)
    end
  end)
  model:train()
  local p = dist.gather_for_metrics(ddp.cat(preds), test_sampler)
  local y = dist.gather_for_metrics(ddp.cat(labels), test_sampler)
  return p:eq(y):sum():item() / y:size(1), y:size(1)
end

local norm = (cfg.model ~= "cnn" or not cfg.batchnorm) and ""
  or (world > 1 and cfg.sync_bn) and ", SyncBatchNorm" or world > 1 and ", BatchNorm per rank" or ", BatchNorm"
ddp.print(string.format("Fashion-MNIST %s on %d process(es) (%s): %d train / %d test images, batch %d x %d, " ..
  "SGD lr %g momentum %g, %s schedule%s", cfg.model, world, device, #train_set, #test_set, cfg.batch_size, world,
  lr, cfg.momentum, cfg.schedule, norm))
local log = ddp.metrics.open()
local acc, n_test = nil, 0
for epoch = start_epoch, cfg.epochs do
  train_sampler:set_epoch(epoch) -- a new shuffle every epoch, the same on every rank
  local bar = ddp.progress(#train_loader, { desc = "epoch " .. epoch, batch_size = cfg.batch_size * world })
  local t0 = ddp.clock()
  local sum, n = 0, 0
  for x, y in train_loader:iter() do
    opt:zero_grad()
    local loss = criterion(model(x:to(device)), y:to(device))
    loss:backward() -- gradients are averaged across ranks here, bucket by bucket
    opt:step()
    if scheduler then scheduler:step() end
    step = step + 1
    local l = loss:item()
    sum, n = sum + l, n + 1
    if step % cfg.log_every == 0 then log:log { step = step, epoch = epoch, loss = l } end
    bar:update(1, { loss = l })
  end
  bar:close()
  local train_time = ddp.clock() - t0
  -- the mean training loss over every rank's batches
  local mean = ddp.tensor({ sum / n }, { dtype = "float64", device = device })
  dist.all_reduce(mean, "avg")
  acc, n_test = evaluate()
  log:log_epoch { epoch = epoch, loss = mean:item(), val_acc = acc, train_seconds = train_time }
  ddp.print(string.format("epoch %d/%d  train loss %.4f  test accuracy %.2f%%  (%.1f s, %.0f samples/s)", epoch,
    cfg.epochs, mean:item(), 100 * acc, train_time, #train_set / train_time))
  -- every rank calls it; rank 0 writes (atomically), the others wait
  ddp.save_checkpoint(run_dir .. "/last.safetensors", { model = model, optimizer = opt, scheduler = scheduler,
    sampler = train_sampler, epoch = epoch, step = step, rng = true, config = cfg })
  if cfg.stop_after > 0 and epoch - start_epoch + 1 >= cfg.stop_after then
    ddp.print(string.format("stopping after epoch %d (stop_after=%d)", epoch, cfg.stop_after))
    break
  end
end
log:close()
if acc then
  ddp.print(string.format("final test accuracy %.2f%% (%d test images, each counted once)", 100 * acc, n_test))
end
if ddp.is_main() then -- saving on the main process only
  ddp.save(model.module:state_dict(), run_dir .. "/model.safetensors", { metadata = { epochs = tostring(cfg.epochs) } })
  print("saved " .. run_dir .. "/model.safetensors")
end
dist.barrier()
dist.destroy_process_group()
