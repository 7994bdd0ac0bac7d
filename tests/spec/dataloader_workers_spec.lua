-- DataLoader{num_workers = N} (issue 14): worker processes build the
-- batches of a Lua dataset. The batches are those of num_workers = 0, in
-- the same order (items, a collate_fn, a get_batch dataset, shuffling, a
-- transform, across epochs); a worker's error is raised in the parent at
-- its batch's turn, naming the worker, the item and the batch; a worker
-- that dies or hangs is named; no worker outlives its epoch (or, with
-- persistent_workers, the loader), none is left a zombie, and none
-- survives its parent.
local ddp = require "ddplua"
local data = ddp.data
local core = ddp.core
local U = require "helpers.io_util"

local function comm_of(pid)
  local f = io.open("/proc/" .. pid .. "/comm")
  if not f then return nil end
  local c = f:read("l")
  f:close()
  return c
end

-- The child processes of this process that run this program (forks: the
-- workers; not the `ls` listing /proc), with their state, from /proc.
local function children()
  local me, out = core.getpid(), {}
  local mine = comm_of(me)
  local p = io.popen("ls /proc")
  for name in p:read("a"):gmatch("%d+") do
    local f = io.open("/proc/" .. name .. "/stat")
    if f then
      local stat = f:read("a") or ""
      f:close()
      local st, ppid = stat:match("%) (%a) (%d+)")
      if tonumber(ppid) == me and comm_of(name) == mine then out[#out + 1] = { pid = tonumber(name), state = st } end
    end
  end
  p:close()
  return out
end

local function fails(pattern, f, ...)
  local ok, err = pcall(f, ...)
  assert.is_false(ok, "expected an error matching " .. pattern)
  assert.matches(pattern, tostring(err))
  return tostring(err)
end

-- A dataset written as a PyTorch user writes one: __len and get(i).
local Items = {}
Items.__index = Items
Items.__len = function(s) return s.n end
function Items:get(i)
  if self.on_get then self.on_get(i) end
  return ddp.full({ 2, 3 }, i), i * 10, { name = "item" .. i, tags = { i % 2 == 0, "\255" } }
end
local function items(n, on_get) return setmetatable({ n = n, on_get = on_get }, Items) end

local function collate(list)
  local xs, ys, meta = {}, {}, {}
  for k, it in ipairs(list) do xs[k], ys[k], meta[k] = it[1], it[2], it[3] end
  return ddp.stack(xs), ddp.tensor(ys), meta
end

-- Everything an epoch yields, as plain values.
local function epoch_of(loader)
  local out = {}
  for x, y, meta in loader:iter() do
    out[#out + 1] = { x:totable(), y and (ddp.is_tensor(y) and y:totable() or y), meta }
  end
  return out
end

describe("DataLoader worker processes", function()
  after_each(function() collectgarbage() collectgarbage() end)

  it("give num_workers = 0's batches in the same order (items, collate_fn, shuffle, two epochs)", function()
    local ds = items(37)
    for _, cfg in ipairs {
      { num_workers = 1 }, { num_workers = 2 }, { num_workers = 3, prefetch_factor = 1 },
      { num_workers = 2, prefetch_factor = 4, drop_last = true }, { num_workers = 2, persistent_workers = true },
    } do
      local function make(nw)
        local o = { batch_size = 5, shuffle = true, collate_fn = collate, drop_last = cfg.drop_last }
        if nw > 0 then
          o.num_workers, o.prefetch_factor, o.persistent_workers = nw, cfg.prefetch_factor, cfg.persistent_workers
        end
        return data.DataLoader(ds, o)
      end
      ddp.manual_seed(3)
      local plain = make(0)
      local want = { epoch_of(plain), epoch_of(plain) }
      local rng_after = ddp.get_rng_state()
      ddp.manual_seed(3)
      local workers = make(cfg.num_workers)
      local got = { epoch_of(workers), epoch_of(workers) }
      assert.are.same(want, got, "num_workers=" .. cfg.num_workers)
      assert.are.same(rng_after, ddp.get_rng_state(), "the workers changed the main process's random numbers")
      workers:shutdown()
    end
    assert.are.same({}, children())
  end)

  it("work for get_batch datasets and for FashionMNIST with a transform", function()
    local t = data.TensorDataset(ddp.randn(50, 4), ddp.arange(1, 51))
    local a, b = data.DataLoader(t, { batch_size = 8 }), data.DataLoader(t, { batch_size = 8, num_workers = 2 })
    assert.are.same(epoch_of(a), epoch_of(b))
    local T = data.transforms
    for _, tf in ipairs { function(x) return x * 2 - 1 end, { T.ToTensor(), T.Normalize({ 0.5 }, { 0.5 }) } } do
      local fm = data.Subset(data.FashionMNIST { split = "test", transform = tf }, { 1, 7, 3, 99, 5000, 2, 8, 10, 11 })
      local one = epoch_of(data.DataLoader(fm, { batch_size = 4 }))
      local two = epoch_of(data.DataLoader(fm, { batch_size = 4, num_workers = 2 }))
      assert.are.same(one, two)
      assert.are.equal(3, #two)
    end
    assert.are.same({}, children())
  end)

  it("raise a worker's error at its batch's turn, naming the worker, the item, the batch and your frames", function()
    local ds = items(20, function(i) if i == 11 then error("cannot read item " .. i) end end)
    local loader = data.DataLoader(ds, { batch_size = 4, num_workers = 2, collate_fn = collate })
    local seen = 0
    local err = fails("DataLoader worker 0 %(pid %d+%) failed on item 11 of batch 3: [^\n]*" ..
      "dataloader_workers_spec.lua:%d+: cannot read item 11", function()
        for _ in loader:iter() do seen = seen + 1 end
      end)
    assert.are.equal(2, seen, "batches 1 and 2 come before the error, as without workers")
    assert.matches("worker traceback %(your code%):\n\t[^\n]*dataloader_workers_spec.lua:%d+: in ", err)
    assert.is_nil(err:find("worker_pool.lua", 1, true), "library frames in the traceback: " .. err)
    -- a collate_fn's error names the batch
    local bad = data.DataLoader(items(8), { batch_size = 4, num_workers = 1 })
    fails("DataLoader worker 0 %(pid %d+%) failed building batch 1: default_collate: field 3 of the items is a " ..
      "table", function() for _ in bad:iter() do end end)
    assert.are.same({}, children())
  end)

  it("name a worker that dies, and one that hangs past timeout", function()
    local exits = data.DataLoader(items(12, function(i) if i == 6 then os.exit(3) end end),
      { batch_size = 2, num_workers = 2, collate_fn = collate })
    fails("DataLoader worker 0 %(pid %d+%) exited with code 3 while loading batch 3", function()
      for _ in exits:iter() do end
    end)
    -- a worker that dies while the parent is not listening (the loop body is slow) is named when the next task
    -- goes to it, not reported as a broken connection: worker 1 hands in batch 2, then is killed while idle.
    -- The order is forced, not timed: worker 1 starts batch 2 only once the loop body has batch 1 (so batch 4
    -- cannot have gone to it yet), and the loop body kills it only once it is back waiting for a task.
    local go = os.tmpname()
    os.remove(go)
    local idle = data.DataLoader(items(12, function(i)
      if i == 3 then
        local t0 = ddp.clock()
        while not io.open(go) and ddp.clock() - t0 < 60 do core._worker_poll({}, 0.02) end
      end
    end), { batch_size = 2, num_workers = 2, prefetch_factor = 1, collate_fn = collate })
    local function proc_state(pid)
      local f = io.open("/proc/" .. pid .. "/stat")
      if not f then return nil end
      local st = f:read("a"):match("%) (%a) ")
      f:close()
      return st
    end
    local function wait_until(what, cond)
      local t0 = ddp.clock()
      while not cond() do
        assert.is_true(ddp.clock() - t0 < 60, "timed out waiting until " .. what)
        core._worker_poll({}, 0.01)
      end
    end
    fails("DataLoader worker 1 %(pid %d+%) was killed by signal 9 %(SIGKILL%) while loading batch 4", function()
      local b = 0
      for _ in idle:iter() do
        b = b + 1
        if b == 1 then
          local w = rawget(idle, "_pool").workers[2]
          assert.is_nil(next(w.pending, next(w.pending)), "worker 1 has more than batch 2")
          assert.is_true(w.pending[2])
          io.open(go, "w"):close()
          assert.are.equal(1, core._worker_poll({ w.sock }, 60), "worker 1 never sent batch 2")
          wait_until("worker 1 waits for its next task", function() return proc_state(w.pid) == "S" end)
          os.execute("kill -9 " .. w.pid)
          wait_until("worker 1 is dead", function() local st = proc_state(w.pid) return st == nil or st == "Z" end)
        end
      end
    end)
    os.remove(go)
    local killed = data.DataLoader(items(12, function(i)
      if i == 9 then os.execute("kill -9 " .. core.getpid()) end
    end), { batch_size = 2, num_workers = 3, collate_fn = collate })
    fails("DataLoader worker 1 %(pid %d+%) was killed by signal 9 %(SIGKILL%) while loading batch 5", function()
      for _ in killed:iter() do end
    end)
    local hangs = data.DataLoader(items(4, function(i)
      if i == 1 then core._worker_poll({}, 30) end -- sleeps 30 s
    end), { batch_size = 2, num_workers = 1, timeout = 0.3, collate_fn = collate })
    local t0 = ddp.clock()
    fails("DataLoader timed out after 0.3 s waiting for batch 1 from worker 0", function()
      for _ in hangs:iter() do end
    end)
    assert.is_true(ddp.clock() - t0 < 10, "the hanging worker was not stopped promptly")
    assert.are.same({}, children())
  end)

  it("stop their workers when the loop ends early, keep persistent ones across epochs, reap every one", function()
    local ds = items(30, nil)
    Items.pid_of = function() return core.getpid() end
    local pid_ds = setmetatable({ n = 30, get = function(_, i) return ddp.full({ 1 }, core.getpid()), i end },
      { __len = function(s) return s.n end })
    local loader = data.DataLoader(ds, { batch_size = 3, num_workers = 2, collate_fn = collate })
    for _ in loader:iter() do break end
    assert.are.same({}, children(), "a loop left with break left workers running")
    local function pids(l)
      local set = {}
      for x in l:iter() do for _, p in ipairs(x:view(-1):totable()) do set[p] = true end end
      return set
    end
    local plain = data.DataLoader(pid_ds, { batch_size = 3, num_workers = 2 })
    local p1, p2 = pids(plain), pids(plain)
    for p in pairs(p1) do assert.is_nil(p2[p], "a non-persistent worker lived on to the next epoch") end
    assert.are.same({}, children())
    local persistent = data.DataLoader(pid_ds, { batch_size = 3, num_workers = 2, persistent_workers = true })
    assert.are.same(pids(persistent), pids(persistent))
    assert.are.equal(2, #children())
    persistent:shutdown()
    assert.are.same({}, children())
  end)

  it("run worker_init_fn and give get_worker_info in the workers only", function()
    assert.is_nil(data.get_worker_info())
    local ds = setmetatable({ n = 8, get = function(_, i)
      local info = data.get_worker_info()
      return ddp.tensor({ info.id, info.num_workers, _G.INIT_ID or -1 }), i
    end }, { __len = function(s) return s.n end })
    local loader = data.DataLoader(ds, { batch_size = 2, num_workers = 2,
      worker_init_fn = function(id) _G.INIT_ID = id end })
    local b = 0
    for x in loader:iter() do
      b = b + 1
      local id = (b - 1) % 2
      assert.are.same({ { id, 2, id }, { id, 2, id } }, x:totable(), "batch " .. b)
    end
    assert.is_nil(_G.INIT_ID)
  end)

  it("name bad options", function()
    local ds = items(4)
    fails("DataLoader: num_workers must be a non%-negative integer, got %-1", data.DataLoader, ds, { num_workers = -1 })
    fails("DataLoader: prefetch_factor is for worker processes; it needs num_workers > 0", data.DataLoader, ds,
      { prefetch_factor = 2 })
    fails("DataLoader: persistent_workers=true needs num_workers > 0", data.DataLoader, ds,
      { persistent_workers = true })
    fails("DataLoader: prefetch_factor must be a positive integer, got 0", data.DataLoader, ds,
      { num_workers = 1, prefetch_factor = 0 })
    fails("DataLoader: timeout must be a number of seconds >= 0", data.DataLoader, ds, { num_workers = 1, timeout = -1 })
    fails("DataLoader: worker_init_fn must be a function of the worker id, got number", data.DataLoader, ds,
      { num_workers = 1, worker_init_fn = 3 })
    fails("DataLoader: unknown option 'workers' %(valid options: batch_size, shuffle", data.DataLoader, ds,
      { workers = 2 })
    local l = data.DataLoader(ds, { num_workers = 1, pin_memory = true, collate_fn = collate })
    assert.are.equal(4, #epoch_of(l))
  end)

  it("die with their parent", function()
    local dir = U.tmpdir()
    U.write(dir .. "/s.lua", [[
local ddp = require "ddplua"
local ds = setmetatable({ n = 1000, get = function(_, i) ddp.core._worker_poll({}, 0.05) return ddp.ones(1), i end },
  { __len = function(s) return s.n end })
local loader = ddp.data.DataLoader(ds, { batch_size = 1, num_workers = 2 })
for x in loader:iter() do print("BATCH") io.stdout:flush() end
]])
    local p = io.popen("cd " .. U.quote(dir) .. " && (" .. U.quote(U.abspath(U.ddplua)) ..
      " s.lua & p=$!; echo PARENT $p; n=0; " ..
      -- wait for both workers (up to 30 s: an ASan build on a busy machine starts slowly), not a fixed time
      "while [ $(cat /proc/$p/task/*/children 2>/dev/null | wc -w) -lt 2 ] && [ $n -lt 600 ]; do sleep 0.05; " ..
      "n=$((n+1)); done; echo CHILDREN $(cat /proc/$p/task/*/children); kill -9 $p) 2>&1")
    local out = p:read("a")
    p:close()
    U.rm_rf(dir)
    local workers = {}
    -- the children from /proc, not ps: ps inherits the ASan run's LD_PRELOAD and can deadlock in it
    for pid in (out:match("CHILDREN ([%d ]*)") or ""):gmatch("%d+") do workers[#workers + 1] = tonumber(pid) end
    assert.is_true(#workers >= 2, out)
    local t0 = ddp.clock()
    local alive
    repeat
      alive = 0
      for _, pid in ipairs(workers) do
        local f = io.open("/proc/" .. pid .. "/stat")
        if f then
          local st = f:read("a"):match("%) (%a) ")
          f:close()
          if st ~= "Z" then alive = alive + 1 end
        end
      end
    until alive == 0 or ddp.clock() - t0 > 5
    assert.are.equal(0, alive, "workers outlived their killed parent: " .. out)
  end)
end)
