-- A small DDP training run that survives restarts (ddp.checkpoint_every +
-- ddp.resume), for tests/mp/restart_spec.lua:
--   ddplua --nproc 2 [--max_restarts N] restart_train.lua dir=D [tag=T] [epochs=2] [every=3]
--          [kill_rank=R kill_step=S kill_gens=0,1] [pause_rank=R pause_step=S]
-- kill_*: rank R kills itself with SIGKILL at its step S in the listed generations
-- (DDPLUA_RESTART_COUNT); pause_*: rank R writes D/paused and sleeps at step S in
-- generation 0 (the test then kills its node). Every rank appends the dataset
-- positions of each batch it trains on to D/seen_<generation>_<rank>
-- ("<step> <epoch> <positions...>"); rank 0 saves the final parameters as D/final_<T>.safetensors.
local ddp = require "ddplua"
local nn, optim, data, dist = ddp.nn, ddp.optim, ddp.data, ddp.distributed

local o = { tag = "run", epochs = "2", every = "3" }
for _, a in ipairs(arg) do
  local k, v = a:match("^([%w_]+)=(.*)$")
  if k then o[k] = v end
end
local gen = tonumber(os.getenv("DDPLUA_RESTART_COUNT") or "0")

-- the data: the same 200 samples everywhere (fixed seed, before the ranks' seeds)
local N, D, C = 200, 16, 4
ddp.manual_seed(1234)
local x = ddp.randn(N, D)
local y = (ddp.rand(N) * C):long():clamp(0, C - 1) + 1
local pos = ddp.arange(1, N + 1)
local set = data.TensorDataset(x, y, pos)

dist.init_process_group { backend = "cpu" }
local rank = dist.get_rank()
ddp.seed_everything(7 + rank)
local model = dist.DistributedDataParallel(nn.Sequential { nn.Linear(D, 32), nn.ReLU(), nn.Linear(32, C) })
local opt = optim.SGD(model:parameters(), { lr = 0.05, momentum = 0.9 })
local sampler = data.DistributedSampler(set, { shuffle = true, seed = 3 })
local loader = data.DataLoader(set, { batch_size = 8, sampler = sampler })
local sched = optim.lr_scheduler.StepLR(opt, { step_size = 10, gamma = 0.5 })

local ckpt = ddp.checkpoint_every { path = o.dir .. "/resume.safetensors", steps = tonumber(o.every), model = model,
  optimizer = opt, scheduler = sched, loader = loader }
local start = ddp.resume()
local log = assert(io.open(string.format("%s/seen_%d_%d", o.dir, gen, rank), "a"))
local step = start.step
local function listed(gens) for g in (gens or ""):gmatch("%d+") do if tonumber(g) == gen then return true end end end
for epoch = start.epoch, tonumber(o.epochs) do
  sampler:set_epoch(epoch)
  for xb, yb, pb in loader:iter() do
    step = step + 1
    if o.kill_rank and rank == tonumber(o.kill_rank) and step == tonumber(o.kill_step) and listed(o.kill_gens) then
      log:close()
      os.execute("kill -9 " .. io.open("/proc/self/stat"):read("n"))
    end
    if o.pause_rank and rank == tonumber(o.pause_rank) and step == tonumber(o.pause_step) and gen == 0 then
      io.open(o.dir .. "/paused", "w"):close()
      os.execute("sleep 60")
    end
    opt:zero_grad()
    local loss = ddp.cross_entropy(model(xb), yb)
    loss:backward()
    opt:step()
    sched:step()
    log:write(step, " ", epoch, " ", table.concat(pb:totable(), " "), "\n")
    log:flush()
    ckpt:step()
  end
end
log:close()
if rank == 0 then ddp.save(model.module:state_dict(), string.format("%s/final_%s.safetensors", o.dir, o.tag)) end
print(string.format("done rank %d world %d generation %d steps %d", rank, dist.get_world_size(), gen, step))
dist.destroy_process_group()
