-- The job the store flood is thrown at (tests/mp/hostile_spec.lua): rank 0
-- writes MASTER_PORT to DIR/port; every rank waits for DIR/go, then joins
-- the process group (a new store connection, made while the flood holds the
-- port), runs 300 all_reduces, a new_group and barriers, and prints
-- "RESULT <sum> <ms>"; then rank 0 prints "HOSTCPU <s>": the CPU time the
-- host (where the store runs) used over the next 2 s, while the flood still
-- holds its connections.
local ddp = require "ddplua"
local dist = ddp.distributed
local dir = arg[1]
local rank = tonumber(os.getenv("RANK"))
if rank == 0 then
  local f = assert(io.open(dir .. "/port.tmp", "w"))
  f:write(os.getenv("MASTER_PORT"))
  f:close()
  os.rename(dir .. "/port.tmp", dir .. "/port")
end
for _ = 1, 6000 do
  if io.open(dir .. "/go") then break end
  os.execute("sleep 0.01")
end
local t0 = ddp.clock()
dist.init_process_group { timeout = 60 }
local x = ddp.zeros(1000)
for i = 1, 300 do
  local t = ddp.full({ 1000 }, rank + i)
  dist.all_reduce(t)
  x:add_(t)
end
local g = dist.new_group({ 0, 1 })
dist.barrier(g)
dist.barrier()
local ms = (ddp.clock() - t0) * 1000
print(string.format("RESULT %.1f %.0f", x:sum():item(), ms))
local function host_cpu()
  local host = io.open("/proc/self/stat"):read("a"):match("^%d+ %b() %S+ (%d+)")
  local fields = {}
  for v in io.open("/proc/" .. host .. "/stat"):read("a"):match("%) (.*)$"):gmatch("%S+") do fields[#fields + 1] = v end
  return (tonumber(fields[12]) + tonumber(fields[13])) / 100 -- utime + stime, in clock ticks of 1/100 s
end
if rank == 0 then
  local c0 = host_cpu()
  os.execute("sleep 2")
  print(string.format("HOSTCPU %.3f", host_cpu() - c0))
end
dist.barrier()
dist.destroy_process_group()
