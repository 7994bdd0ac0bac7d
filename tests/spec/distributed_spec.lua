-- The distributed API in one process (a world of one rank over tcp://), the
-- backend "auto" choice, small dist.spawn jobs (in fresh processes: this
-- one may have started CUDA, which spawn refuses), and the one-rank test
-- mode that forces DDP's and SyncBatchNorm's collectives: quick, and run
-- under ASan with the other specs. The same assertions hold on a machine
-- with a GPU. The multi-rank coverage is tests/mp/collectives_spec.lua.
local ddp = require "ddplua"
local dist = ddp.distributed
local core = require "ddplua.core"
local io_util = require "helpers.io_util"

-- Runs a Lua chunk in a fresh lua5.4 with this process's module paths;
-- returns ok, output (stdout and stderr).
local function fresh(chunk, env)
  local path = os.tmpname()
  io_util.write(path, string.format("package.path = %q\npackage.cpath = %q\n", package.path, package.cpath) .. chunk)
  local p = assert(io.popen((env or "") .. " lua5.4 " .. path .. " 2>&1"))
  local out = p:read("a")
  local ok = p:close()
  os.remove(path)
  return ok == true, out
end

-- A chunk for fresh(): two spawned ranks initialise the group with backend "auto", `fields` added to
-- core.dist._init's table (the votes, the ranks' places), check that the cpu group was chosen, run `check` (the
-- local `clash` holds _init's result), sum over the group and print `done`.
local function auto_pair_chunk(fields, check, done)
  return string.format([[
local ddp = require "ddplua"
local dist = ddp.distributed
local core = require "ddplua.core"
dist.spawn(function(rank)
  local clash = core.dist._init { backend = "auto", rank = rank, world_size = 2,
                    master_addr = os.getenv("MASTER_ADDR"), master_port = tonumber(os.getenv("MASTER_PORT")),
                    token = os.getenv("DDPLUA_JOB_TOKEN"), serve = false, timeout = 30, %s }
  assert(dist.get_backend() == "cpu", "rank " .. rank .. " got " .. dist.get_backend())
  %s
  local t = ddp.full({ 3 }, rank + 1)
  dist.all_reduce(t, "sum")
  assert(t:min():item() == 3, "the group works")
  dist.destroy_process_group()
end, 2)
print(%q)
]], fields, check, done)
end

local proc_threads = require "helpers.proc_threads"
local threads, threads_settled = proc_threads.count, proc_threads.settled

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
    -- LOCAL_RANK is unset: the first GPU where there is one
    assert.equal(ddp.cuda_is_available() and "cuda:0" or "cpu", ddp.device())
    assert.is_true(ddp.is_main())
  end)

  it("works as a world of one rank (tcp://, rank 0 serving the store)", function()
    local before = threads()
    dist.init_process_group { backend = "cpu", init_method = "tcp://127.0.0.1:" .. dist.find_free_port(),
                              world_size = 1, rank = 0 }
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
    assert.equal(before, threads_settled(before))
    local ok, err = pcall(dist.all_reduce, t, "sum", { group = g })
    assert.is_false(ok)
    assert.matches("the process group was destroyed", err)
  end)

  it("picks nccl for auto only with NCCL and a GPU per rank on the node, else cpu with a note", function()
    local b, note = require("ddplua.backend_vote")(true, 1, 2) -- `ddplua --nproc 2` on a one-GPU machine
    assert.equal("cpu", b)
    assert.matches("backend auto: 2 ranks on this node share 1 GPU, and nccl needs one per rank: using the cpu " ..
                   "group", note)
    assert.is_nil(note:find("\n"))
    b, note = require("ddplua.backend_vote")(true, 2, 3)
    assert.equal("cpu", b)
    assert.matches("3 ranks on this node share 2 GPUs", note)
    for _, case in ipairs({ { true, 2, 2 }, { true, 8, 1 }, { true, 1, nil } }) do
      b, note = require("ddplua.backend_vote")(table.unpack(case, 1, 3))
      assert.equal("nccl", b)
      assert.is_nil(note)
    end
    b, note = require("ddplua.backend_vote")(false, 4, 2) -- no NCCL: cpu, nothing to explain
    assert.equal("cpu", b)
    assert.is_nil(note)
    -- and a world of one rank is cpu
    dist.init_process_group { init_method = "tcp://127.0.0.1:" .. dist.find_free_port(), world_size = 1, rank = 0 }
    assert.equal("cpu", dist.get_backend())
    dist.destroy_process_group()
  end)

  it("takes the cpu group for auto, and names the pair, when two ranks would use one machine's same GPU", function()
    -- two "nodes" started on one host: each rank is local rank 0 of its node, so each would take GPU 0, and NCCL
    -- refuses a GPU used twice; every rank votes nccl, as such nodes with NCCL would
    local ok, out = fresh(auto_pair_chunk(
      "auto_nccl = true, local_rank = 0, local_size = 1, node_rank = rank, nnodes = 2",
      'assert(tostring(clash):find("ranks 0 and 1 would both use GPU 0 of one machine", 1, true), tostring(clash))',
      "seats clash: cpu"))
    assert(ok, out)
    assert.matches("seats clash: cpu", out)
    -- a seat is the machine's boot id and the device at the local rank: CUDA_VISIBLE_DEVICES's entry, else the index
    local f = assert(io.open("/proc/sys/kernel/random/boot_id"))
    local boot = f:read("l")
    f:close()
    ok, out = fresh([[
local core = require "ddplua.core"
print(core.dist._auto_seat(0), core.dist._auto_seat(1), core.dist._auto_seat(2))
]], "CUDA_VISIBLE_DEVICES=3,GPU-5e1f")
    assert(ok, out)
    assert.equal(string.format("%s/3\t%s/GPU-5e1f\t%s/2\n", boot, boot, boot), out)
    ok, out = fresh("print(require('ddplua.core').dist._auto_seat(1))", "env -u CUDA_VISIBLE_DEVICES")
    assert(ok, out)
    assert.equal(boot .. "/1\n", out)
  end)

  it("gives a one-rank world the cpu group without loading the CUDA plugin, so the process may still fork", function()
    -- Asking whether NCCL is usable loads ddplua_cuda.so and starts CUDA; on a GPU machine a later dist.spawn was
    -- then refused (the README's tour run as one process). DDPLUA_CUDA_PLUGIN makes the plugin load here without a
    -- GPU driver, so the control below shows the probe loading it wherever the build has one.
    local core_so = assert(package.searchpath("ddplua.core", package.cpath))
    local plugin = core_so:gsub("[^/]*/[^/]*$", "") .. "ddplua_cuda.so"
    local f = io.open(plugin)
    if f then f:close() end
    local ok, out = fresh(string.format([[
local ddp = require "ddplua"
local dist = ddp.distributed
local function plugin_mapped()
  local f = assert(io.open("/proc/self/maps"))
  local maps = f:read("a")
  f:close()
  return maps:find("ddplua_cuda", 1, true) ~= nil
end
assert(not plugin_mapped(), "the plugin was loaded before the test")
dist.init_process_group { init_method = "tcp://127.0.0.1:" .. dist.find_free_port(), world_size = 1, rank = 0 }
assert(dist.get_backend() == "cpu", "auto at world size 1 chose " .. dist.get_backend())
assert(not plugin_mapped(), "init_process_group loaded the CUDA plugin")
local t = ddp.full({ 3 }, 2)
dist.all_reduce(t, "sum")
assert(t:sum():item() == 6, "the one-rank group works")
dist.destroy_process_group()
dist.spawn(function(rank) assert(rank < 2) end, 2)
if %s then
  dist.nccl_available() -- the control: this probe does load it
  assert(plugin_mapped(), "nccl_available did not load " .. %q)
end
print("one rank: cpu, no plugin")
]], f and "true" or "false", plugin), "DDPLUA_CUDA_PLUGIN=" .. plugin)
    assert(ok, out)
    assert.matches("one rank: cpu, no plugin", out)
  end)

  it("makes auto's choice once for the whole job: one rank that cannot use nccl makes it cpu everywhere", function()
    -- rank 1 votes nccl as a node with a GPU per rank would, rank 0 cannot:
    -- alone, rank 1 would try nccl (and fail here without CUDA)
    local ok, out = fresh(auto_pair_chunk("auto_nccl = rank == 1, local_rank = rank, local_size = 2, node_rank = 0, " ..
      "nnodes = 1", "", "auto agreed"))
    assert(ok, out)
    assert.matches("auto agreed", out)
    -- and where every rank votes nccl, nccl it is
    local port = dist.find_free_port()
    local okn, err = pcall(core.dist._init, { backend = "auto", auto_nccl = true, rank = 0, world_size = 1,
                                              master_addr = "127.0.0.1", master_port = port, bind = "127.0.0.1",
                                              serve = true, token = "t", timeout = 30 })
    if dist.nccl_available() then
      assert(okn, err)
      assert.equal("nccl", dist.get_backend())
      dist.destroy_process_group()
    else
      assert.is_false(okn)
      assert.matches("nccl process group needs CUDA", err)
    end
  end)

  local spawn_ok = [[
local ddp = require "ddplua"
local dist = ddp.distributed
dist.spawn(function(rank, scale)
  dist.init_process_group { backend = "cpu" } -- two ranks may share one GPU: not a job for nccl
  local t = ddp.full({ 1000 }, (rank + 1) * scale)
  dist.all_reduce(t, "sum")
  assert(t:min():item() == 3 * scale and t:max():item() == 3 * scale, "wrong sum on rank " .. rank)
  assert((rank == 0) == ddp.is_main(), "is_main on rank " .. rank)
  dist.destroy_process_group()
end, 2, 2.5)
print("spawn ok")
]]

  it("spawns ranks that find each other through the environment", function()
    local ok, out = fresh(spawn_ok)
    assert(ok, out)
    assert.matches("spawn ok", out)
  end)

  it("fails a spawn whose rank fails, naming the rank", function()
    local ok, out = fresh([[
local dist = require("ddplua").distributed
local ok, err = pcall(dist.spawn, function(rank) if rank == 1 then error("rank one gives up") end end, 2)
print("first:", ok, err)
ok, err = pcall(dist.spawn, function(rank) if rank == 0 then os.exit(3) end end, 2)
print("second:", ok, err)
]])
    assert(ok, out)
    assert.matches("first:%s+false%s+spawn: rank 1 failed: .*rank one gives up", out)
    assert.matches("second:%s+false%s+spawn: rank 0 exited with code 3", out)
  end)

  it("refuses to spawn once CUDA is initialised in this process, saying what to do", function()
    local function refused(err)
      assert.matches("spawn: CUDA is already initialised in this process", err)
      assert.matches("call dist.spawn before anything touches CUDA, or start the ranks as fresh processes with " ..
                     "`ddplua %-%-nproc 2 script.lua`", err)
    end
    core.dist._simulate_cuda_initialised(true) -- what a machine with a GPU sees after ddp.device()
    local ok, err = pcall(dist.spawn, function() os.exit(0) end, 2)
    core.dist._simulate_cuda_initialised(false)
    assert.is_false(ok)
    refused(err)
    -- a fresh process that never touched CUDA still spawns; one that asked
    -- for a GPU and got one is refused for real (two processes: the refusal
    -- is for the rest of the process's life)
    local ok2, out = fresh(spawn_ok)
    assert(ok2, out)
    assert.matches("spawn ok", out)
    local ok3, out3 = fresh([[
local ddp = require "ddplua"
print("gpu:", ddp.cuda_is_available())
if ddp.cuda_is_available() then
  print("refused:", pcall(ddp.distributed.spawn, function() end, 2))
end
]])
    assert(ok3, out3)
    if out3:match("gpu:%s+true") then refused(out3:match("refused:%s+false%s+([^\n]+)")) end
  end)
end)

describe("DDPLUA_FORCE_COLLECTIVES", function()
  -- one rank: DDP and SyncBatchNorm skip their collectives, unless forced
  local function run(env)
    local cmd = string.format("%s %s tests/gpu/scripts/ddp_world1_collectives.lua backend=cpu device=cpu port=%d 2>&1",
                              env, io_util.ddplua, dist.find_free_port())
    local p = assert(io.popen(cmd))
    local out = p:read("a")
    assert(p:close(), out)
    local per_step, buckets = out:match("world1 collectives: ([%d.]+) per step, (%d+) bucket")
    assert(per_step, "no summary line in:\n" .. out)
    return tonumber(per_step), tonumber(buckets), out
  end

  it("sends DDP's bucket all-reduces and SyncBatchNorm's collectives through a one-rank group", function()
    local plain, buckets = run("")
    local forced, buckets2, out = run("DDPLUA_FORCE_COLLECTIVES=1")
    assert.equal(buckets, buckets2)
    assert(buckets >= 1, out)
    -- per step: one all-reduce per bucket, SyncBatchNorm's all_gather and all_reduce
    assert.equal(buckets + 2, forced - plain, out)
    local zero = run("DDPLUA_FORCE_COLLECTIVES=0")
    assert.equal(plain, zero)
  end)
end)
