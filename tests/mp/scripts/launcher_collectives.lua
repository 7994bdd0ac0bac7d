-- Every collective under the launcher (env:// init from the environment it
-- sets), checked on every rank against values computed here. Rank 0 prints
-- "token <DDPLUA_JOB_TOKEN>" and, at the end, "collectives ok".
--   ddplua --nproc N [--nnodes M --node_rank R --master_port P] launcher_collectives.lua
local ddp = require "ddplua"
local dist = ddp.distributed

dist.init_process_group()
local rank, n = dist.get_rank(), dist.get_world_size()
assert(rank == tonumber(os.getenv("RANK")) and n == tonumber(os.getenv("WORLD_SIZE")))
assert(dist.get_local_rank() == tonumber(os.getenv("LOCAL_RANK")))
ddp.print("token " .. os.getenv("DDPLUA_JOB_TOKEN"))

local function check(cond, what) if not cond then error(string.format("rank %d: %s", rank, what), 2) end end
local tri = n * (n + 1) / 2

for _, size in ipairs { 1, 7, 1000003 } do
  for _, dt in ipairs { "float32", "float64", "int64" } do
    local t = ddp.full({ size }, rank + 1, { dtype = dt })
    dist.all_reduce(t, "sum")
    check(t:min():item() == tri and t:max():item() == tri, "all_reduce sum " .. dt .. " " .. size)
    t = ddp.full({ size }, rank + 1, { dtype = dt })
    dist.all_reduce(t, "max")
    check(t:min():item() == n, "all_reduce max " .. dt)
    t = ddp.full({ size }, rank + 1, { dtype = dt })
    dist.all_reduce(t, "prod")
    local fact = 1
    for r = 1, n do fact = fact * r end
    check(t:max():item() == fact, "all_reduce prod " .. dt)
  end
  local a = ddp.full({ size }, rank + 1.0)
  dist.all_reduce(a, "avg")
  check(math.abs(a:max():item() - tri / n) < 1e-6, "all_reduce avg")
  local b = ddp.full({ size }, rank, { dtype = "uint8" })
  dist.broadcast(b, n - 1)
  check(b:min():item() == n - 1 and b:max():item() == n - 1, "broadcast uint8")
  local out = ddp.zeros(n, size)
  dist.all_gather(out, ddp.full({ size }, rank * 10.0))
  for r = 1, n do check(out[r]:min():item() == (r - 1) * 10 and out[r]:max():item() == (r - 1) * 10, "all_gather") end
  local rs = ddp.zeros(size)
  dist.reduce_scatter(rs, ddp.arange(0, n, { dtype = "float32" }):view(n, 1):expand(n, size):contiguous(), "sum")
  check(rs:min():item() == rank * n and rs:max():item() == rank * n, "reduce_scatter")
  local red = ddp.full({ size }, rank + 1.0)
  dist.reduce(red, 0, "sum")
  check(red:max():item() == (rank == 0 and tri or rank + 1), "reduce")
end

-- async, overlapped with a computation
local w = dist.all_reduce(ddp.ones(1 << 20), "sum", { async = true })
local x = ddp.randn(128, 128)
for _ = 1, 20 do x = (x:matmul(x) * 1e-2):tanh() end
w:wait()

-- point to point around the ring
local nxt, prv = (rank + 1) % n, (rank + n - 1) % n
local got = ddp.zeros(100003)
if rank % 2 == 0 then
  dist.send(ddp.full({ 100003 }, rank + 0.5), nxt)
  dist.recv(got, prv)
else
  dist.recv(got, prv)
  dist.send(ddp.full({ 100003 }, rank + 0.5), nxt)
end
check(got:min():item() == prv + 0.5, "send/recv")

-- a sub-group of the odd ranks
local odd = {}
for r = 1, n - 1, 2 do odd[#odd + 1] = r end
local g = dist.new_group(odd)
if rank % 2 == 1 then
  local s = ddp.ones(1001)
  dist.all_reduce(s, "sum", { group = g })
  check(s:max():item() == #odd, "sub-group all_reduce")
end
dist.barrier()
dist.destroy_process_group()
ddp.print("collectives ok")
