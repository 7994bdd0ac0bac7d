-- DistributedDataParallel on the GPU: N ranks with batch B each must end
-- with the parameters of one process training on batch N*B, and of one
-- process accumulating N micro-batches of B (DESIGN.md section 7). Rank 0
-- trains the single-process references itself and prints the largest
-- difference: "ddp equivalence: ok (max diff ...)".
-- Run: ddplua --nproc 2 --backend cpu tests/gpu/scripts/ddp_equivalence.lua backend=cpu
--      ddplua tests/gpu/scripts/ddp_equivalence.lua backend=nccl port=29556
local ddp = require "ddplua"
local nn, optim, dist = ddp.nn, ddp.optim, ddp.distributed
local cfg = ddp.config { backend = "cpu", port = 29556, steps = 5, batch = 16, tol = 1e-5 }

if cfg.backend == "nccl" and not os.getenv("WORLD_SIZE") then
  dist.init_process_group { backend = "nccl", init_method = "tcp://127.0.0.1:" .. cfg.port, world_size = 1, rank = 0 }
else
  dist.init_process_group { backend = cfg.backend }
end
local rank, world = dist.get_rank(), dist.get_world_size()
local dev = ddp.device()
assert(dev:match("^cuda:"), "expected a GPU device, got " .. dev)

local function make_model()
  ddp.manual_seed(42) -- identical initial weights on every rank and for the references
  return nn.Sequential { nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 5) }
end

-- the global batches, the same on every rank
ddp.manual_seed(7)
local B, N = cfg.batch, world
local xs, ys = {}, {}
for s = 1, cfg.steps do
  xs[s] = ddp.randn(N * B, 20)
  ys[s] = (ddp.rand(N * B) * 5):long() + 1
end
local loss_fn = nn.CrossEntropyLoss()

-- DDP: rank r takes rows r*B+1 .. (r+1)*B of every global batch
local model = make_model()
model = model:to(dev) or model
local ddp_model = dist.DistributedDataParallel(model)
local opt = optim.SGD(ddp_model:parameters(), { lr = 0.1, momentum = 0.9 })
for s = 1, cfg.steps do
  opt:zero_grad()
  local x = xs[s]:narrow(1, rank * B + 1, B):to(dev)
  local y = ys[s]:narrow(1, rank * B + 1, B):to(dev)
  loss_fn(ddp_model(x), y):backward()
  opt:step()
end

local function flat_params(m)
  local out = {}
  for _, p in ipairs(m:parameters()) do out[#out + 1] = p:detach():to("cpu"):double():reshape(-1) end
  return ddp.cat(out, 1)
end

if rank == 0 then
  -- one process, batch N*B
  local big = make_model()
  big = big:to(dev) or big
  local o1 = optim.SGD(big:parameters(), { lr = 0.1, momentum = 0.9 })
  for s = 1, cfg.steps do
    o1:zero_grad()
    loss_fn(big(xs[s]:to(dev)), ys[s]:to(dev)):backward()
    o1:step()
  end
  -- one process accumulating N micro-batches of B (each loss divided by N)
  local acc = make_model()
  acc = acc:to(dev) or acc
  local o2 = optim.SGD(acc:parameters(), { lr = 0.1, momentum = 0.9 })
  for s = 1, cfg.steps do
    o2:zero_grad()
    for r = 0, N - 1 do
      local x = xs[s]:narrow(1, r * B + 1, B):to(dev)
      local y = ys[s]:narrow(1, r * B + 1, B):to(dev)
      local micro = loss_fn(acc(x), y) / N
      micro:backward()
    end
    o2:step()
  end
  local p = flat_params(model)
  local d1 = (p - flat_params(big)):abs():max():item()
  local d2 = (p - flat_params(acc)):abs():max():item()
  local worst = math.max(d1, d2)
  assert(worst < cfg.tol, string.format("DDP differs from single-process training: %.3g vs batch N*B, %.3g vs "
                                        .. "accumulation (tolerance %g)", d1, d2, cfg.tol))
  print(string.format("ddp equivalence: ok (max diff %.3g, world %d, backend %s)", worst, world, cfg.backend))
end
dist.barrier()
dist.destroy_process_group()
