-- all_reduce bandwidth, as nccl-tests reports it: for sizes 4 KiB .. 256 MiB
-- (doubling) the time of one float32 sum all_reduce, algbw = bytes / time and
-- busbw = algbw * 2(n-1)/n, beside this machine's memcpy bandwidth.
--   ddplua examples/allreduce_bench.lua [nproc=2] [min=4096] [max=268435456] [sizes=a,b,..]
--                                       [iters=N] [shared=1] [op=sum]
--   ddplua --nproc 4 examples/allreduce_bench.lua    (under the launcher)
-- shared=1 puts the tensors in the group's shared memory (dist.alloc_shared),
-- as DDP does with its gradient buckets: peers' copies are reduced in place.
local ddp = require "ddplua"
local dist = ddp.distributed

local opt = { nproc = 2, min = 4096, max = 256 << 20, shared = 0, op = "sum" }
for _, a in ipairs(arg or {}) do
  local k, v = a:match("^([%w_]+)=(.*)$")
  if not k then error("allreduce_bench: expected key=value arguments, got '" .. a .. "'") end
  opt[k] = tonumber(v) or v
end

local function sizes()
  local list = {}
  if opt.sizes then
    for s in tostring(opt.sizes):gmatch("%d+") do list[#list + 1] = tonumber(s) end
  else
    local s = opt.min
    while s <= opt.max do
      list[#list + 1] = s
      s = s * 2
    end
  end
  return list
end

-- single-process copy bandwidth of a buffer far larger than the caches
local function memcpy_gbs()
  local n = 64 << 20 -- floats: 256 MiB
  local a, b = ddp.ones(n), ddp.empty(n)
  b:copy_(a)
  local best = math.huge
  for _ = 1, 5 do
    local t0 = ddp.clock()
    b:copy_(a)
    best = math.min(best, ddp.clock() - t0)
  end
  return n * 4 / best / 1e9
end

local function run(rank, memcpy)
  dist.init_process_group()
  local n = dist.get_world_size()
  if rank == 0 then
    print(string.format("all_reduce(%s, float32), %d ranks, %s tensors; memcpy %.2f GB/s", opt.op, n,
      opt.shared == 1 and "shared-memory" or "ordinary", memcpy))
    print(string.format("%12s %10s %8s %12s %10s %10s %8s", "bytes", "floats", "iters", "time(us)", "algbw(GB/s)",
      "busbw(GB/s)", "bus/memcpy"))
  end
  for _, bytes in ipairs(sizes()) do
    local count = bytes // 4
    local t = opt.shared == 1 and dist.alloc_shared(count) or ddp.empty(count)
    assert(t, "allreduce_bench: no shared memory available")
    t:fill_(1)
    local iters = opt.iters or math.max(5, math.min(1000, (512 << 20) // bytes))
    for _ = 1, 3 do dist.all_reduce(t, opt.op) end -- warm-up
    dist.barrier()
    local t0 = ddp.clock()
    for _ = 1, iters do dist.all_reduce(t, opt.op) end
    local dt = ddp.tensor({ (ddp.clock() - t0) / iters }, { dtype = "float64" })
    dist.all_reduce(dt, "max") -- the slowest rank's time, as nccl-tests
    local sec = dt:item()
    local algbw = bytes / sec / 1e9
    local busbw = algbw * 2 * (n - 1) / n
    if rank == 0 then
      print(string.format("%12d %10d %8d %12.1f %10.2f %10.2f %8.2f", bytes, count, iters, sec * 1e6, algbw, busbw,
        busbw / memcpy))
    end
  end
  dist.destroy_process_group()
end

if tonumber(os.getenv("WORLD_SIZE") or "1") > 1 then -- (plain `ddplua script.lua` is a job of one rank)
  -- under the launcher rank 0 measures memcpy while the others wait in init
  local rank = tonumber(os.getenv("RANK"))
  run(rank, rank == 0 and memcpy_gbs() or 0)
else
  local memcpy = memcpy_gbs()
  dist.spawn(run, opt.nproc, memcpy)
end
