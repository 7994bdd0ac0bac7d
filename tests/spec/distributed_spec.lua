-- The distributed API in one process (a world of one rank over tcp://) and
-- a small dist.spawn job: quick, and run under ASan with the other specs.
-- The multi-rank coverage is tests/mp/collectives_spec.lua.
local ddp = require "ddplua"
local dist = ddp.distributed

local function threads()
  for line in io.lines("/proc/self/status") do
    local n = line:match("^Threads:%s+(%d+)")
    if n then return tonumber(n) end
  end
end

describe("distributed", function()
  it("reports clear errors before init_process_group", function()
    assert.is_false(dist.is_initialized())
    local calls = {
      all_reduce = { ddp.ones(2), "sum" }, broadcast = { ddp.ones(2), 0 }, all_gather = { {}, ddp.ones(2) },
      reduce_scatter = { ddp.ones(1), { ddp.ones(1) } }, barrier = {}, send = { ddp.ones(2), 1 }, get_rank = {},
      new_group = { { 0 } },
    }
    for f, args in pairs(calls) do
      local ok, err = pcall(dist[f], table.unpack(args))
      assert.is_false(ok)
      assert.matches(f .. ": the default process group is not initialized", err)
    end
    assert.is_true(dist.is_main())
    assert.equal("cpu", ddp.device())
    assert.is_true(ddp.is_main())
  end)

  it("works as a world of one rank (tcp://, rank 0 serving the store)", function()
    local before = threads()
    dist.init_process_group { init_method = "tcp://127.0.0.1:" .. dist.find_free_port(), world_size = 1, rank = 0 }
    assert.is_true(dist.is_initialized())
    assert.equal(0, dist.get_rank())
    assert.equal(1, dist.get_world_size())
    assert.equal(0, dist.get_local_rank())
    assert.equal("cpu", dist.get_backend())
    local t = ddp.tensor({ 1.5, -2, 3 })
    dist.all_reduce(t, "avg")
    assert.same({ 1.5, -2, 3 }, t:totable())
    dist.all_reduce(t, dist.ReduceOp.PRODUCT)
    assert.same({ 1.5, -2, 3 }, t:totable())
    local list = {}
    dist.all_gather(list, t)
    assert.equal(1, #list)
    assert.same({ 1.5, -2, 3 }, list[1]:totable())
    local out = ddp.zeros(3)
    dist.reduce_scatter(out, { t }, "sum")
    assert.same({ 1.5, -2, 3 }, out:totable())
    dist.broadcast(t, 0)
    dist.reduce(t, 0, "max")
    dist.barrier()
    local w = dist.all_reduce(t, "sum", { async = true })
    assert.is_true(w:wait())
    assert.is_true(w:is_completed())
    local g = dist.new_group({ 0 })
    assert.equal(0, dist.get_rank(g))
    dist.all_reduce(t, "sum", { group = g })
    assert.matches("ProcessGroup%(ranks=%[0%]%)", tostring(g))
    assert.is_nil(dist.alloc_shared(10)) -- alone on the node: plain memory
    assert.is_true(ddp.is_main())
    dist.destroy_process_group()
    assert.is_false(dist.is_initialized())
    assert.equal(before, threads())
    local ok, err = pcall(dist.all_reduce, t, "sum", { group = g })
    assert.is_false(ok)
    assert.matches("the process group was destroyed", err)
  end)

  it("spawns ranks that find each other through the environment", function()
    dist.spawn(function(rank, scale)
      dist.init_process_group()
      local t = ddp.full({ 1000 }, (rank + 1) * scale)
      dist.all_reduce(t, "sum")
      assert.equal(3 * scale, t:min():item())
      assert.equal(3 * scale, t:max():item())
      assert.equal(rank == 0, ddp.is_main())
      dist.destroy_process_group()
    end, 2, 2.5)
  end)

  it("fails a spawn whose rank fails, naming the rank", function()
    local ok, err = pcall(dist.spawn, function(rank)
      if rank == 1 then error("rank one gives up") end
    end, 2)
    assert.is_false(ok)
    assert.matches("spawn: rank 1 failed: .*rank one gives up", err)
    ok, err = pcall(dist.spawn, function(rank) if rank == 0 then os.exit(3) end end, 2)
    assert.is_false(ok)
    assert.matches("spawn: rank 0 exited with code 3", err)
  end)
end)
