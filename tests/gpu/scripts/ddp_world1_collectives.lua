-- DistributedDataParallel with SyncBatchNorm in a world of one rank, for
-- DDPLUA_FORCE_COLLECTIVES: trains a few SGD steps under DDP and the same
-- steps on a plain copy of the model, and prints how many collectives the
-- group issued per step and the largest parameter difference:
--   "world1 collectives: <per step> per step, <buckets> bucket(s), max diff <d>"
-- Without the variable DDP's only collective per step is the buffer
-- broadcast; with it, each step adds one all-reduce per bucket and
-- SyncBatchNorm's two (the statistics' all_gather and the backward
-- all_reduce), and the parameters must still equal the plain model's.
-- Run: ddplua tests/gpu/scripts/ddp_world1_collectives.lua backend=cpu|nccl port=N [device=cpu|cuda]
local ddp = require "ddplua"
local nn, optim, dist = ddp.nn, ddp.optim, ddp.distributed
local cfg = ddp.config({ backend = "cpu", port = 29557, device = "", steps = 3, tol = 1e-5 },
                       { save = false, print = false })

dist.init_process_group { backend = cfg.backend, init_method = "tcp://127.0.0.1:" .. cfg.port, world_size = 1,
                          rank = 0 }
local dev = cfg.device ~= "" and cfg.device or ddp.device()

local function make_model()
  ddp.manual_seed(5)
  return nn.Sequential { nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 4) }:to(dev)
end

ddp.manual_seed(9)
local xs, ys = {}, {}
for s = 1, cfg.steps do
  xs[s] = ddp.randn(12, 8):to(dev)
  ys[s] = ((ddp.rand(12) * 4):long() + 1):to(dev)
end
local loss_fn = nn.CrossEntropyLoss()

local model = dist.DistributedDataParallel(nn.SyncBatchNorm.convert_sync_batchnorm(make_model()))
local opt = optim.SGD(model:parameters(), { lr = 0.1, momentum = 0.9 })
local before = ddp.core._collectives_issued()
for s = 1, cfg.steps do
  opt:zero_grad()
  loss_fn(model(xs[s]), ys[s]):backward()
  opt:step()
end
ddp.synchronize()
local per_step = (ddp.core._collectives_issued() - before) / cfg.steps

local plain = make_model()
local o2 = optim.SGD(plain:parameters(), { lr = 0.1, momentum = 0.9 })
for s = 1, cfg.steps do
  o2:zero_grad()
  loss_fn(plain(xs[s]), ys[s]):backward()
  o2:step()
end
local worst = 0
local a, b = model.module:parameters(), plain:parameters()
for i = 1, #a do
  worst = math.max(worst, (a[i]:detach():to("cpu"):double() - b[i]:detach():to("cpu"):double()):abs():max():item())
end
assert(worst < cfg.tol, string.format("DDP at world size 1 differs from the plain model by %.3g", worst))
print(string.format("world1 collectives: %g per step, %d bucket(s), max diff %.3g", per_step,
                    model:reducer_stats().buckets, worst))
dist.destroy_process_group()
