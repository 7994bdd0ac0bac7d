-- dist.spawn's children must die with their parent. Each child writes its
-- pid to PIDFILE.<rank> and computes until killed (at most 30 s).
--   ddplua orphan.lua PIDFILE
local ddp = require "ddplua"
ddp.distributed.spawn(function(rank, file)
  local pid = io.open("/proc/self/stat"):read("l"):match("^(%d+)")
  local f = io.open(file .. "." .. rank, "w")
  f:write(pid)
  f:close()
  local t0 = ddp.clock()
  while ddp.clock() - t0 < 30 do end
end, 2, arg[1])
