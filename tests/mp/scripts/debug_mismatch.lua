-- Run with DDPLUA_DEBUG=1: the ranks broadcast different sizes; each prints
-- the error it gets.
local ddp = require "ddplua"
local dist = ddp.distributed
dist.spawn(function(rank)
  dist.init_process_group()
  dist.all_reduce(ddp.ones(3)) -- a matching one first
  local ok, err = pcall(dist.broadcast, ddp.zeros(rank == 0 and 1000 or 999), 0)
  print(string.format("rank %d: %s", rank, ok and "no error" or err))
end, 2)
