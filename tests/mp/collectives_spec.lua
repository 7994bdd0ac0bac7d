-- Multi-process tests of the cpu process group through the Lua API.
-- Ranks are forked with dist.spawn (env:// init from the environment spawn
-- sets) or started as separate `ddplua` processes. Each rank's input is a
-- known function of (rank, index); expected results are computed here,
-- element by element in Lua for small sizes and with float64 tensor
-- arithmetic (independent of the process group) for the large one.
local ddp = require "ddplua"
local dist = ddp.distributed

local BIN = os.getenv("DDPLUA_BIN") or "./build/bin/ddplua"

-- x[i] = (i + shift) % period for 0-based i, float64 (shift <= 16); the
-- tiled pattern is built once per process
local tiles = {}
local function periodic(n, period, shift)
  local key = n .. ":" .. period
  if not tiles[key] then
    local k = (n + 16) // period + 1
    tiles[key] = ddp.arange(0, period, { dtype = "float64" }):view(1, period):expand(k, period):reshape(-1)
  end
  return tiles[key]:narrow(1, shift + 1, n)
end

local function lua_input(op, r, i)
  if op == "prod" then return 1 + (i + r) % 3 end
  return ((i + 2 * r) % 11) * (r + 1) - 5
end

local inputs = {}
local function input64(op, r, n)
  local key = (op == "prod" and "p" or "s") .. r .. ":" .. n
  if not inputs[key] then
    inputs[key] = op == "prod" and periodic(n, 3, r) + 1 or periodic(n, 11, 2 * r) * (r + 1) - 5
  end
  return inputs[key]
end

-- a fresh tensor each call (collectives write into it)
local function input(op, r, n, dtype)
  local x = input64(op, r, n):to(dtype)
  return dtype == "float64" and x:clone() or x
end

local function fold(op, a, b)
  if op == "sum" or op == "avg" then return a + b end
  if op == "prod" then return a * b end
  if op == "max" then return math.max(a, b) end
  return math.min(a, b)
end

local expected = {}
local function expected_tensor(op, R, n)
  local key = op .. R .. ":" .. n
  if expected[key] then return expected[key] end
  local acc = input64(op, 0, n)
  for r = 1, R - 1 do
    local x = input64(op, r, n)
    if op == "sum" or op == "avg" then acc = acc + x
    elseif op == "prod" then acc = acc * x
    elseif op == "max" then acc = acc:maximum(x)
    else acc = acc:minimum(x) end
  end
  if op == "avg" then acc = acc / R end
  expected[key] = acc
  return acc
end

local function assert_reduced(got, op, R, what)
  local n = got:numel()
  if n <= 16 then
    local t = got:totable()
    for i = 1, n do
      local e = lua_input(op, 0, i - 1)
      for r = 1, R - 1 do e = fold(op, e, lua_input(op, r, i - 1)) end
      if op == "avg" then e = e / R end
      assert(t[i] == e, string.format("%s: element %d is %s, expected %s", what, i, tostring(t[i]), tostring(e)))
    end
  end
  local diff = (got:double() - expected_tensor(op, R, n)):abs():max():item()
  assert(diff == 0, string.format("%s: max abs difference %g", what, diff))
end

local proc_threads = require "helpers.proc_threads"
local threads, threads_settled = proc_threads.count, proc_threads.settled

local function segments(token)
  local p = io.popen("ls /dev/shm")
  local n = 0
  for name in p:lines() do
    if name:find("ddplua-" .. token, 1, true) then
      n = n + 1
    end
  end
  p:close()
  return n
end

local function run(cmd)
  local p = io.popen(cmd .. " 2>&1")
  local out = p:read("a")
  local ok, _, code = p:close()
  return out, ok, code
end

