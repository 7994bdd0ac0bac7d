-- Fashion-MNIST classifier: an MLP (784-1024-1024-10, the default) or a
-- small CNN (two conv layers and two linear ones), trained with SGD and
-- momentum, the learning rate annealed to 0 along a cosine over the run
-- (schedule=none keeps it constant); prints the training loss and the test
-- accuracy after each epoch.
--
--   ddplua examples/fashion_mnist/train.lua
--   ddplua examples/fashion_mnist/train.lua model=cnn epochs=5
--
-- Settings (key=value): model=mlp|cnn epochs=5 lr=0.05 momentum=0.9
-- schedule=cosine|none batch_size=64 seed=0 threads=<BLAS threads, 0: default>
-- root=/usr/share/datasets/fashion-mnist
local ddp = require "ddplua"
local nn, optim, data = ddp.nn, ddp.optim, ddp.data

local defaults = {
  model = "mlp", epochs = 5, lr = 0.05, momentum = 0.9, schedule = "cosine", batch_size = 64, seed = 0,
  root = data.FashionMNIST.default_root, threads = 0,
}

-- key=value arguments over the defaults, typed like the defaults.
local function parse_args(defs, args)
  local cfg = {}
  for k, v in pairs(defs) do cfg[k] = v end
  for _, a in ipairs(args) do
    local k, v = a:match("^([%w_]+)=(.*)$")
    if not k then error("expected key=value arguments, got '" .. a .. "'", 0) end
    if defs[k] == nil then
      local keys = {}
      for name in pairs(defs) do keys[#keys + 1] = name end
      table.sort(keys)
      error(string.format("unknown setting '%s' (settings: %s)", k, table.concat(keys, ", ")), 0)
    end
    if type(defs[k]) == "number" then
      local n = math.tointeger(tonumber(v)) or tonumber(v)
      if n == nil then error(string.format("setting %s expects a number, got '%s'", k, v), 0) end
      cfg[k] = n
    else
      cfg[k] = v
    end
  end
  return cfg
end

local cfg = ddp.config and ddp.config(defaults) or parse_args(defaults, arg or {})

local function build_model(kind)
  if kind == "mlp" then
    return nn.Sequential {
      nn.Flatten(),
      nn.Linear(784, 1024), nn.ReLU(),
      nn.Linear(1024, 1024), nn.ReLU(),
      nn.Linear(1024, 10),
    }
  elseif kind == "cnn" then
    return nn.Sequential {
      nn.Conv2d(1, 32, 3, { padding = 1 }), nn.ReLU(), nn.MaxPool2d(2),  -- 32 x 14 x 14
      nn.Conv2d(32, 64, 3, { padding = 1 }), nn.ReLU(), nn.MaxPool2d(2), -- 64 x 7 x 7
      nn.Flatten(),
      nn.Linear(64 * 7 * 7, 128), nn.ReLU(),
      nn.Linear(128, 10),
    }
  end
  error("model must be mlp or cnn, got " .. tostring(kind), 0)
end

if cfg.threads > 0 then ddp.set_num_threads(cfg.threads) end
ddp.manual_seed(cfg.seed)

local train_set = data.FashionMNIST { root = cfg.root, split = "train" }
local test_set = data.FashionMNIST { root = cfg.root, split = "test" }
local train_loader = data.DataLoader(train_set, { batch_size = cfg.batch_size, shuffle = true })
local test_loader = data.DataLoader(test_set, { batch_size = 1000 })

local model = build_model(cfg.model)
local opt = optim.SGD(model:parameters(), { lr = cfg.lr, momentum = cfg.momentum })
local criterion = nn.CrossEntropyLoss()
local scheduler
if cfg.schedule == "cosine" then
  scheduler = optim.lr_scheduler.CosineAnnealingLR(opt, { T_max = cfg.epochs * #train_loader })
elseif cfg.schedule ~= "none" then
  error("schedule must be cosine or none, got " .. tostring(cfg.schedule), 0)
end

local function evaluate()
  model:eval()
  local correct = 0
  ddp.no_grad(function()
    for x, y in test_loader:iter() do correct = correct + model(x):argmax(2):eq(y):sum():item() end
  end)
  model:train()
  return correct / #test_set
end

print(string.format("Fashion-MNIST %s: %d train / %d test images, batch %d, SGD lr %g momentum %g, %s schedule",
  cfg.model, #train_set, #test_set, cfg.batch_size, cfg.lr, cfg.momentum, cfg.schedule))
local acc
for epoch = 1, cfg.epochs do
  local t0 = ddp.clock()
  local sum, n = 0, 0
  for x, y in train_loader:iter() do
    opt:zero_grad()
    local loss = criterion(model(x), y)
    loss:backward()
    opt:step()
    if scheduler then scheduler:step() end
    sum, n = sum + loss:item(), n + 1
  end
  local train_time = ddp.clock() - t0
  acc = evaluate()
  print(string.format("epoch %d/%d  train loss %.4f  test accuracy %.2f%%  (%.1f s, %.0f samples/s)", epoch,
    cfg.epochs, sum / n, 100 * acc, train_time, #train_set / train_time))
end
print(string.format("final test accuracy %.2f%%", 100 * acc))
