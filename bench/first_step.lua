-- Time to a first training step: what a rerun after an edit waits for. Loads
-- Fashion-MNIST (train and test), wraps the MLP of bench/ddp_mlp.lua in DDP,
-- takes one SGD step and leaves. Timed from outside by bench/launch.lua:
--   ddplua --nproc 2 bench/first_step.lua
local ddp = require "ddplua"
local nn, optim, data, dist = ddp.nn, ddp.optim, ddp.data, ddp.distributed

dist.init_process_group()
local train = data.FashionMNIST { split = "train" }
local test = data.FashionMNIST { split = "test" }
local model = dist.DistributedDataParallel(nn.Sequential {
  nn.Flatten(), nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10),
})
local opt = optim.SGD(model:parameters(), { lr = 0.05, momentum = 0.9 })
local idx = data.DistributedSampler(train):indices()
local x, y = train:get_batch(table.move(idx, 1, 64, 1, {}))
opt:zero_grad()
local loss = nn.CrossEntropyLoss()(model(x), y)
loss:backward()
opt:step()
assert(#test == 10000 and loss:item() == loss:item(), "first_step: bad data or a NaN loss")
dist.destroy_process_group()
