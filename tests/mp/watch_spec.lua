-- `ddplua --watch` (issue 16): a save reruns the script in the same ranks;
-- a warm rerun gives bit for bit the losses of a cold run; an error in the
-- edited script (a syntax error, or one rank's) leaves the job waiting for
-- the next save, whose run is correct; files the script requires are
-- watched, editors' temporary-file-and-rename saves count once, polling
-- works without inotify; a crashing rank still ends the job, Ctrl-C ends
-- the watch; 50 warm reruns (every fifth failing on one rank) leave the
-- ranks' and the host's memory, descriptors and shared mappings flat.
-- Run: DDPLUA_BIN=./build/bin/ddplua busted --cpath="./build/lib/?.so" tests/mp/watch_spec.lua
local H = require "helpers.host"
local core = require "ddplua.core"

local BIN, q, sh, write = H.bin, H.q, H.sh, H.write
local SCRIPT = H.abspath("tests/mp/scripts/watch_train.lua")

local function count(text, pattern)
  local n = 0
  for _ in text:gmatch(pattern) do n = n + 1 end
  return n
end

-- Waits until `pattern` occurs `n` times in dir/file (up to `secs`);
-- returns the file's text.
local function wait_for(dir, file, pattern, n, secs)
  local deadline = core.clock() + (secs or 30)
  while true do
    local text = H.read(dir .. "/" .. file) or ""
    if count(text, pattern) >= n then return text end
    if core.clock() > deadline then
      error(("timed out waiting for %d x %q in %s:\n%s\n-- err:\n%s"):format(n, pattern, file, text,
        H.read(dir .. "/err") or ""), 2)
    end
    os.execute("sleep 0.05")
  end
end

-- Starts `ddplua --watch <opts> watch_train.lua <args>` in dir (on a copy
-- of the script); returns the host's pid.
local function start(dir, opts, args, env)
  sh("cp " .. q(SCRIPT) .. " " .. q(dir .. "/watch_train.lua"))
  sh(("cd %s && (%s env --default-signal=INT %s --watch %s watch_train.lua %s >out 2>err & echo $! >pid)")
    :format(q(dir), env or "", q(BIN), opts, args or ""))
  return tonumber(H.read(dir .. "/pid"))
end

local function alive(pid) return sh("kill -0 " .. pid .. " 2>/dev/null").code == 0 end

-- Ctrl-C: the host's exit code.
local function stop(dir, pid)
  sh("kill -INT " .. pid)
  local deadline = core.clock() + 15
  while alive(pid) and core.clock() < deadline do os.execute("sleep 0.05") end
  local st = H.read("/proc/" .. pid .. "/stat")
  return st == nil
end

local function losses(text)
  local out = {}
  for line in text:gmatch("LOSS [^\n]*") do out[#out + 1] = line end
  return out
end

-- A cold run of the script: its loss lines.
local function cold(dir, nproc, args)
  local r = sh(("cd %s && %s --nproc %d watch_train.lua %s"):format(q(dir), q(BIN), nproc, args or ""))
  assert.are.equal(0, r.code, r.err)
  return losses(r.out)
end

-- Saves the script the way many editors do: a temporary file renamed over it.
local function save_by_rename(dir, text)
  write(dir .. "/.watch_train.lua.tmp", text)
  assert.are.equal(0, sh("mv " .. q(dir .. "/.watch_train.lua.tmp") .. " " .. q(dir .. "/watch_train.lua")).code)
end

-- What process `pid` holds: resident KiB, open descriptors, shared mappings
-- (the process groups' memfd segments).
local function holdings(pid)
  local status = H.read("/proc/" .. pid .. "/status") or ""
  local fds = sh("ls /proc/" .. pid .. "/fd | wc -l").out
  local shm = 0
  for perms in (H.read("/proc/" .. pid .. "/maps") or ""):gmatch("%x+%-%x+ (....)") do
    if perms:sub(4, 4) == "s" then shm = shm + 1 end
  end
  return { rss = tonumber(status:match("VmRSS:%s*(%d+)")), fds = tonumber(fds:match("%d+")), shm = shm }
end

describe("ddplua --watch", function()
  local dir
  before_each(function() dir = H.tmpdir() end)
  after_each(function() sh("rm -rf " .. q(dir)) end)

  for _, nproc in ipairs { 1, 2 } do
    it("reruns warm at " .. nproc .. " rank(s): the same losses as a cold run, bit for bit, for 2 epochs", function()
      local pid = start(dir, "--nproc " .. nproc)
      local err = wait_for(dir, "err", "run 1 done", 1)
      assert.matches("ddplua: %-%-watch: run 1 of watch_train%.lua on " .. nproc .. " rank", err)
      local out1 = H.read(dir .. "/out")
      -- an edit that changes nothing the script does: a warm rerun
      local text = H.read(dir .. "/watch_train.lua")
      save_by_rename(dir, text .. "-- edited\n")
      err = wait_for(dir, "err", "rerun 1 done", 1)
      assert.matches("ddplua: %-%-watch: rerun 1: watch_train%.lua changed\n", err)
      local out2 = H.read(dir .. "/out"):sub(#out1 + 1)
      local reference = cold(dir, nproc)
      assert.are.equal(2 * 512 // (32 * nproc), #reference)
      assert.are.same(reference, losses(out1))
      assert.are.same(reference, losses(out2)) -- the generator, grad mode, modules: all as in a new process
      assert.are.equal(nproc, count(out1, "loading the data"))
      assert.are.equal(0, count(out2, "loading the data"), "the kept data was loaded again")
      assert.are.equal(nproc, count(out2, "DONE rank %d steps"))
      -- saving the same bytes again is no change
      save_by_rename(dir, text .. "-- edited\n")
      os.execute("sleep 0.4")
      assert.is_nil(H.read(dir .. "/err"):match("rerun 2"))
      assert.is_true(alive(pid))
      assert.is_true(stop(dir, pid))
      assert.matches("ddplua: received SIGINT; stopped all " .. nproc .. " rank", H.read(dir .. "/err"))
    end)
  end

  it("survives a syntax error saved mid-watch and one rank's runtime error; the fixed run is correct", function()
    local pid = start(dir, "--nproc 2")
    wait_for(dir, "err", "run 1 done", 1)
    local good = H.read(dir .. "/watch_train.lua")
    write(dir .. "/watch_train.lua", good .. "\nlocal broken = (\n") -- saved in place, half-typed
    local err = wait_for(dir, "err", "rerun 1 failed on rank 0, 1", 1)
    assert.matches("%[rank 0%] ddplua: watch_train%.lua:%d+: unexpected symbol near <eof>", err)
    assert.matches("%[rank 1%] ddplua: watch_train%.lua:%d+: unexpected symbol near <eof>", err)
    assert.is_true(alive(pid), "the job ended at the syntax error")
    -- one rank fails at its 4th step, while the other waits for it in a collective: both end the run
    -- at once (the failing rank aborts its groups), the job waits
    write(dir .. "/watch_train.lua", good:gsub("local n, fail_rank = 512, nil", "local n, fail_rank = 512, 1"))
    err = wait_for(dir, "err", "rerun 2 failed", 1, 20)
    assert.matches("%[rank 1%] ddplua: watch_train%.lua:%d+: rank 1 fails at step 3", err)
    assert.matches("%[rank 0%] [^\n]*failed on rank 0 because rank 1 failed: rank 1's run of the script failed", err)
    assert.is_true(alive(pid))
    local before = #H.read(dir .. "/out")
    write(dir .. "/watch_train.lua", good .. "-- fixed\n")
    wait_for(dir, "err", "rerun 3 done", 1)
    local out = H.read(dir .. "/out"):sub(before + 1)
    assert.are.same(cold(dir, 2), losses(out))
    assert.are.equal(0, count(out, "loading the data"))
    assert.is_true(stop(dir, pid))
  end)

  it("takes watch: true from the YAML's ddplua: section, and reruns when the --config file is saved", function()
    write(dir .. "/show.lua", 'local cfg = require("ddplua").config({ lr = 0.1 }, { save = false, print = false })\n' ..
      'print("LR " .. cfg.lr)\n')
    write(dir .. "/run.yaml", "script: show.lua\nddplua: {nproc: 1, watch: true}\nlr: 0.5\n")
    sh(("cd %s && (env --default-signal=INT %s --config run.yaml >out 2>err & echo $! >pid)"):format(q(dir), q(BIN)))
    local pid = tonumber(H.read(dir .. "/pid"))
    assert.matches("run 1 of show%.lua on 1 rank", wait_for(dir, "err", "run 1 done", 1))
    wait_for(dir, "out", "LR 0%.5", 1)
    write(dir .. "/run.yaml", "script: show.lua\nddplua: {nproc: 1, watch: true}\nlr: 0.25\n")
    assert.matches("rerun 1: run%.yaml changed", wait_for(dir, "err", "rerun 1 done", 1))
    wait_for(dir, "out", "LR 0%.25", 1)
    assert.is_true(stop(dir, pid))
  end)

  it("reruns across nodes: node 0's host watches and tells node 1's, both rerun warm", function()
    sh("cp " .. q(SCRIPT) .. " " .. q(dir .. "/watch_train.lua"))
    local port = H.free_port()
    local common = ("DDPLUA_JOB_TOKEN=watch-spec-0123456789abcdef env --default-signal=INT %s --watch --nnodes 2 " ..
      "--nproc 1 --master_port %d"):format(q(BIN), port)
    sh(("cd %s && (%s --node_rank 1 watch_train.lua N=128 >out1 2>err1 & echo $! >pid1; " ..
      "%s --node_rank 0 watch_train.lua N=128 >out 2>err & echo $! >pid)"):format(q(dir), common, common))
    local pid, pid1 = tonumber(H.read(dir .. "/pid")), tonumber(H.read(dir .. "/pid1"))
    wait_for(dir, "err", "run 1 done", 1)
    wait_for(dir, "err1", "run 1 done", 1)
    assert.matches("node 0's host says when to rerun it", H.read(dir .. "/err1"), 1, true)
    local first = losses(H.read(dir .. "/out"))
    assert.are.equal(2 * 128 // (32 * 2), #first)
    save_by_rename(dir, H.read(dir .. "/watch_train.lua") .. "-- edited\n")
    wait_for(dir, "err", "rerun 1 done", 1)
    assert.matches("ddplua: %-%-watch: rerun 1: watch_train%.lua changed\n", wait_for(dir, "err1", "rerun 1 done", 1))
    local out = H.read(dir .. "/out")
    assert.are.same(first, { table.unpack(losses(out), #first + 1) })
    assert.are.equal(1, count(out, "loading the data"))
    assert.are.equal(1, count(H.read(dir .. "/out1"), "loading the data"))
    assert.is_true(stop(dir, pid))
    local deadline = core.clock() + 15
    while alive(pid1) and core.clock() < deadline do os.execute("sleep 0.05") end
    assert.is_false(alive(pid1))
    assert.matches("stopped because another node failed: node 0's host received SIGINT", H.read(dir .. "/err1"))
  end)

  it("watches the files the script requires, polls without inotify, and ends when a rank crashes", function()
    write(dir .. "/helper_mod.lua", "return { factor = 1 }\n")
    local pid = start(dir, "--nproc 2", "N=64", "DDPLUA_WATCH_POLL=1")
    assert.matches("(polling)", wait_for(dir, "err", "run 1 done", 1), 1, true)
    local text = H.read(dir .. "/watch_train.lua")
    write(dir .. "/watch_train.lua", 'local helper = require "helper_mod"\nprint("FACTOR", helper.factor)\n' .. text)
    wait_for(dir, "err", "rerun 1 done", 1)
    wait_for(dir, "out", "FACTOR\t1", 2)
    write(dir .. "/helper_mod.lua", "return { factor = 2 }\n")
    local err = wait_for(dir, "err", "rerun 2 done", 1)
    assert.matches("ddplua: %-%-watch: rerun 2: helper_mod%.lua changed\n", err)
    wait_for(dir, "out", "FACTOR\t2", 2)
    -- a rank that crashes takes the job down as without --watch
    write(dir .. "/watch_train.lua", 'if os.getenv("RANK") == "1" then os.execute("kill -9 " .. ' ..
      'io.open("/proc/self/stat"):read("n")) end\n' .. text)
    local deadline = core.clock() + 20
    while alive(pid) and core.clock() < deadline do os.execute("sleep 0.05") end
    assert.is_false(alive(pid))
    assert.matches("ddplua: rank 1 %(pid %d+%) was killed by signal 9 %(SIGKILL%)", H.read(dir .. "/err"))
  end)

  -- the worker keeps the bytecode of each required file between runs
  -- (src/host/chunk_cache.c): a rerun must still see an edit of the same
  -- size, report errors at the source's lines, and report a syntax error
  -- as Lua's own loader does
  it("reloads a required file edited to the same size, with the source's line numbers", function()
    write(dir .. "/helper_mod.lua", "return { factor = 1,\n  boom = function() error('from helper') end }\n")
    local script = 'local h = require "helper_mod"\nprint("FACTOR", h.factor)\nprint("ERR", select(2, pcall(h.boom)))\n'
    write(dir .. "/watch_mod.lua", script)
    sh(("cd %s && (%s --watch watch_mod.lua >out 2>err & echo $! >pid)"):format(q(dir), q(BIN)))
    local pid = tonumber(H.read(dir .. "/pid"))
    finally(function() if alive(pid) then stop(dir, pid) end end)
    wait_for(dir, "err", "run 1 done", 1)
    write(dir .. "/watch_mod.lua", "-- edit\n" .. script) -- not the helper: the rerun loads its kept bytecode
    wait_for(dir, "err", "rerun 1 done", 1)
    write(dir .. "/helper_mod.lua", "return { factor = 3,\n  boom = function() error('from helper') end }\n")
    wait_for(dir, "err", "rerun 2 done", 1)
    write(dir .. "/helper_mod.lua", "return { factor = 3,\n  boom = function() error('from helper') end \n")
    wait_for(dir, "err", "rerun 3 failed", 1)
    write(dir .. "/helper_mod.lua", "return { factor = 4,\n  boom = function() error('from helper') end }\n")
    local err = wait_for(dir, "err", "rerun 4 done", 1)
    local out = H.read(dir .. "/out")
    local factors = {}
    for f in out:gmatch("FACTOR\t(%d)") do factors[#factors + 1] = tonumber(f) end
    assert.are.same({ 1, 1, 3, 4 }, factors)
    assert.are.equal(4, count(out, "ERR\t[^\n]*helper_mod%.lua:2: from helper"))
    assert.matches("error loading module 'helper_mod' from file '[^']*helper_mod%.lua':\n%[rank 0%] \t[^\n]*helper_mod%.lua:3:", err)
    assert.is_true(stop(dir, pid))
  end)

  it("keeps memory, descriptors and shared mappings flat over 50 warm reruns (every fifth one failing)", function()
    local pid = start(dir, "--nproc 2", "N=256")
    finally(function() if alive(pid) then stop(dir, pid) end end) -- a failed assertion must not leave the watch
    wait_for(dir, "err", "run 1 done", 1)
    local good = 'print("PID " .. io.open("/proc/self/stat"):read("n"))\n' .. H.read(dir .. "/watch_train.lua")
    local bad = good:gsub("local n, fail_rank = 512, nil", "local n, fail_rank = 512, 1")
    local ranks, at = nil, {}
    for k = 1, 50 do
      save_by_rename(dir, (k % 5 == 3 and bad or good) .. "-- edit " .. k .. "\n")
      wait_for(dir, "err", "rerun " .. k .. " [df][oa]", 1) -- done, or failed
      if k == 1 then
        ranks = {}
        for p in H.read(dir .. "/out"):gmatch("PID (%d+)") do ranks[#ranks + 1] = tonumber(p) end
        assert.are.equal(2, #ranks)
      end
      if k == 10 or k == 50 then
        at[k] = { host = holdings(pid) }
        for i, p in ipairs(ranks) do at[k][i] = holdings(p) end
      end
    end
    local err = H.read(dir .. "/err")
    assert.are.equal(10, count(err, "rerun %d+ failed on rank"))
    assert.are.equal(40, count(err, "rerun %d+ done"))
    assert.is_nil(err:match("in fresh ranks"), "a rerun was not warm")
    local pids = {}
    for p in H.read(dir .. "/out"):gmatch("PID (%d+)") do pids[tonumber(p)] = true end
    assert.are.same({ [ranks[1]] = true, [ranks[2]] = true }, pids) -- the same two processes all along
    for _, who in ipairs { 1, 2, "host" } do
      local a, b = at[10][who], at[50][who]
      io.stderr:write(("\n    [figure] %s after rerun 10 / 50: RSS %d / %d KiB, %d / %d fds, %d / %d shm mappings\n")
        :format(who == "host" and "host" or "rank " .. (who - 1), a.rss, b.rss, a.fds, b.fds, a.shm, b.shm))
      assert.are.equal(a.fds, b.fds)
      assert.are.equal(a.shm, b.shm)
      if who ~= "host" then assert.is_true(a.shm >= 1, "no shared segment seen") end
      assert.is_true(b.rss - a.rss < 1024, ("%s grew by %d KiB over 40 reruns"):format(tostring(who), b.rss - a.rss))
    end
    assert.is_true(stop(dir, pid))
  end)
end)