for _, R in ipairs { 2, 4 } do
  describe(R .. " ranks", function()
    it("all_reduce: every op, float32/float64/int64, 1/7/1000003 elements", function()
      dist.spawn(function(rank, R)
        dist.init_process_group()
        assert.equal(R, dist.get_world_size())
        assert.equal(rank, dist.get_rank())
        for _, dt in ipairs { "float32", "float64", "int64" } do
          for _, op in ipairs { "sum", "avg", "max", "min", "prod" } do
            for _, n in ipairs { 1, 7, 1000003 } do
              local t = input(op, rank, n, dt)
              if dt == "int64" and op == "avg" then
                local ok, err = pcall(dist.all_reduce, t, op)
                assert.is_false(ok)
                assert.matches("avg needs a floating%-point tensor, got int64", err)
              else
                dist.all_reduce(t, op)
                assert.equal(dt, t:dtype())
                assert_reduced(t, op, R, string.format("all_reduce(%s, %s, %d)", op, dt, n))
              end
            end
          end
        end
        dist.destroy_process_group()
      end, R, R)
    end)

    it("broadcast from every rank, all dtypes including uint8", function()
      dist.spawn(function(rank, R)
        dist.init_process_group()
        for src = 0, R - 1 do
          for _, dt in ipairs { "float32", "float64", "int64", "uint8" } do
            for _, n in ipairs { 1, 7, (dt == "float32" or dt == "uint8") and 1000003 or 77 } do
              local want = (periodic(n, 13, src) + src):to(dt)
              local t = rank == src and want:clone() or ddp.zeros(n, { dtype = dt })
              dist.broadcast(t, src)
              assert.equal(0, (t:double() - want:double()):abs():max():item())
            end
          end
        end
        dist.destroy_process_group()
      end, R, R)
    end)

    it("reduce to every rank: the destination gets the result, the others keep their input", function()
      dist.spawn(function(rank, R)
        dist.init_process_group()
        for dst = 0, R - 1 do
          local n = (dst == 0 or dst == R - 1) and 1000003 or 7
          for _, op in ipairs { "sum", "max", "prod", "avg" } do
            local t = input(op, rank, n, "float64")
            dist.reduce(t, dst, op)
            if rank == dst then assert_reduced(t, op, R, "reduce " .. op)
            else assert.equal(0, (t - input(op, rank, n, "float64")):abs():max():item()) end
          end
        end
        dist.destroy_process_group()
      end, R, R)
    end)

    it("all_gather into a list, an empty list and one tensor", function()
      dist.spawn(function(rank, R)
        dist.init_process_group()
        for _, dt in ipairs { "float32", "int64", "uint8" } do
          for _, n in ipairs { 1, 7, dt == "float32" and 1000003 or 77 } do
            local mine = (periodic(n, 7, rank) + 10 * rank):to(dt)
            local list = {}
            for i = 1, R do list[i] = ddp.zeros(n, { dtype = dt }) end
            dist.all_gather(list, mine)
            local fresh = {}
            dist.all_gather(fresh, mine)
            local out = ddp.zeros(R, n, { dtype = dt })
            dist.all_gather(out, mine)
            for r = 0, R - 1 do
              local want = (periodic(n, 7, r) + 10 * r):double()
              assert.equal(0, (list[r + 1]:double() - want):abs():max():item())
              assert.equal(0, (fresh[r + 1]:double() - want):abs():max():item())
              assert.equal(0, (out[r + 1]:double() - want):abs():max():item())
            end
          end
        end
        dist.destroy_process_group()
      end, R, R)
    end)

    it("reduce_scatter from a list and from one tensor", function()
      dist.spawn(function(rank, R)
        dist.init_process_group()
        for _, op in ipairs { "sum", "max", "min", "avg" } do
          for _, n in ipairs { 1, 7, 1000003 } do
            -- block b of rank r holds input(op, r + b, ...): the result of rank r is computable
            local blocks = {}
            for b = 0, R - 1 do blocks[b + 1] = input(op, rank + b, n, "float32") end
            local out = ddp.zeros(n)
            dist.reduce_scatter(out, blocks, op)
            local out2 = ddp.zeros(n)
            dist.reduce_scatter(out2, ddp.cat(blocks, 1), op)
            local want = input(op, rank, n, "float64")
            for r = 1, R - 1 do
              local x = input(op, r + rank, n, "float64")
              if op == "max" then want = want:maximum(x) elseif op == "min" then want = want:minimum(x)
              else want = want + x end
            end
            if op == "avg" then want = want / R end
            assert.equal(0, (out:double() - want):abs():max():item())
            assert.equal(0, (out2:double() - want):abs():max():item())
          end
        end
        dist.destroy_process_group()
      end, R, R)
    end)

    it("all_gather_into_tensor and reduce_scatter_tensor: PyTorch's tensor forms, lists refused", function()
      dist.spawn(function(rank, R)
        dist.init_process_group()
        for _, n in ipairs { 1, 7, 100003 } do
          local mine = periodic(n, 7, rank):float() + 10 * rank
          local flat, rows = ddp.zeros(R * n), ddp.zeros(R, n)
          dist.all_gather_into_tensor(flat, mine)
          dist.all_gather_into_tensor(rows, mine, { async_op = true }):wait()
          for r = 0, R - 1 do
            local want = periodic(n, 7, r) + 10 * r
            assert.equal(0, (flat:narrow(1, r * n + 1, n):double() - want):abs():max():item())
            assert.equal(0, (rows[r + 1]:double() - want):abs():max():item())
          end
          -- block b of rank r holds input("sum", r + b, n): rank r's result is the sum over ranks of its blocks
          local blocks = {}
          for b = 0, R - 1 do blocks[b + 1] = input("sum", rank + b, n, "float32") end
          local out = ddp.zeros(n)
          dist.reduce_scatter_tensor(out, ddp.cat(blocks, 1), "sum")
          local want = input("sum", rank, n, "float64")
          for r = 1, R - 1 do want = want + input("sum", r + rank, n, "float64") end
          assert.equal(0, (out:double() - want):abs():max():item())
        end
        local ok, err = pcall(dist.all_gather_into_tensor, {}, ddp.ones(2))
        assert.is_false(ok)
        assert.matches("all_gather_into_tensor: the output must be a tensor of world_size blocks, got table " ..
          "%(dist.all_gather takes a list%)", err)
        ok, err = pcall(dist.reduce_scatter_tensor, ddp.zeros(2), { ddp.ones(2) })
        assert.is_false(ok)
        assert.matches("reduce_scatter_tensor: the input must be a tensor of world_size blocks, got table", err)
        ok, err = pcall(dist.all_gather_into_tensor, ddp.zeros(R * 2 + 1), ddp.ones(2))
        assert.is_false(ok)
        assert.matches("all_gather_into_tensor: the output has " .. (R * 2 + 1) .. " elements, expected world size " ..
          R .. " x 2", err)
        dist.destroy_process_group()
      end, R, R)
    end)

    it("barrier: nobody leaves before everybody arrived", function()
      dist.spawn(function(rank, R)
        dist.init_process_group()
        local t0 = ddp.clock()
        while ddp.clock() - t0 < 0.05 * rank do end
        local arrived = ddp.clock()
        dist.barrier()
        local left = ddp.clock()
        local a = ddp.zeros(R, { dtype = "float64" })
        dist.all_gather(a, ddp.tensor({ arrived }, { dtype = "float64" }))
        assert.is_true(left >= a:max():item())
        dist.destroy_process_group()
      end, R, R)
    end)

    it("send/recv around a ring, and a size mismatch names both sides", function()
      dist.spawn(function(rank, R)
        dist.init_process_group()
        local nxt, prv = (rank + 1) % R, (rank + R - 1) % R
        local msg = input("sum", rank, 300007, "float64")
        local got = ddp.zeros(300007, { dtype = "float64" })
        if rank % 2 == 0 then
          dist.send(msg, nxt)
          assert.equal(prv, dist.recv(got, prv))
        else
          assert.equal(prv, dist.recv(got, prv))
          dist.send(msg, nxt)
        end
        assert.equal(0, (got - input("sum", prv, 300007, "float64")):abs():max():item())
        if rank == 0 then dist.send(ddp.zeros(10), 1) end
        if rank == 1 then
          local ok, err = pcall(dist.recv, ddp.zeros(12), 0)
          assert.is_false(ok)
          assert.matches("rank 0 sent 10 float32 elements but rank 1 expected 12 float32 elements", err)
        end
      end, R, R)
    end)

    it("non-contiguous tensors are reduced and written back", function()
      dist.spawn(function(rank, R)
        dist.init_process_group()
        local base = ddp.zeros(5, 3)
        local t = base:transpose(1, 2) -- 3 x 5 view, not contiguous
        t:copy_(input("sum", rank, 15, "float32"):view(3, 5))
        dist.all_reduce(t, "sum")
        assert_reduced(t:contiguous():view(15), "sum", R, "transposed all_reduce")
        local w = dist.all_reduce(t, "max", { async = true })
        w:wait()
        assert.equal(R * 0 + t:contiguous():view(15):max():item(), t:max():item())
        dist.destroy_process_group()
      end, R, R)
    end)

    it("sub-groups: collectives among members, errors for the others", function()
      dist.spawn(function(rank, R)
        dist.init_process_group()
        local evens = {}
        for r = 0, R - 1, 2 do evens[#evens + 1] = r end
        local g = dist.new_group(evens)
        local odd = dist.new_group({ R - 1 }) -- a second group: each gets its own segment
        local t = ddp.full({ 1001 }, rank + 1.0)
        if rank % 2 == 0 then
          assert.is_true(g:is_member())
          assert.equal(rank // 2, dist.get_rank(g))
          assert.equal(#evens, dist.get_world_size(g))
          dist.all_reduce(t, "sum", { group = g })
          local want = 0
          for _, r in ipairs(evens) do want = want + r + 1 end
          assert.equal(want, t:max():item())
          assert.equal(want, t:min():item())
          local b = ddp.full({ 7 }, rank)
          dist.broadcast(b, evens[#evens], { group = g }) -- src is a global rank
          assert.equal(evens[#evens], b:max():item())
          local ok, err = pcall(dist.broadcast, b, 1, { group = g })
          assert.is_false(ok)
          assert.matches("broadcast: src 1 is not in the group of ranks %[0", err)
        else
          assert.is_false(g:is_member())
          assert.equal(-1, dist.get_rank(g))
          local ok, err = pcall(dist.all_reduce, t, "sum", { group = g })
          assert.is_false(ok)
          assert.matches("all_reduce: rank " .. rank .. " is not a member of the group of ranks %[0", err)
        end
        if rank == R - 1 then dist.barrier({ group = odd }) end
        dist.destroy_process_group(g)
        dist.all_reduce(t, "sum") -- the default group still works
        dist.destroy_process_group()
      end, R, R)
    end)

    it("async handles run on the communication thread while the caller computes", function()
      dist.spawn(function(rank, R)
        dist.init_process_group()
        local t = input("sum", rank, 1000003, "float32")
        local w = dist.all_reduce(t, "sum", { async = true })
        if rank == 0 then
          -- compute without waiting; the reduction must finish in the background
          local a, steps = ddp.randn(256, 256), 0
          local t0 = ddp.clock()
          while not w:is_completed() and ddp.clock() - t0 < 60 do
            a = (a:matmul(a) * 1e-3):tanh()
            steps = steps + 1
          end
          assert.is_true(w:is_completed(), "the async all_reduce did not complete while rank 0 computed")
        end
        w:wait()
        assert_reduced(t, "sum", R, "async all_reduce")
        -- several in flight, then a synchronous one: issue order is kept
        local ts, ws = {}, {}
        for k = 1, 4 do
          ts[k] = input("max", rank + k, 70001, "float64")
          ws[k] = dist.all_reduce(ts[k], "max", { async = true })
        end
        local s = input("sum", rank, 9, "int64")
        dist.all_reduce(s, "sum")
        assert_reduced(s, "sum", R, "sync after async")
        for k = 4, 1, -1 do
          ws[k]:wait()
          local want = input("max", k, 70001, "float64")
          for r = 1, R - 1 do want = want:maximum(input("max", r + k, 70001, "float64")) end
          assert.equal(0, (ts[k] - want):abs():max():item())
        end
        dist.destroy_process_group()
      end, R, R)
    end)

    it("tensors in the shared pool are reduced in place (all ranks, and only rank 0)", function()
      dist.spawn(function(rank, R)
        dist.init_process_group()
        for _, only0 in ipairs { false, true } do
          local t = (not only0 or rank == 0) and dist.alloc_shared(1000003, "float32") or ddp.zeros(1000003)
          assert.is_not_nil(t)
          t:copy_(input("sum", rank, 1000003, "float32"))
          dist.all_reduce(t, "avg")
          assert_reduced(t, "avg", R, "pool all_reduce")
          t:copy_(input("max", rank, 1000003, "float32"))
          dist.reduce(t, R - 1, "max")
          if rank == R - 1 then assert_reduced(t, "max", R, "pool reduce") end
        end
        dist.destroy_process_group()
      end, R, R)
    end)

    -- a freed pool tensor's pages are kept for the next one of its size
    -- (shm.c): that one still reads as zeros; sizes past the pool are refused
    it("a pool tensor reused after another was freed reads as zeros; a size past 2^48 bytes is an error", function()
      dist.spawn(function(rank, R)
        dist.init_process_group()
        for round = 1, 3 do
          local t = dist.alloc_shared(300007, "float32")
          assert.is_not_nil(t)
          assert.equal(0, t:abs():max():item(), "round " .. round .. ": a reused pool tensor holds old values")
          t:fill_(rank + round)
          t = nil
          collectgarbage()
          collectgarbage()
        end
        for _, n in ipairs { math.maxinteger, 2^62 // 1, -1 } do
          local ok, err = pcall(dist.alloc_shared, n, "float32")
          assert.is_false(ok)
          assert.matches("alloc_shared: size %-?%d+ elements of float32 is out of range", tostring(err))
        end
        dist.destroy_process_group()
      end, R, R)
    end)
  end)
end

describe("init", function()
  it("tcp:// with explicit world_size and rank (the seed tutorial's form)", function()
    local port = dist.find_free_port()
    dist.spawn(function(rank, port)
      dist.init_process_group { backend = "cpu", init_method = "tcp://127.0.0.1:" .. port, world_size = 2,
        rank = rank, timeout = 30 }
      local t = ddp.full({ 3 }, rank + 1.0)
      dist.all_reduce(t)
      assert.same({ 3, 3, 3 }, t:totable())
      assert.equal(rank, dist.get_local_rank())
      dist.destroy_process_group()
    end, 2, port)
  end)

  it("tcp:// between two separate ddplua processes", function()
    local port = dist.find_free_port()
    local cmd = string.format("%s tests/mp/scripts/tcp_pair.lua %d", BIN, port)
    local out, ok = run(string.format("(%s 1 & %s 0; wait)", cmd, cmd))
    assert.is_true(ok, out)
    assert.matches("rank 0 sum 3.0", out)
    assert.matches("rank 1 sum 3.0", out)
  end)

  it("destroy_process_group leaves no segment in /dev/shm and no extra thread", function()
    local file = os.tmpname()
    dist.spawn(function(rank, file)
      local token = os.getenv("DDPLUA_JOB_TOKEN")
      if rank == 0 then
        local f = io.open(file, "w")
        f:write(token)
        f:close()
      end
      -- CUDA's own threads (on a machine with a GPU, init's backend choice
      -- starts the driver) are not the group's: start them before counting
      ddp.cuda_is_available()
      local before = threads()
      dist.init_process_group()
      dist.barrier() -- the leader unlinked the segment once every rank had mapped it
      assert.equal(0, segments(token .. "-pg1-n"))
      local g = dist.new_group({ 0, 1 })
      dist.all_reduce(ddp.ones(10), "sum", { async = true }):wait()
      dist.all_reduce(ddp.ones(10), "sum", { group = g, async = true }):wait()
      assert.is_true(threads() > before)
      dist.destroy_process_group()
      assert.equal(before, threads_settled(before))
      assert.is_false(dist.is_initialized())
      -- and again: a second init in the same process works
      dist.init_process_group()
      local t = ddp.ones(5)
      dist.all_reduce(t)
      assert.equal(2, t:max():item())
      dist.destroy_process_group()
      assert.equal(before, threads_settled(before))
    end, 2, file)
    local token = io.open(file):read("a")
    os.remove(file)
    assert.is_true(#token > 0)
    assert.equal(0, segments(token))
  end)

  it("kill -9 of every rank leaves nothing in /dev/shm", function()
    local file = os.tmpname()
    local ok, err = pcall(dist.spawn, function(rank, file)
      dist.init_process_group()
      dist.barrier()
      if rank == 0 then
        local f = io.open(file, "w")
        f:write(os.getenv("DDPLUA_JOB_TOKEN"))
        f:close()
      end
      dist.barrier()
      local pid = io.open("/proc/self/stat"):read("l"):match("^(%d+)")
      os.execute("kill -9 " .. pid)
    end, 2, file)
    assert.is_false(ok)
    assert.matches("killed by signal 9", err)
    local token = io.open(file):read("a")
    os.remove(file)
    assert.is_true(#token > 0)
    assert.equal(0, segments(token))
  end)
end)

local function alive(pid)
  local f = io.open("/proc/" .. pid .. "/stat")
  if not f then return false end
  local st = f:read("l")
  f:close()
  return st ~= nil and not st:match("^%d+ %b() [ZX]")
end

describe("under the launcher", function()
  local function job(args, script)
    return run(string.format("%s %s tests/mp/scripts/%s", BIN, args, script))
  end

  local function no_segments_left(out)
    local token = out:match("token (%x+)")
    assert.is_not_nil(token, out)
    assert.equal(0, segments(token))
  end

  for _, n in ipairs { 2, 4 } do
    it("runs every collective with --nproc " .. n, function()
      local out, ok = job("--nproc " .. n, "launcher_collectives.lua")
      assert.is_true(ok, out)
      assert.matches("%[rank 0%] collectives ok", out)
      no_segments_left(out)
    end)
  end

  for _, split in ipairs { { 2, 2 }, { 3, 1 } } do
    it(string.format("runs them across two nodes of %d and %d ranks (TCP between the nodes)", split[1], split[2]),
      function()
        local port = dist.find_free_port()
        local node = function(r, np)
          return string.format("DDPLUA_JOB_TOKEN=collectives-spec-0123456789 %s --nnodes 2 --node_rank %d --nproc %d " ..
            "--master_port %d tests/mp/scripts/launcher_collectives.lua", BIN, r, np, port)
        end
        local out, ok = run(string.format("(%s >/dev/null 2>&1 & %s; rc=$?; wait; exit $rc)", node(1, split[2]),
          node(0, split[1])))
        assert.is_true(ok, out)
        assert.matches("%[rank 0%] collectives ok", out)
        no_segments_left(out)
      end)
  end

  it("fails with the deadline error naming the rank that never arrived", function()
    local out, ok = job("--nproc 3 --timeout 0.5", "launcher_timeout.lua")
    assert.is_not_true(ok)
    assert.matches("all_reduce #2 %(sum, float32, 10 elements%) .*timed out after 0.5 s on rank [01]: " ..
      "rank 2 never arrived", out)
  end)
end)

describe("staged stores (DDPLUA_SHM_STAGE)", function()
  -- a 2-rank all_reduce of ordinary tensors writes what the peer reads with plain or with streamed
  -- (non-temporal) stores, whichever the group measured faster (reduce_kern.h): both give the same bits
  for _, n in ipairs { 2, 3 } do
    it("plain, streamed and auto give the same bits at " .. n .. " ranks, and a bad value is an error", function()
      local dir = os.tmpname()
      os.remove(dir)
      assert(os.execute("mkdir -p " .. dir))
      local files = {}
      for _, kind in ipairs { "plain", "streamed", "auto" } do
        local f = dir .. "/" .. kind .. ".safetensors"
        local out, ok = run(string.format("DDPLUA_SHM_STAGE=%s %s --nproc %d tests/mp/scripts/stage_kinds.lua %s", kind,
          BIN, n, f))
        assert(ok, out)
        files[kind] = ddp.load(f)
      end
      local names = 0
      for name, want in pairs(files.plain) do
        names = names + 1
        for _, kind in ipairs { "streamed", "auto" } do
          local got = files[kind][name]
          assert(got and got:dtype() == want:dtype() and got:numel() == want:numel(), kind .. " lacks " .. name)
          local differ = got:ne(want):sum():item() -- no NaN among the inputs
          assert(differ == 0, string.format("%s differs from plain at %d elements of %s", kind, differ, name))
        end
      end
      assert.equal(48, names)
      -- the sums round: a result that ignored the peer would differ from this
      local x = files.plain.float32_sum_17_1
      assert.is_true(x:abs():sum():item() > 0)
      local out, ok = run(string.format("DDPLUA_SHM_STAGE=fast %s --nproc %d tests/mp/scripts/stage_kinds.lua %s/x", BIN,
        n, dir))
      assert.is_falsy(ok)
      assert.matches("DDPLUA_SHM_STAGE is 'fast'; expected plain, streamed or auto", out)
      os.execute("rm -rf " .. dir)
    end)
  end
end)

describe("failures", function()
  it("spawned children die with their parent", function()
    local file = os.tmpname()
    local sh = io.popen(string.format("%s tests/mp/scripts/orphan.lua %s >/dev/null 2>&1 & echo $!", BIN, file))
    local parent = sh:read("l")
    sh:close()
    local pids = {}
    local t0 = os.time()
    while #pids < 2 and os.time() - t0 < 20 do
      pids = {}
      for r = 0, 1 do
        local f = io.open(file .. "." .. r)
        local pid = f and f:read("l")
        if f then f:close() end
        if pid and #pid > 0 then pids[#pids + 1] = pid end
      end
    end
    assert.equal(2, #pids)
    os.execute("kill -9 " .. parent)
    t0 = os.time()
    while (alive(pids[1]) or alive(pids[2])) and os.time() - t0 < 10 do os.execute("sleep 0.05") end
    assert.is_false(alive(pids[1]))
    assert.is_false(alive(pids[2]))
    for r = 0, 1 do os.remove(file .. "." .. r) end
    os.remove(file)
  end)

  it("a rank that never calls the collective is named in the deadline error", function()
    dist.spawn(function(rank)
      dist.init_process_group { timeout = 0.5 }
      dist.all_reduce(ddp.ones(4)) -- #1 completes
      if rank == 0 then
        local t0 = ddp.clock()
        local ok, err = pcall(dist.all_reduce, ddp.ones(1000))
        assert.is_false(ok)
        -- rank 0 times out itself, or rank 1 timed out first and told it
        assert.matches("all_reduce #2 %(sum, float32, 1000 elements%) .*timed out after 0.5 s on rank [01]: " ..
          "rank 2 never arrived", err)
        assert.is_true(ddp.clock() - t0 < 5)
        -- the group is unusable afterwards, and says why
        local ok2, err2 = pcall(dist.barrier)
        assert.is_false(ok2)
        assert.matches("never arrived", err2)
      elseif rank == 1 then
        local ok, err = pcall(dist.all_reduce, ddp.ones(1000))
        assert.is_false(ok) -- told by rank 0 instead of waiting on
        assert.matches("rank 2 never arrived", err)
      else
        os.execute("sleep 1.5") -- alive, but never arrives
      end
    end, 3)
  end)

  it("a dead peer is noticed long before the timeout", function()
    dist.spawn(function(rank)
      dist.init_process_group { timeout = 60 }
      dist.barrier()
      if rank == 1 then os.exit(0) end
      local t0 = ddp.clock()
      local ok, err = pcall(dist.all_reduce, ddp.ones(100))
      assert.is_false(ok)
      assert.matches("all_reduce #2 .* failed on rank 0: rank 1 %(pid %d+%) exited", err)
      assert.is_true(ddp.clock() - t0 < 10)
    end, 2)
  end)

  it("mismatched collectives are an error naming both sides", function()
    dist.spawn(function(rank)
      dist.init_process_group()
      local ok, err = pcall(dist.all_reduce, ddp.zeros(rank == 0 and 1000 or 999), "sum")
      assert.is_false(ok)
      assert.matches("rank 0 called all_reduce%(sum, float32, 1000%) but rank 1 called all_reduce%(sum, float32, 999%)",
        err)
    end, 2)
  end)

  it("DDPLUA_DEBUG=1 checks every collective through the store", function()
    local out = run("DDPLUA_DEBUG=1 " .. BIN .. " tests/mp/scripts/debug_mismatch.lua")
    for r = 0, 1 do
      -- the error is at the script's line (issue 14: it had no position)
      assert.matches("rank " .. r .. ": [^\n]*debug_mismatch.lua:8: collective mismatch %(DDPLUA_DEBUG%): rank 0 called " ..
        "broadcast%(float32, 1000, src 0%) but rank 1 called broadcast%(float32, 999, src 0%)", out)
    end
  end)

  it("a failing rank fails the whole spawn with its rank and error", function()
    local ok, err = pcall(dist.spawn, function(rank)
      if rank == 1 then error("boom on purpose") end
      local t0 = ddp.clock()
      while ddp.clock() - t0 < 30 do end -- stopped by spawn
    end, 3)
    assert.is_false(ok)
    assert.matches("spawn: rank 1 failed: .*boom on purpose", err)
  end)

  it("argument errors are clear Lua errors", function()
    local function fails(pat, f, ...)
      local ok, err = pcall(f, ...)
      assert.is_false(ok)
      assert.matches(pat, err)
    end
    fails("all_reduce: the default process group is not initialized; call dist.init_process_group%(%) first",
      dist.all_reduce, ddp.ones(2))
    fails("init_process_group: unknown option 'worldsize'", dist.init_process_group, { worldsize = 2 })
    fails("tcp://127.0.0.1:1' needs world_size=", dist.init_process_group, { init_method = "tcp://127.0.0.1:1" })
    fails("unsupported init_method \"file:///tmp/x\"", dist.init_process_group, { init_method = "file:///tmp/x" })
    dist.spawn(function(rank)
      dist.init_process_group()
      fails("all_reduce: expected a tensor as argument 1, got number", dist.all_reduce, 5)
      fails("all_reduce: sum is not supported for uint8 tensors", dist.all_reduce, ddp.zeros(3, { dtype = "uint8" }))
      fails("all_reduce: unknown reduction 'mean'", dist.all_reduce, ddp.ones(3), "mean")
      fails("broadcast: src 2 is out of range: ranks are 0..1", dist.broadcast, ddp.ones(3), 2)
      fails("reduce: dst %-1 is out of range", dist.reduce, ddp.ones(3), -1)
      fails("send: dst " .. rank .. " is this rank itself", dist.send, ddp.ones(3), rank)
      fails("all_gather: the output list has 3 tensors, expected 2", dist.all_gather,
        { ddp.ones(3), ddp.ones(3), ddp.ones(3) }, ddp.ones(3))
      fails("all_gather: output%[2%] is float32 %[4%], expected float32 %[3%]", dist.all_gather,
        { ddp.ones(3), ddp.ones(4) }, ddp.ones(3))
      fails("reduce_scatter: the input has 5 elements, expected world size 2 x 3", dist.reduce_scatter,
        ddp.ones(3), ddp.ones(5))
      fails("all_reduce: unknown option 'asynch'", dist.all_reduce, ddp.ones(3), "sum", { asynch = true })
      fails("init_process_group: the default process group is already initialized", dist.init_process_group)
      dist.barrier() -- argument errors do not break the group
      dist.destroy_process_group()
    end, 2)
    -- last, as it touches CUDA on a machine with a GPU (a spawn after it is
    -- refused): without a GPU nccl is refused; with one, the missing rendezvous
    local ok, err = pcall(dist.init_process_group, { backend = "nccl" })
    assert.is_false(ok)
    assert.matches(ddp.cuda_is_available() and "env:// needs MASTER_ADDR" or "init_process_group: backend 'nccl' needs CUDA",
      err)
  end)
end)
