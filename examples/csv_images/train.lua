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
local valid_loader = loader(valid_set, false)
local test_loader = loader(test_set, false)

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

-- correct predictions and items over the whole split, summed across ranks
-- (DistributedSampler pads a rank's share by repeating a few items)
local function evaluate(dl)
  model:eval()
  local counts = ddp.zeros(2, { dtype = "float64" })
  ddp.no_grad(function()
    for x, y in dl:iter() do
      x, y = x:to(device), y:to(device)
      local correct = model(x):argmax(2):eq(y):sum():item()
      counts:copy_(counts + ddp.tensor({ correct, y:size(1) }, { dtype = "float64" }))
    end
  end)
  if distributed then
    counts = counts:to(device)
    dist.all_reduce(counts, "sum")
  end
  local c = counts:totable()
  return c[1] / math.max(1, c[2])
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
    loss_sum / math.max(1, batches), evaluate(valid_loader), secs, batches * cfg.batch_size / secs))
end
ddp.print(string.format("test acc %.4f", evaluate(test_loader)))

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
