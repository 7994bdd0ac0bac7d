-- A rank that stops making progress (hostile_spec's blame tests): rank
-- FROZEN (arg[1]) stops itself with SIGSTOP before the all_reduce the others
-- enter; they time out waiting for it. The host must name rank FROZEN.
local ddp = require "ddplua"
local dist = ddp.distributed
local frozen = tonumber(arg[1])
dist.init_process_group()
if dist.get_rank() == frozen then os.execute("kill -STOP $PPID") end
dist.all_reduce(ddp.ones(4))
print("rank " .. dist.get_rank() .. " done")
