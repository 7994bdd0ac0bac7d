-- torchvision's resnet18 (examples/resnet/model.lua: the same layout and
-- state_dict names) trained on the seed's CSV-image workflow
-- (data.CSVImageDataset: one labels.csv split into train/valid/test,
-- random rotation, resize, normalize), at a small image size, under DDP.
--
--   ddplua examples/csv_images/make_dataset.lua out=runs/fashion_csv n=6000
--   ddplua --config configs/resnet.yaml                       # 2 processes
--   ddplua --nproc 2 examples/resnet/train.lua data=runs/fashion_csv epochs=1 width=16
--   ddplua examples/resnet/train.lua data=runs/fashion_csv epochs=1 width=16 autocast=bfloat16
--
-- The images are grayscale: conv1 takes in_channels (1); width scales the
-- stages (64: torchvision's 64, 128, 256, 512). Prints per epoch the loss,
-- the validation accuracy and images/s, then the test accuracy, and saves
-- the model to <data>/resnet18.safetensors (torchvision's names).
local ddp = require "ddplua"
local nn, optim, data, dist = ddp.nn, ddp.optim, ddp.data, ddp.distributed
local T = data.transforms
local resnet = dofile((arg and arg[0] or "examples/resnet/train.lua"):gsub("train%.lua$", "model.lua"))

local cfg = ddp.config {
  data = "runs/fashion_csv", -- directory with labels.csv (path,label) and the images
  epochs = 3,
  batch_size = 64,
  lr = 0.1,
  momentum = 0.9,
  weight_decay = 5e-4,
  seed = 42,
  img_size = 32,
  rotate_degree = 10,
  width = 64,
  in_channels = 1,
  num_workers = 2,
  limit = 0, -- > 0: use only the first `limit` training images (quick runs)
  sync_bn = true, -- under several processes, SyncBatchNorm; false: each rank's own batch statistics (plain
                  -- BatchNorm under DDP, all PyTorch 1.13 offers on the CPU)
  autocast = "none", -- none | bfloat16 (convolutions and the classifier in bf16, float32 master weights, batch norm
                     -- and loss in float32: ddplua's autocast policy, README)
}
if cfg.autocast ~= "none" and cfg.autocast ~= "bfloat16" then
  error("autocast must be none or bfloat16, got " .. tostring(cfg.autocast), 0)
end

-- the model (and the loss, as PyTorch's recipe puts both inside `with torch.autocast(...)`) under autocast when asked
local function autocast(fn)
  if cfg.autocast == "none" then return fn() end
  return ddp.autocast(cfg.autocast, fn)
end

dist.init_process_group() -- env:// from the launcher; a world of one without it
local rank, world = dist.get_rank(), dist.get_world_size()
local device = ddp.device()
ddp.seed_everything(cfg.seed + rank)

local function transform(train)
  local norm = T.Normalize { mean = { 0.5 }, std = { 0.5 } }
  if train then
    return { T.Resize { cfg.img_size, cfg.img_size }, T.RandomRotation(cfg.rotate_degree), T.ToTensor(), norm }
  end
  return { T.Resize { cfg.img_size, cfg.img_size }, T.ToTensor(), norm }
end

local function dataset(split, train)
  return data.CSVImageDataset { csv = cfg.data .. "/labels.csv", split = split, seed = cfg.seed,
    channels = cfg.in_channels, transform = transform(train), num_workers = cfg.num_workers }
end
local train_set, valid_set, test_set = dataset("train", true), dataset("valid", false), dataset("test", false)
local train_items = train_set
if cfg.limit > 0 and cfg.limit < #train_set then
  local idx = {}
  for i = 1, cfg.limit do idx[i] = i end
  train_items = data.Subset(train_set, idx)
end

local function loader(ds, train)
  local sampler = data.DistributedSampler(ds, { shuffle = train, seed = cfg.seed })
  return data.DataLoader(ds, { batch_size = cfg.batch_size, sampler = sampler }), sampler
end
local train_loader, train_sampler = loader(train_items, true)
local valid_loader, valid_sampler = loader(valid_set, false)
local test_loader, test_sampler = loader(test_set, false)

ddp.manual_seed(cfg.seed) -- the same initial weights on every rank (DDP broadcasts rank 0's anyway)
local model = resnet.resnet18 { num_classes = train_set.num_classes, in_channels = cfg.in_channels,
  width = cfg.width }:to(device)
ddp.seed_everything(cfg.seed + rank)
local nparams = 0
for _, p in ipairs(model:parameters()) do nparams = nparams + p:numel() end
ddp.print(string.format("resnet18 (width %d): %.2fM parameters; %d train, %d valid, %d test images, %d classes, " ..
  "%d process(es)%s", cfg.width, nparams / 1e6, #train_items, #valid_set, #test_set, train_set.num_classes, world,
  world == 1 and "" or cfg.sync_bn and ", SyncBatchNorm" or ", BatchNorm per rank"))
if world > 1 and cfg.sync_bn then model = nn.SyncBatchNorm.convert_sync_batchnorm(model) end
model = dist.DistributedDataParallel(model)
local optimizer = optim.SGD(model:parameters(), { lr = cfg.lr, momentum = cfg.momentum,
  weight_decay = cfg.weight_decay })
local scheduler = optim.lr_scheduler.CosineAnnealingLR(optimizer, { T_max = cfg.epochs })

local function evaluate(dl, sampler)
  model:eval()
  local preds, labels = {}, {}
  ddp.no_grad(function()
    for x, y in dl:iter() do
      preds[#preds + 1] = autocast(function() return model(x:to(device)) end):argmax(2)
      labels[#labels + 1] = y:to(device)
    end
  end)
  local p = dist.gather_for_metrics(ddp.cat(preds), sampler)
  local y = dist.gather_for_metrics(ddp.cat(labels), sampler)
  return p:eq(y):sum():item() / math.max(1, y:size(1))
end

for epoch = 1, cfg.epochs do
  train_sampler:set_epoch(epoch)
  train_set:set_epoch(epoch)
  model:train()
  local t0, loss_sum, batches, images = ddp.clock(), 0, 0, 0
  for x, y in train_loader:iter() do
    x, y = x:to(device), y:to(device)
    optimizer:zero_grad()
    local loss = autocast(function() return ddp.cross_entropy(model(x), y) end)
    loss:backward()
    optimizer:step()
    loss_sum, batches, images = loss_sum + loss:item(), batches + 1, images + x:size(1)
  end
  scheduler:step()
  ddp.synchronize()
  local secs = ddp.clock() - t0
  ddp.print(string.format("epoch %d  loss %.4f  valid acc %.4f  %.1f s  %.0f images/s (all processes)", epoch,
    loss_sum / math.max(1, batches), evaluate(valid_loader, valid_sampler), secs, images * world / secs))
end
ddp.print(string.format("test acc %.4f", evaluate(test_loader, test_sampler)))
if ddp.is_main() then
  ddp.save(model.module:state_dict(), cfg.data .. "/resnet18.safetensors", { metadata = { epochs = tostring(cfg.epochs) } })
end
for _, ds in ipairs({ train_set, valid_set, test_set }) do ds:close() end
dist.barrier()
dist.destroy_process_group()
