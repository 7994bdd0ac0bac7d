-- The smallest distributed job: init, one all_reduce, print on rank 0,
-- destroy (the launch-latency workload, as the seed tutorial's first step).
--   ddplua --nproc 2 examples/hello.lua     (under the launcher)
--   ddplua examples/hello.lua [nprocs]      (forks its own ranks with dist.spawn)
local ddp = require "ddplua"
local dist = ddp.distributed

local function main(rank)
  dist.init_process_group()
  local t = ddp.ones(4) * rank
  dist.all_reduce(t, "sum")
  ddp.print("sum", table.concat(t:totable(), ", "))
  dist.destroy_process_group()
end

-- the host runs a plain `ddplua script.lua` as a job of one rank
if tonumber(os.getenv("WORLD_SIZE") or "1") > 1 then
  main(tonumber(os.getenv("RANK")))
else
  dist.spawn(main, tonumber(arg and arg[1]) or 2)
end
