-- One node of a 2-node job whose nodes live in different network
-- namespaces (tests/mp/faults_spec.lua): all_reduce across the veth link.
local ddp = require "ddplua"
local dist = ddp.distributed
dist.init_process_group { backend = "cpu" }
local rank = dist.get_rank()
local t = ddp.full({ 1000003 }, rank + 1.0)
dist.all_reduce(t, "sum")
local lo, hi = t:min():item(), t:max():item()
print(string.format("rank %d node %s sum %.1f %.1f", rank, os.getenv("NODE_RANK"), lo, hi))
dist.destroy_process_group()
