-- For hostile_spec's kill -9 tests: each rank writes its job token and pid
-- (DIR = arg[1]), starts a child process (`sleep MARKER`, arg[2]) and joins
-- the process group; rank 1 joins LATE (arg[3]) seconds after rank 0, which
-- meanwhile holds the node's new shared-memory segment, waiting for it.
-- Then every rank waits in a barrier for a rank that never comes (rank 1
-- sleeps).
local ddp = require "ddplua"
local dir, marker, late = arg[1], arg[2], tonumber(arg[3] or "0")
local rank = os.getenv("RANK")
local function put(name, text)
  local f = assert(io.open(dir .. "/" .. name .. ".tmp", "w"))
  f:write(text)
  f:close()
  os.rename(dir .. "/" .. name .. ".tmp", dir .. "/" .. name)
end
put("token", os.getenv("DDPLUA_JOB_TOKEN"))
os.execute("sleep " .. marker .. " &")
put("pid_" .. rank, tostring(io.open("/proc/self/stat"):read("n")))
if rank == "1" then os.execute("sleep " .. late) end
ddp.distributed.init_process_group()
put("joined_" .. rank, "1")
if rank == "1" then os.execute("sleep 60") end
ddp.distributed.barrier()
