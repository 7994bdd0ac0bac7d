-- The failing rank exits slowly (hostile_spec's blame test): every rank
-- joins the group and enters an all_reduce, except rank FAIL (arg[1]),
-- which raises an error instead, and then exits slowly: at exit its
-- connections close first (so the others fail at once, and exit first),
-- then it takes SLOW seconds (arg[2]) more, as freeing a large heap does.
-- The host must still name rank FAIL, not the first rank to exit.
local ddp = require "ddplua"
local dist = ddp.distributed
local fail, slow = tonumber(arg[1]), arg[2]
local rank = tonumber(os.getenv("RANK"))
dist.init_process_group { timeout = 30 }
if rank == fail then
  _G.slow_exit = setmetatable({}, {
    __gc = function() -- runs at exit, after the error was reported
      dist.destroy_process_group()
      os.execute("sleep " .. slow)
    end,
  })
end
if rank == fail then error("rank " .. rank .. " fails on its own") end
dist.all_reduce(ddp.ones(4))
dist.all_reduce(ddp.ones(4))
print("rank " .. rank .. " done")
