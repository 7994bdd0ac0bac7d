-- Fashion-MNIST on one GPU: an MLP (784-512-256-10, ReLU, Adam) trained for
-- a few epochs; prints the test accuracy and the training throughput:
-- "fashion-mnist test accuracy: 89.21% (... samples/s)".
-- Run: ddplua tests/gpu/scripts/fashion_mnist_mlp.lua epochs=8
local ddp = require "ddplua"
local nn, optim, data = ddp.nn, ddp.optim, ddp.data
local cfg = ddp.config { epochs = 8, batch_size = 128, lr = 1e-3, seed = 0,
                         root = "/usr/share/datasets/fashion-mnist" }

ddp.seed_everything(cfg.seed)
local dev = ddp.device()
assert(dev:match("^cuda:"), "expected a GPU device, got " .. dev)
local train = data.FashionMNIST { root = cfg.root, split = "train" }
local test = data.FashionMNIST { root = cfg.root, split = "test" }
local loader = data.DataLoader(train, { batch_size = cfg.batch_size, shuffle = true })
local test_loader = data.DataLoader(test, { batch_size = 1000 })

local model = nn.Sequential { nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                              nn.Linear(256, 10) }
model = model:to(dev) or model
local opt = optim.Adam(model:parameters(), { lr = cfg.lr })
local loss_fn = nn.CrossEntropyLoss()

local samples, t0 = 0, ddp.clock()
for epoch = 1, cfg.epochs do
  model:train()
  for x, y in loader:iter() do
    x, y = x:to(dev), y:to(dev)
    opt:zero_grad()
    local loss = loss_fn(model(x), y)
    loss:backward()
    opt:step()
    samples = samples + x:size(1)
  end
end
ddp.synchronize()
local rate = samples / (ddp.clock() - t0)

model:eval()
local correct, total = 0, 0
ddp.no_grad(function()
  for x, y in test_loader:iter() do
    local pred = model(x:to(dev)):argmax(2)
    correct = correct + pred:eq(y:to(dev)):sum():item()
    total = total + y:size(1)
  end
end)
print(string.format("fashion-mnist test accuracy: %.2f%% (%d test images, %.0f training samples/s)",
                    100 * correct / total, total, rate))
