-- This process's thread count, for specs that check a group's threads are
-- gone after destroy_process_group.
local ddp = require "ddplua"

local M = {}

-- /proc/self/status's Threads: line.
function M.count()
  for line in io.lines("/proc/self/status") do
    local n = line:match("^Threads:%s+(%d+)")
    if n then return tonumber(n) end
  end
end

-- The count once it reaches want, or after 2 s what it is then: a thread
-- pthread_join returned for is still counted until the kernel has finished
-- its exit, a moment later (seen on a loaded machine: 4 for 3).
function M.settled(want)
  local deadline = ddp.clock() + 2
  local n = M.count()
  while n ~= want and ddp.clock() < deadline do n = M.count() end
  return n
end

return M
