-- Under `ddplua --nproc N --timeout S`: the last rank never calls the second
-- all_reduce; the others fail with the deadline error naming it.
local ddp = require "ddplua"
local dist = ddp.distributed
dist.init_process_group()
local rank, n = dist.get_rank(), dist.get_world_size()
dist.all_reduce(ddp.ones(4))
if rank == n - 1 then
  os.execute("sleep 2")
else
  dist.all_reduce(ddp.ones(10))
end
