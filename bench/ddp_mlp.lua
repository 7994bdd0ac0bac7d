-- Data-parallel MLP training throughput: the workload of
-- ../shared/peers/torch_ddp_mlp.py NPROC STEPS BATCH (MLP 784-1024-1024-10
-- on Fashion-MNIST, SGD lr 0.05 momentum 0.9, batch BATCH per rank, 1 BLAS
-- thread per rank, DistributedSampler indices, batches cut at
-- (i * batch) % (n - batch), 5 warm-up steps, barrier, STEPS timed steps,
-- barrier).
--
--   ddplua --nproc 2 bench/ddp_mlp.lua [steps=200] [batch=64]
--
-- Rank 0 prints: samples/s over all ranks, the reducer's bucket counts, and
-- how many buckets started their all-reduce during backward.
local ddp = require "ddplua"
local nn, optim, data, dist = ddp.nn, ddp.optim, ddp.data, ddp.distributed

local cfg = { steps = 200, batch = 64 }
for _, a in ipairs(arg or {}) do
  local k, v = a:match("^(%w+)=(%d+)$")
  if not k or cfg[k] == nil then error("usage: ddplua --nproc N bench/ddp_mlp.lua [steps=N] [batch=N], got " .. a, 0) end
  cfg[k] = math.tointeger(tonumber(v))
end

dist.init_process_group()
local world, rank = dist.get_world_size(), dist.get_rank()
ddp.set_num_threads(1)
ddp.manual_seed(0)
local ds = data.FashionMNIST { split = "train" }
local model = nn.Sequential {
  nn.Flatten(), nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10),
}
model = dist.DistributedDataParallel(model)
local opt = optim.SGD(model:parameters(), { lr = 0.05, momentum = 0.9 })
local criterion = nn.CrossEntropyLoss()
local idx = data.DistributedSampler(ds, { num_replicas = world, rank = rank }):indices()
local n, bs = #idx, cfg.batch

local function step(i)
  local first = (i * bs) % (n - bs) + 1
  local x, y = ds:get_batch(table.move(idx, first, first + bs - 1, 1, {}))
  opt:zero_grad()
  local loss = criterion(model(x), y)
  loss:backward()
  opt:step()
  return loss
end

for i = 0, 4 do step(i) end
dist.barrier()
local t0 = ddp.clock()
local loss
for i = 0, cfg.steps - 1 do loss = step(i) end
dist.barrier()
local dt = ddp.clock() - t0
local st = model:reducer_stats()
if rank == 0 then
  print(string.format("ddplua_ddp_mlp nproc=%d steps=%d batch/rank=%d time=%.3fs samples/s=%.0f loss=%.3f " ..
    "buckets=%d launched_in_backward=%d first_bucket_before_end_ms=%.3f finalize_ms/step=%.3f", world, cfg.steps, bs,
    dt, world * cfg.steps * bs / dt, loss:item(), st.buckets, st.launched_in_backward, st.first_launch_before_end_ms,
    st.finalize_ms_total / st.backward_passes))
end
dist.destroy_process_group()
