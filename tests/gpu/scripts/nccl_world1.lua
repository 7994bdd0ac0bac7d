-- The nccl process group at world size 1 through the public dist API:
-- every collective, async handles, barrier, a sub-group, ddp.synchronize()
-- covering async collectives, the errors a user can cause, and a clean
-- shutdown. Prints "nccl world 1: ok".
-- Run: ddplua tests/gpu/scripts/nccl_world1.lua port=29555
local ddp = require "ddplua"
local dist = ddp.distributed
local cfg = ddp.config { port = 29555 }

dist.init_process_group { backend = "nccl", init_method = "tcp://127.0.0.1:" .. cfg.port, world_size = 1, rank = 0,
                          timeout = 60 }
assert(dist.is_initialized() and dist.get_rank() == 0 and dist.get_world_size() == 1)
local dev = ddp.device()
assert(dev:match("^cuda:"), "expected a GPU device, got " .. dev)

local function same(a, b, what)
  local x, y = a:to("cpu"):totable(), b:to("cpu"):totable()
  for i = 1, #y do
    assert(x[i] == y[i], what .. ": element " .. i .. " is " .. tostring(x[i]) .. ", expected " .. tostring(y[i]))
  end
end

local v = ddp.tensor({ 1.5, -2.0, 3.25, 8.0 }, { device = dev })
local ref = v:clone()
for _, op in ipairs({ "sum", "avg", "max", "min", "prod" }) do
  dist.all_reduce(v, op)
  same(v, ref, "all_reduce " .. op)
end
dist.broadcast(v, 0)
same(v, ref, "broadcast")
dist.reduce(v, 0, "sum")
same(v, ref, "reduce")
local out = ddp.zeros(4, { device = dev })
dist.all_gather(out, v)
same(out, ref, "all_gather into a tensor")
local parts = { ddp.zeros(4, { device = dev }) }
dist.all_gather(parts, v)
same(parts[1], ref, "all_gather into a list")
local rs = ddp.zeros(4, { device = dev })
dist.reduce_scatter(rs, { v }, "sum")
same(rs, ref, "reduce_scatter")
local w = dist.all_reduce(v, "sum", { async = true })
w:wait()
same(v, ref, "async all_reduce")
dist.barrier()
local sub = dist.new_group({ 0 })
dist.all_reduce(v, "max", { group = sub })
same(v, ref, "all_reduce on a sub-group")
-- bfloat16 and float64 travel too
local b = ddp.tensor({ 1.0, 2.0 }, { device = dev }):to("bfloat16")
dist.all_reduce(b, "sum")
same(b:float(), ddp.tensor({ 1.0, 2.0 }), "bfloat16 all_reduce")

-- ddp.synchronize() waits for the communication stream too (as
-- torch.cuda.synchronize waits for the device): an async all_gather of
-- 1 GiB that nobody waited for has finished when it returns
local N = 1 << 28
local big = ddp.full({ N }, 1.5, { device = dev })
local gathered = ddp.zeros(N, { device = dev })
local wg = dist.all_gather(gathered, big, { async = true })
ddp.synchronize()
assert(wg:is_completed(), "ddp.synchronize() returned before an async all_gather finished")
same(gathered:narrow(1, N - 1, 2), ddp.tensor({ 1.5, 1.5 }), "async all_gather of 1 GiB")
big, gathered = nil, nil

local ok, err = pcall(dist.all_reduce, ddp.ones(3), "sum")
assert(not ok and tostring(err):find("the input tensor is on the cpu but the nccl group of rank 0 uses cuda:0", 1, true),
       "a CPU tensor on nccl must be refused, naming the device, got: " .. tostring(err))
ok, err = pcall(dist.all_reduce, ddp.ones(3, { device = dev, dtype = "int64" }), "avg")
assert(not ok and tostring(err):find("int64", 1, true), "avg of int64 must be refused, got: " .. tostring(err))

ddp.synchronize()
dist.destroy_process_group()
assert(not dist.is_initialized())
print("nccl world 1: ok")
