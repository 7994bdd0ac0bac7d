-- Memory across init/destroy cycles (hostile_spec): N (arg[1]) cycles of
-- init_process_group, one all_reduce, destroy_process_group, after 100 of
-- warm-up; rank 0 prints "CYCLES <rank KB> <host KB>": how much this rank's
-- RSS and the host's (which serves the store) grew over the N cycles.
local ddp = require "ddplua"
local dist = ddp.distributed
local n = tonumber(arg[1])
local host = io.open("/proc/self/stat"):read("a"):match("^%d+ %b() %S+ (%d+)")
local function rss(pid)
  for l in io.lines("/proc/" .. pid .. "/status") do
    local v = l:match("^VmRSS:%s+(%d+)")
    if v then return tonumber(v) end
  end
end
local rank0, host0
for i = 1, n + 100 do
  dist.init_process_group()
  dist.all_reduce(ddp.ones(8))
  dist.destroy_process_group()
  if i == 100 then
    collectgarbage()
    rank0, host0 = rss("self"), rss(host)
  end
end
collectgarbage()
if os.getenv("RANK") == "0" then print(string.format("CYCLES %d %d", rss("self") - rank0, rss(host) - host0)) end
