-- One rank of a 2-process job started by hand, as the seed tutorial does:
--   ddplua tcp_pair.lua PORT RANK
local ddp = require "ddplua"
local dist = ddp.distributed
local port, rank = tonumber(arg[1]), tonumber(arg[2])
dist.init_process_group { backend = "cpu", init_method = "tcp://127.0.0.1:" .. port, world_size = 2, rank = rank,
  timeout = 30 }
local t = ddp.full({ 4 }, rank + 1.0)
dist.all_reduce(t, "sum")
print(string.format("rank %d sum %.1f", rank, t:min():item()))
dist.destroy_process_group()
