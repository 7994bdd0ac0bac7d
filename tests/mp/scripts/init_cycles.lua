-- Memory across init/destroy cycles (hostile_spec): N (arg[1]) cycles of
-- init_process_group, one all_reduce, destroy_process_group, after 100 of
-- warm-up; rank 0 prints "CYCLES <rank KB> <host KB> <rank KB> <host KB>": how
-- much this rank's RSS and the host's (which serves the store) grew over the
-- first and over the second half of the N cycles. A leak grows in both halves;
-- a heap's high-water mark rising once (the host serving more connections at
-- once on a loaded machine) shows in one.
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
local rank0, host0, rank1, host1
for i = 1, n + 100 do
  dist.init_process_group()
  dist.all_reduce(ddp.ones(8))
  dist.destroy_process_group()
  if i == 100 then
    collectgarbage()
    rank0, host0 = rss("self"), rss(host)
  elseif i == 100 + n // 2 then
    collectgarbage()
    rank1, host1 = rss("self"), rss(host)
  end
end
collectgarbage()
local rank2, host2 = rss("self"), rss(host)
if os.getenv("RANK") == "0" then
  print(string.format("CYCLES %d %d %d %d", rank1 - rank0, host1 - host0, rank2 - rank1, host2 - host1))
end
