-- The cpu process group with CUDA tensors, several ranks sharing one GPU
-- (staged through host memory): results equal the ones computed by hand.
-- Prints "cpu pg with cuda tensors: ok" on every rank. With `auto` as its
-- argument the group is the launcher's default (backend "auto"), which must
-- fall back to cpu when the node has fewer GPUs than ranks.
-- Run: ddplua --nproc 2 --backend cpu tests/gpu/scripts/cpu_pg_cuda.lua
--      ddplua --nproc 2 tests/gpu/scripts/cpu_pg_cuda.lua auto
local ddp = require "ddplua"
local dist = ddp.distributed

if arg[1] == "auto" then
  dist.init_process_group()
  assert(dist.get_backend() == "cpu", "backend auto chose " .. dist.get_backend() .. " for ranks sharing a GPU")
else
  dist.init_process_group { backend = "cpu" }
end
local rank, world = dist.get_rank(), dist.get_world_size()
local dev = ddp.device()
assert(dev:match("^cuda:"), "expected a GPU device, got " .. dev)

local function check(t, want, what)
  local got = t:to("cpu"):totable()
  for i = 1, #want do
    assert(math.abs(got[i] - want[i]) < 1e-6, string.format("rank %d %s: element %d is %s, expected %s", rank, what, i,
                                                              tostring(got[i]), tostring(want[i])))
  end
  assert(t:device() == dev, what .. ": the result left the GPU")
end

local n = 1000003 -- odd size, bigger than one staging chunk of small collectives
local x = ddp.full({ n }, rank + 1, { device = dev })
dist.all_reduce(x, "sum")
local total = world * (world + 1) / 2
check(x:narrow(1, n - 2, 3), { total, total, total }, "all_reduce sum")
local y = ddp.tensor({ rank + 1.0, 10.0 * (rank + 1) }, { device = dev })
dist.all_reduce(y, "max")
check(y, { world, 10.0 * world }, "all_reduce max")
local z = ddp.tensor({ rank * 1.0 }, { device = dev })
dist.broadcast(z, world - 1)
check(z, { world - 1.0 }, "broadcast")
local out = ddp.zeros(world * 2, { device = dev })
dist.all_gather(out, ddp.tensor({ rank * 1.0, rank + 0.5 }, { device = dev }))
local want = {}
for r = 0, world - 1 do want[#want + 1] = r * 1.0; want[#want + 1] = r + 0.5 end
check(out, want, "all_gather")
local a = ddp.ones(5, { device = dev })
local w = dist.all_reduce(a, "sum", { async = true })
w:wait()
check(a, { world, world, world, world, world }, "async all_reduce")
dist.barrier()
dist.destroy_process_group()
print("cpu pg with cuda tensors: ok")
