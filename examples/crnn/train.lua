-- A CRNN (Shi et al.'s convolutional recurrent network for text recognition) trained with CTC, data-parallel:
-- each sample a strip of 3 to 6 Fashion-MNIST images side by side at random gaps (28 x 168 pixels), the label
-- the sequence of their classes. Three conv blocks (Conv2d, BatchNorm2d, ReLU, max pooling) read the strip into 42
-- columns, a bidirectional LSTM reads the columns, a Linear gives each column's log-probabilities over the blank
-- and the 10 classes, and nn.CTCLoss aligns them with the label sequence; Adam, gradient clipping.
--
--   ddplua examples/crnn/train.lua epochs=3
--   ddplua --nproc 2 examples/crnn/train.lua
--
-- Prints, per epoch, the training loss (every rank's batches) and strips/s, and the test strips' loss and sequence
-- accuracy (greedy decoding: each column's best class, repeats merged, blanks dropped; a strip counts when its
-- whole sequence is right). Settings: epochs=3 batch_size=32 lr=2e-3 hidden=64 seed=1 train_samples=20000
-- test_samples=2000 (strips, drawn from the split's images) root=<dataset dir> threads=0 log_every=200
-- run_name=crnn (runs/crnn/model.safetensors).
local ddp = require "ddplua"
local nn, F, optim, data, dist = ddp.nn, ddp.nn.F, ddp.optim, ddp.data, ddp.distributed

local cfg, run_dir = ddp.config {
  epochs = 3, batch_size = 32, lr = 2e-3, hidden = 64, seed = 1, train_samples = 20000, test_samples = 2000,
  root = data.FashionMNIST.default_root, threads = 0, log_every = 200, run_name = "crnn",
}

dist.init_process_group()
local rank, world = dist.get_rank(), dist.get_world_size()
if cfg.threads > 0 then ddp.set_num_threads(cfg.threads) end
ddp.seed_everything(cfg.seed + rank)
local device = ddp.device()

local H, W, MIN_LEN, MAX_LEN = 28, 168, 3, 6
local BLANK = 1 -- CTC's blank; class c of Fashion-MNIST (1..10) is label c + 1

local CRNN = nn.Module:extend("CRNN")

function CRNN:__init(hidden)
  local function block(cin, cout, pool)
    return { nn.Conv2d(cin, cout, 3, { padding = 1, bias = false }), nn.BatchNorm2d(cout), nn.ReLU(), nn.MaxPool2d(pool) }
  end
  local layers = {}
  for _, b in ipairs({ block(1, 32, 2), block(32, 64, 2), block(64, 128, { 7, 1 }) }) do
    for _, m in ipairs(b) do layers[#layers + 1] = m end
  end
  self.cnn = nn.Sequential(layers)                   -- [N, 128, 1, 42]
  self.rnn = nn.LSTM(128, hidden, { bidirectional = true })
  self.fc = nn.Linear(2 * hidden, 11)
end

-- x [N, 1, 28, 168] -> log-probabilities [42, N, 11] (time first, as CTC takes them)
function CRNN:forward(x)
  local f = self.cnn(x):squeeze(3):permute(3, 1, 2) -- [42, N, 128]
  local out = self.rnn(f)
  return F.log_softmax(self.fc(out), 3)
end

local net = CRNN(cfg.hidden):to(device)
local model = dist.DistributedDataParallel(net)
local opt = optim.Adam(model:parameters(), { lr = cfg.lr })
local ctc = nn.CTCLoss { blank = BLANK, zero_infinity = true }

local train_set = data.FashionMNIST { root = cfg.root, split = "train" }
local test_set = data.FashionMNIST { root = cfg.root, split = "test" }

-- A dataset of strips: strip i is made from its own generator's draws (the same strip every epoch, on any rank).
local function strips(images, count, seed)
  local set = {}
  local mt = { __len = function() return count end }
  function set.get(i)
    local g = ddp.Generator(seed * 1000003 + i)
    local n = ddp.randint(MIN_LEN, MAX_LEN + 1, { 1 }, { generator = g }):item()
    local picks = ddp.randint(1, #images + 1, { n }, { generator = g }):tolist()
    local room = W - 28 * n                               -- free columns, spread as gaps
    local gaps = ddp.randint(1, 101, { n + 1 }, { generator = g }):double() -- weights of the gaps
    gaps = (gaps / gaps:sum() * room):floor():long():tolist()
    local xs, ys = images:get_batch(picks) -- [n, 1, 28, 28] in [0, 1], classes 1..10
    local img = ddp.zeros(1, H, W)
    local labels, x0 = ys:tolist(), gaps[1]
    for k = 1, n do
      img:narrow(3, x0 + 1, 28):copy_(xs[k])
      labels[k] = labels[k] + 1 -- classes 1..10 -> labels 2..11 (1 is the blank)
      x0 = x0 + 28 + gaps[k + 1]
    end
    return img, labels
  end
  return setmetatable(set, mt)
end

local train_strips = strips(train_set, cfg.train_samples, cfg.seed)
local test_strips = strips(test_set, cfg.test_samples, cfg.seed + 7)
local train_sampler = data.DistributedSampler(train_strips, { shuffle = true, seed = cfg.seed })
local test_sampler = data.DistributedSampler(test_strips, { shuffle = false })

-- a batch of strips: images [B, 1, 28, 168], the labels concatenated, their lengths
local function batch(set, ids)
  local imgs, flat, lens = {}, {}, {}
  for k, i in ipairs(ids) do
    local img, labels = set.get(i)
    imgs[k], lens[k] = img, #labels
    for _, l in ipairs(labels) do flat[#flat + 1] = l end
  end
  local x = ((ddp.stack(imgs) - 0.2860) / 0.3530):to(device)
  return x, ddp.tensor(flat, { dtype = "int64" }), ddp.tensor(lens, { dtype = "int64" })
end

local function batches(sampler)
  local ids = sampler:indices()
  local i = 0
  return function()
    if i >= #ids then return nil end
    local chunk = {}
    for k = i + 1, math.min(i + cfg.batch_size, #ids) do chunk[#chunk + 1] = ids[k] end
    i = i + #chunk
    return chunk
  end
end

-- greedy decoding of log-probabilities [T, N, C] -> N label lists
local function decode(lp)
  local best = lp:argmax(3):t():tolist()
  local out = {}
  for n, row in ipairs(best) do
    local seq, prev = {}, nil
    for _, c in ipairs(row) do
      if c ~= prev and c ~= BLANK then seq[#seq + 1] = c end
      prev = c
    end
    out[n] = seq
  end
  return out
end

ddp.print(string.format("CRNN + CTC on strips of %d-%d Fashion-MNIST images (%dx%d), %d process(es) (%s): %d train / " ..
  "%d test strips, batch %d x %d, Adam lr %g", MIN_LEN, MAX_LEN, H, W, world, device, #train_strips, #test_strips,
  cfg.batch_size, world, cfg.lr))

local step = 0
for epoch = 1, cfg.epochs do
  model:train()
  train_sampler:set_epoch(epoch)
  local t0, sum, n = ddp.clock(), 0, 0
  for ids in batches(train_sampler) do
    local x, tg, tl = batch(train_strips, ids)
    local lp = model(x)
    local loss = ctc(lp, tg, ddp.full({ #ids }, lp:size(1)):long(), tl)
    opt:zero_grad()
    loss:backward()
    nn.utils.clip_grad_norm_(model:parameters(), 5)
    opt:step()
    step = step + 1
    sum, n = sum + loss:item() * #ids, n + #ids
    if step % cfg.log_every == 0 then ddp.print(string.format("epoch %d step %d loss %.4f", epoch, step, loss:item())) end
  end
  local seconds = ddp.clock() - t0
  local totals = ddp.tensor({ sum, n }, { dtype = "float64", device = device })
  dist.all_reduce(totals, "sum")
  model:eval()
  local losses, hits = {}, {}
  ddp.no_grad(function()
    for ids in batches(test_sampler) do
      local x, tg, tl = batch(test_strips, ids)
      local lp = model(x)
      losses[#losses + 1] = F.ctc_loss(lp, tg, ddp.full({ #ids }, lp:size(1)):long(), tl,
        { blank = BLANK, reduction = "none", zero_infinity = true }) / tl:clamp_min(1):float()
      local got, right, at = decode(lp), {}, 0
      local flat = tg:tolist()
      for k, len in ipairs(tl:tolist()) do
        local ok = #got[k] == len
        for j = 1, len do ok = ok and got[k][j] == flat[at + j] end
        right[k], at = ok and 1 or 0, at + len
      end
      hits[#hits + 1] = ddp.tensor(right, { dtype = "float32" })
    end
  end)
  local test_loss = dist.gather_for_metrics(ddp.cat(losses):to(device), test_sampler)
  local correct = dist.gather_for_metrics(ddp.cat(hits):to(device), test_sampler)
  ddp.print(string.format("Epoch %d: train loss %.4f, %.0f strips/s | test loss %.4f, sequence accuracy %d/%d " ..
    "(%.2f%%)", epoch, totals[1]:item() / totals[2]:item(), totals[2]:item() / seconds, test_loss:mean():item(),
    correct:sum():item(), correct:size(1), 100 * correct:mean():item()))
end

if ddp.is_main() then ddp.save(net:state_dict(), run_dir .. "/model.safetensors") end
dist.barrier()
dist.destroy_process_group()
