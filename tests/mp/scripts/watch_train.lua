-- Two epochs of a small MLP (with dropout) on the first N Fashion-MNIST
-- images under DDP, for tests/mp/watch_spec.lua: rank 0 prints every
-- step's loss ("LOSS <epoch> <step> <%.17g>"). The data is kept across
-- `ddplua --watch` reruns (ddp.keep); nothing is seeded, so a rerun must
-- start from the generator's default state as a new process does, and the
-- script leaves grad mode off and the generator moved, which a rerun must
-- not inherit.
--   ddplua [--watch] --nproc R watch_train.lua [N=512] [fail_rank=R]
local ddp = require "ddplua"
local nn, optim, data, dist = ddp.nn, ddp.optim, ddp.data, ddp.distributed

local n, fail_rank = 512, nil
for _, a in ipairs(arg) do
  n = tonumber(a:match("^N=(%d+)$")) or n
  fail_rank = tonumber(a:match("^fail_rank=(%d+)$")) or fail_rank
end
local train = ddp.keep("fashion-mnist/train/" .. n, function()
  print("loading the data")
  local full = data.FashionMNIST { split = "train" }
  local idx = {}
  for i = 1, n do idx[i] = i end
  return data.Subset(full, idx)
end)

dist.init_process_group { backend = "cpu" }
local rank = dist.get_rank()
local model = dist.DistributedDataParallel(nn.Sequential {
  nn.Flatten(), nn.Linear(784, 64), nn.ReLU(), nn.Dropout(0.2), nn.Linear(64, 10),
})
local opt = optim.SGD(model:parameters(), { lr = 0.05, momentum = 0.9 })
local sampler = data.DistributedSampler(train, { shuffle = true, seed = 0 })
local loader = data.DataLoader(train, { batch_size = 32, sampler = sampler })
local step = 0
for epoch = 1, 2 do
  sampler:set_epoch(epoch)
  for x, y in loader:iter() do
    if rank == fail_rank and step == 3 then error("rank " .. rank .. " fails at step 3") end
    opt:zero_grad()
    local loss = ddp.cross_entropy(model(x), y)
    loss:backward()
    opt:step()
    step = step + 1
    if rank == 0 then print(string.format("LOSS %d %d %.17g", epoch, step, loss:item())) end
  end
end
print(string.format("DONE rank %d steps %d", rank, step))
dist.destroy_process_group()
ddp.set_grad_enabled(false) -- what a rerun must not inherit
ddp.randn(100)
