-- Both ranks loop in large all_reduces; rank 1 records its pid once it is
-- inside the loop (tests/mp/faults_spec.lua kills it there with kill -9).
local ddp = require "ddplua"
local dist = ddp.distributed
dist.init_process_group()
local rank = dist.get_rank()
local dir = arg[1]
local f = io.open(dir .. "/token", "w")
f:write(os.getenv("DDPLUA_JOB_TOKEN"))
f:close()
local t = ddp.ones(4 * 1024 * 1024)
for i = 1, 1000000 do
  dist.all_reduce(t, "avg")
  if i == 3 and rank == 1 then
    local pid = io.open("/proc/self/stat"):read("n")
    local p = io.open(dir .. "/pid.tmp", "w")
    p:write(pid)
    p:close()
    os.rename(dir .. "/pid.tmp", dir .. "/pid")
  end
end
