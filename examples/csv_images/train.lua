-- A small CNN trained on images listed in a CSV file, the seed tutorial's
-- CXRDataset workflow: one CSV split into train/valid/test, transforms
-- (resize, random rotation, random horizontal flip, to-tensor, normalize),
-- DistributedSampler + DDP when run with several processes.
--
--   ddplua examples/csv_images/make_dataset.lua out=runs/fashion_csv n=6000
--   ddplua examples/csv_images/train.lua data=runs/fashion_csv          -- one process
--   ddplua --nproc 2 examples/csv_images/train.lua data=runs/fashion_csv
--
-- Images are decoded and transformed in C by the dataset's worker threads
-- (num_workers per process) while the model trains on the previous batch.
local ddp = require "ddplua"
local nn, optim, data, dist = ddp.nn, ddp.optim, ddp.data, ddp.distributed
local T = data.transforms

local cfg = ddp.config {
  data = "runs/fashion_csv", -- directory with labels.csv (path,label) and the images
  epochs = 3,
  batch_size = 64,
  lr = 0.05,
  momentum = 0.9,
  seed = 42,
  img_size = 28,
  rotate_degree = 10,
  num_workers = 2,
  backend = "auto", -- process group backend: auto | cpu | nccl
}

-- Under `ddplua --nproc N` the launcher sets WORLD_SIZE; a plain run is one process.
if tonumber(os.getenv("WORLD_SIZE") or "1") > 1 then
  local backend = cfg.backend
  if backend == "auto" then backend = ddp.device():match("^cuda") and "nccl" or "cpu" end
  dist.init_process_group { backend = backend }
end
local distributed = dist.is_initialized()
local rank = distributed and dist.get_rank() or 0
local device = ddp.device()
ddp.seed_everything(cfg.seed + rank) -- different dropout/initial draws per rank; DDP broadcasts rank 0's weights

-- get_transform(train, img_size, rotate_degree) as in the seed
local function get_transform(train)
  local norm = T.Normalize { mean = { 0.5 }, std = { 0.5 } }
  if train then
    return { T.Resize { cfg.img_size, cfg.img_size }, T.RandomRotation(cfg.rotate_degree), T.RandomHorizontalFlip(),
      T.ToTensor(), norm }
  end
  return { T.Resize { cfg.img_size, cfg.img_size }, T.ToTensor(), norm }
end

-- The split uses the same seed on every rank, so the ranks agree on it.
local function dataset(split, train)
  return data.CSVImageDataset { csv = cfg.data .. "/labels.csv", split = split, seed = cfg.seed, channels = 1,
    transform = get_transform(train), num_workers = cfg.num_workers }
end
local train_set, valid_set, test_set = dataset("train", true), dataset("valid", false), dataset("test", false)
ddp.print(string.format("%d train, %d valid, %d test images, %d classes, %d process(es)", #train_set, #valid_set,
  #test_set, train_set.num_classes, distributed and dist.get_world_size() or 1))

local function loader(ds, train)
  local sampler = distributed and data.DistributedSampler(ds, { shuffle = train, seed = cfg.seed }) or nil
  return data.DataLoader(ds, { batch_size = cfg.batch_size, sampler = sampler, shuffle = train and sampler == nil }),
      sampler
end
local train_loader, train_sampler = loader(train_set, true)
local valid_loader, valid_sampler = loader(valid_set, false)
local test_loader, test_sampler = loader(test_set, false)

local side = cfg.img_size // 4
local model = nn.Sequential {
  nn.Conv2d(1, 16, 3, { padding = 1 }), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
  nn.Conv2d(16, 32, 3, { padding = 1 }), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
  nn.Flatten(), nn.Linear(32 * side * side, train_set.num_classes),
}
model:to(device)
if distributed then
  model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
  model = dist.DistributedDataParallel(model)
end
-- the optimizer is created after DDP wraps the model (the seed's rule)
local optimizer = optim.SGD(model:parameters(), { lr = cfg.lr, momentum = cfg.momentum })
local scheduler = optim.lr_scheduler.CosineAnnealingLR(optimizer, { T_max = cfg.epochs })
local criterion = nn.CrossEntropyLoss()

-- accuracy over the whole split: every rank predicts its shard, then
-- gather_for_metrics collects all ranks' results and drops the padding
-- duplicates DistributedSampler adds, so each image counts once
local function evaluate(dl, sampler)
  model:eval()
  local preds, labels = {}, {}
  ddp.no_grad(function()
    for x, y in dl:iter() do
      preds[#preds + 1] = model(x:to(device)):argmax(2)
      labels[#labels + 1] = y:to(device)
    end
  end)
  local p, y = ddp.cat(preds), ddp.cat(labels)
  if distributed then
    p, y = dist.gather_for_metrics(p, sampler), dist.gather_for_metrics(y, sampler)
  end
  return p:eq(y):sum():item() / math.max(1, y:size(1))
end

for epoch = 1, cfg.epochs do
  if train_sampler then train_sampler:set_epoch(epoch) end
  train_set:set_epoch(epoch) -- the augmentations of epoch e are the same however the run got there
  model:train()
  local t0, loss_sum, batches = ddp.clock(), 0, 0
  for x, y in train_loader:iter() do
    x, y = x:to(device), y:to(device)
    optimizer:zero_grad()
    local loss = criterion(model(x), y)
    loss:backward()
    optimizer:step()
    loss_sum, batches = loss_sum + loss:item(), batches + 1
  end
  scheduler:step()
  ddp.synchronize()
  local secs = ddp.clock() - t0
  ddp.print(string.format("epoch %d  loss %.4f  valid acc %.4f  %.1f s (%.0f images/s per process)", epoch,
    loss_sum / math.max(1, batches), evaluate(valid_loader, valid_sampler), secs, batches * cfg.batch_size / secs))
end
ddp.print(string.format("test acc %.4f", evaluate(test_loader, test_sampler)))

if ddp.is_main() then
  ddp.save(model:state_dict(), cfg.data .. "/model.safetensors", { metadata = { epochs = tostring(cfg.epochs) } })
end
train_set:close()
valid_set:close()
test_set:close()
if distributed then
  dist.barrier()
  dist.destroy_process_group()
end
