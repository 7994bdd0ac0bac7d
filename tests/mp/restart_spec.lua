-- Surviving failures (issue 16): --max_restarts with ddp.checkpoint_every /
-- ddp.resume ends where an uninterrupted run does, bit for bit; a failure
-- beyond N ends the job as without restarts; --nnodes MIN:MAX goes on
-- without a lost node (every sample of the epoch trained once across the
-- two generations), also when the lost node's machine drops off the network
-- (network namespaces joined by veth, as root; reported pending elsewhere),
-- and takes in a node that joins; DistributedSampler
-- re-shards a saved position at another world size.
-- Run: DDPLUA_BIN=./build/bin/ddplua busted --cpath="./build/lib/?.so" tests/mp/restart_spec.lua
local H = require "helpers.host"
local ddp = require "ddplua"
local core = require "ddplua.core"

local BIN, q, sh = H.bin, H.q, H.sh
local SCRIPT = H.abspath("tests/mp/scripts/restart_train.lua")
local SECRET = "DDPLUA_JOB_TOKEN=restart-spec-0123456789abcdef "

local function figure(fmt, ...) io.stderr:write("\n    [figure] " .. string.format(fmt, ...) .. "\n") end

local function same_tensors(a, b)
  local ta, tb = ddp.load(a), ddp.load(b)
  local n = 0
  for name, t in pairs(ta) do
    assert.is_not_nil(tb[name], name)
    assert.are.equal(core.tobytes(t), core.tobytes(tb[name]), name .. " differs")
    n = n + 1
  end
  return n
end

-- The dataset positions of each training step in dir/seen_<gen>_<rank>: {step, epoch, {positions}}.
local function seen(path)
  local out = {}
  for line in (H.read(path) or ""):gmatch("[^\n]+") do
    local nums = {}
    for v in line:gmatch("%d+") do nums[#nums + 1] = tonumber(v) end
    out[#out + 1] = { step = nums[1], epoch = nums[2], pos = { table.unpack(nums, 3) } }
  end
  return out
end

describe("restarts", function()
  local dir
  before_each(function() dir = H.tmpdir() end)
  after_each(function() sh("rm -rf " .. q(dir)) end)

  local function run(opts, args)
    return sh(("cd %s && %s %s %s dir=%s %s"):format(q(dir), q(BIN), opts, q(SCRIPT), q(dir), args))
  end

  it("kill -9 of a rank mid-epoch under --max_restarts 1: the job completes, its parameters equal an " ..
    "uninterrupted run's bitwise", function()
    local plain = run("--nproc 2", "tag=plain")
    assert.are.equal(0, plain.code, plain.err)
    sh("rm -f " .. q(dir) .. "/resume.safetensors " .. q(dir) .. "/seen_*")
    -- rank 1 kills itself at step 7; the last checkpoint is step 6's (every 3 steps)
    local r = run("--nproc 2 --max_restarts 1 --restart_delay 0", "tag=killed kill_rank=1 kill_step=7 kill_gens=0")
    assert.are.equal(0, r.code, r.err)
    assert.matches("ddplua: restart 1 of 1 %(world size 2%): rank 1 %(pid %d+%) was killed by signal 9 %(SIGKILL%)\n",
      r.err)
    assert.matches("%[rank 0%] resumed from [^\n]*resume%.safetensors: epoch 1, step 6\n", r.out)
    assert.matches("done rank 1 world 2 generation 1 steps 26", r.out) -- DDPLUA_RESTART_COUNT = 1
    assert.are.equal(4, same_tensors(dir .. "/final_plain.safetensors", dir .. "/final_killed.safetensors"))
    -- logged in the run directory (where the checkpoint is)
    assert.matches("generation 1: restart 1 of 1 %(world size 2%): rank 1 %(pid %d+%) was killed by signal 9",
      H.read(dir .. "/restarts.log") or "")
  end)

  it("a second failure beyond --max_restarts ends the job with the summary as without restarts", function()
    local r = run("--nproc 2 --max_restarts 1 --restart_delay 0", "kill_rank=1 kill_step=7 kill_gens=0,1")
    assert.are.equal(128 + 9, r.code, r.err)
    local _, restarts = r.err:gsub("ddplua: restart %d", "")
    assert.are.equal(1, restarts)
    assert.matches("ddplua: rank 1 %(pid %d+%) was killed by signal 9 %(SIGKILL%)\n", r.err)
    assert.is_nil(r.err:match("restart 2"))
  end)

  it("--restart_delay waits before the restart; --max_restarts 0 (the default) does not restart", function()
    local t0 = core.clock()
    local r = run("--nproc 2 --max_restarts 1 --restart_delay 1.5", "kill_rank=0 kill_step=2 kill_gens=0")
    assert.are.equal(0, r.code, r.err)
    assert.is_true(core.clock() - t0 >= 1.5)
    sh("rm -f " .. q(dir .. "/resume.safetensors"))
    r = run("--nproc 2", "kill_rank=0 kill_step=2 kill_gens=0")
    assert.are.equal(128 + 9, r.code)
    assert.is_nil(r.err:match("restart"))
    assert.matches("ddplua: rank 0 %(pid %d+%) was killed by signal 9", r.err)
  end)

  describe("across nodes", function()
    -- Node 0 and node 1 (one rank each) on 127.0.0.1; `kill_node1` kills node 1's host with -9 once
    -- dir/paused exists. Returns both results and the ms node 0 took after the kill.
    local function two_nodes(nnodes, opts, args1, kill_node1)
      local port = H.free_port()
      local common = SECRET .. q(BIN) .. " --nnodes " .. nnodes .. " --nproc 1 --timeout 30 --master_port " .. port ..
          " " .. opts
      local r = sh(([[
cd %s
%s --node_rank 1 %s dir=%s %s >out1 2>err1 & n1=$!
%s --node_rank 0 %s dir=%s tag=node0 >out0 2>err0 & n0=$!
if [ %s = 1 ]; then
  n=0; while [ ! -e paused ] && [ $n -lt 1500 ]; do sleep 0.02; n=$((n+1)); done
  kill -9 $n1
fi
t0=$(date +%%s%%N)
( sleep 60; kill -9 $n0 $n1 ) 2>/dev/null & watchdog=$!
wait $n0; echo "rc0=$? $(( ($(date +%%s%%N) - t0) / 1000000 ))"
wait $n1; echo "rc1=$?"
kill $watchdog 2>/dev/null
]]):format(q(dir), common, q(SCRIPT), q(dir), args1, common, q(SCRIPT), q(dir), kill_node1 and 1 or 0))
      local res = {}
      for n = 0, 1 do
        res[n] = { code = tonumber(r.out:match("rc" .. n .. "=(%d+)")), out = H.read(dir .. "/out" .. n) or "",
          err = H.read(dir .. "/err" .. n) or "" }
      end
      res.ms = tonumber(r.out:match("rc0=%d+ (%d+)"))
      return res
    end

    it("a 2-node job under --nnodes 1:2 that loses node 1 mid-epoch finishes on node 0 alone, every sample " ..
      "of the epoch trained once", function()
      local r = two_nodes("1:2", "--max_restarts 1 --restart_delay 0", "pause_rank=1 pause_step=7", true)
      assert.are.equal(0, r[0].code, r[0].err)
      figure("node 1 lost at step 7 of a 1:2 job: node 0 finished alone %d ms after the kill", r.ms)
      assert.matches("ddplua: restart 1 of 1 %(new world size 1, was 2%): node 1's host was lost", r[0].err)
      assert.matches("resumed from [^\n]*: epoch 1, step 6 %(saved by 2 ranks, now 1", r[0].out)
      assert.matches("done rank 0 world 1 generation 1 steps 44", r[0].out) -- 6 + 200 / 8 - 6 * 2 + 200 / 8
      -- epoch 1: generation 0's steps up to the checkpoint (both ranks), then generation 1's
      local times = {}
      for _, f in ipairs { "seen_0_0", "seen_0_1", "seen_1_0" } do
        for _, s in ipairs(seen(dir .. "/" .. f)) do
          if s.epoch == 1 and (f == "seen_1_0" or s.step <= 6) then
            for _, p in ipairs(s.pos) do times[p] = (times[p] or 0) + 1 end
          end
        end
      end
      for p = 1, 200 do assert.are.equal(1, times[p], "sample " .. p .. " trained " .. (times[p] or 0) .. " times") end
      assert.is_nil(times[0])
      assert.is_nil(times[201])
    end)

    describe("two network namespaces joined by veth", function()
      local tag = os.time() % 100000
      local ns = { "ddplua_e0_" .. tag, "ddplua_e1_" .. tag }
      local veth = { "ddpe0_" .. tag, "ddpe1_" .. tag } -- tagged too: the root namespace is shared
      local why
      setup(function()
        if sh("id -u").out:match("^(%d+)") ~= "0" then why = "not root" return end
        if sh("command -v ip").code ~= 0 then why = "the ip command (iproute2) is missing" return end
        for _, c in ipairs {
          "ip netns add " .. ns[1], "ip netns add " .. ns[2], "ip link add " .. veth[1] .. " type veth peer name " .. veth[2],
          "ip link set " .. veth[1] .. " netns " .. ns[1], "ip link set " .. veth[2] .. " netns " .. ns[2],
          "ip -n " .. ns[1] .. " addr add 10.215.0.1/24 dev " .. veth[1], "ip -n " .. ns[2] .. " addr add 10.215.0.2/24 dev " .. veth[2],
          "ip -n " .. ns[1] .. " link set " .. veth[1] .. " up", "ip -n " .. ns[2] .. " link set " .. veth[2] .. " up",
          "ip -n " .. ns[1] .. " link set lo up", "ip -n " .. ns[2] .. " link set lo up",
        } do
          local r = sh(c)
          if r.code ~= 0 then
            why = "cannot create network namespaces here (`" .. c .. "`: " .. r.err:gsub("\n", " ") .. ")"
            return
          end
        end
      end)
      teardown(function() sh("ip netns del " .. ns[1] .. "; ip netns del " .. ns[2]) end)

      it("a node whose machine drops off the network: node 0 goes on alone in seconds", function()
        if why then
          pending("skipped: " .. why)
          return
        end
        local common = "env " .. SECRET .. q(BIN) .. " --nnodes 1:2 --nproc 1 --max_restarts 1 --restart_delay 0 " ..
            "--master_addr 10.215.0.1 --master_port 29617 --timeout 60 "
        local r = sh(([[
cd %s
ip netns exec %s %s --node_rank 1 %s dir=%s pause_rank=1 pause_step=7 >out1 2>err1 & n1=$!
ip netns exec %s %s --node_rank 0 %s dir=%s tag=node0 >out0 2>err0 & n0=$!
n=0; while [ ! -e paused ] && [ $n -lt 1500 ]; do sleep 0.02; n=$((n+1)); done
ip -n %s link set %s down    # node 1's machine drops off the network (no FIN, no RST)
kill -9 $n1                      # and is gone
t0=$(date +%%s%%N)
( sleep 100; kill -9 $n0 ) 2>/dev/null & watchdog=$!
wait $n0; echo "rc0=$? $(( ($(date +%%s%%N) - t0) / 1000000 ))"
kill $watchdog 2>/dev/null
]]):format(q(dir), ns[2], common, q(SCRIPT), q(dir), ns[1], common, q(SCRIPT), q(dir), ns[2], veth[2]))
        local rc, ms = r.out:match("rc0=(%d+) (%d+)")
        local err0 = H.read(dir .. "/err0") or ""
        assert.are.equal("0", rc, err0)
        figure("node 1 dropped off the network at step 7 of a 1:2 job: node 0 finished alone %d ms later", tonumber(ms))
        assert.matches("ddplua: restart 1 of 1 %(new world size 1, was 2%): node 1's host was lost", err0)
        assert.matches("done rank 0 world 1 generation 1 steps 44", H.read(dir .. "/out0") or "")
        assert.is_true(tonumber(ms) < 40000, "node 0 took " .. ms .. " ms") -- keepalive: seconds, not --timeout
      end)
    end)

    it("a fixed --nnodes 2 job that loses a node cannot restart without it", function()
      local r = two_nodes("2", "--max_restarts 1 --restart_delay 0", "pause_rank=1 pause_step=7", true)
      assert.are.equal(1, r[0].code, r[0].err)
      assert.matches("ddplua: node 1's host was lost[^\n]*\nddplua: cannot restart: node 1's host was lost, and a " ..
        "job of %-%-nnodes 2 cannot go on without it", r[0].err)
    end)

    it("takes in a node that joins a --nnodes 1:2 job (a restart not counted as a failure)", function()
      H.write(dir .. "/join.lua", [[
local ddp = require "ddplua"
local dist = ddp.distributed
dist.init_process_group { backend = "cpu" }
print("generation " .. os.getenv("DDPLUA_RESTART_COUNT") .. " world " .. dist.get_world_size())
if dist.get_world_size() == 1 then io.open("alone", "w"):close() os.execute("sleep 30") end
local t = ddp.ones(1)
dist.all_reduce(t)
print("sum " .. t:item())
]])
      local port = H.free_port()
      local common = SECRET .. q(BIN) .. " --nnodes 1:2 --nproc 1 --timeout 30 --restart_delay 0 --master_port " .. port
      local r = sh(([[
cd %s
%s --node_rank 0 join.lua >out0 2>err0 & n0=$!
n=0; while [ ! -e alone ] && [ $n -lt 1500 ]; do sleep 0.02; n=$((n+1)); done
%s --node_rank 1 join.lua >out1 2>err1 & n1=$!
( sleep 60; kill -9 $n0 $n1 ) 2>/dev/null & watchdog=$!
wait $n0; echo "rc0=$?"; wait $n1; echo "rc1=$?"
kill $watchdog 2>/dev/null
]]):format(q(dir), common, common))
      assert.matches("rc0=0\nrc1=0", r.out, 1, true)
      local out0, out1 = H.read(dir .. "/out0"), H.read(dir .. "/out1")
      assert.matches("generation 0 world 1\n.*generation 1 world 2\n.*sum 2%.0", out0)
      assert.matches("generation 1 world 2\n.*sum 2%.0", out1)
      assert.matches("ddplua: restart for a joining node %(not counted%) %(new world size 2, was 1%): node 1's host " ..
        "asks to join the job", H.read(dir .. "/err0"))
    end)
  end)
end)

describe("DistributedSampler resumed at another world size", function()
  local data = ddp.data

  -- Every rank of a world of R, from `state`, takes the rest of the epoch: the positions, in order of rank.
  local function rest(n, R, state, opts)
    local all = {}
    for r = 0, R - 1 do
      local s = data.DistributedSampler(n, { num_replicas = R, rank = r, seed = 5, drop_last = opts and opts.drop_last })
      s:load_state_dict(state)
      s:set_epoch(state.epoch)
      all[r + 1] = s:indices()
      assert.are.equal(#all[r + 1], s:remaining())
    end
    return all
  end

  local function taken(n, R, epoch, k, opts) -- what each of R ranks took in its first k samples
    local out = {}
    for r = 0, R - 1 do
      local s = data.DistributedSampler(n, { num_replicas = R, rank = r, seed = 5, drop_last = opts and opts.drop_last })
      s:set_epoch(epoch)
      out[r + 1] = table.move(s:indices(), 1, k, 1, {})
    end
    return out
  end

  local function counts(lists, into)
    into = into or {}
    for _, l in ipairs(lists) do for _, p in ipairs(l) do into[p] = (into[p] or 0) + 1 end end
    return into
  end

  it("deals out the rest of the epoch over the new ranks: 3 -> 2 -> 4 ranks, each sample once", function()
    local n = 100
    local before = taken(n, 3, 2, 10) -- 30 positions taken
    local state = { epoch = 2, position = 10, offset = 0, num_replicas = 3 }
    local mid = {}
    for r = 0, 1 do
      local s = data.DistributedSampler(n, { num_replicas = 2, rank = r, seed = 5 })
      s:load_state_dict(state)
      assert.are.same({ epoch = 2, position = 0, offset = 30, num_replicas = 2 }, s:state_dict())
      mid[r + 1] = table.move(s:indices(), 1, 15, 1, {}) -- 30 more
    end
    local last = rest(n, 4, { epoch = 2, position = 15, offset = 30, num_replicas = 2 }) -- 40 left: 10 each
    for _, l in ipairs(last) do assert.are.equal(10, #l) end
    local c = counts(last, counts(mid, counts(before)))
    for p = 1, n do assert.are.equal(1, c[p], "position " .. p) end
  end)

  it("pads the rest from its front (as a whole epoch is padded), or drops it with drop_last", function()
    local n = 10
    local c = counts(rest(n, 3, { epoch = 1, position = 1, offset = 0, num_replicas = 2 })) -- 8 left, 3 ranks: 9
    local total, twice = 0, 0
    for _, k in pairs(c) do
      total = total + k
      if k == 2 then twice = twice + 1 end
    end
    assert.are.same({ 9, 1 }, { total, twice })
    local dropped = rest(n, 3, { epoch = 1, position = 1, offset = 0, num_replicas = 2 }, { drop_last = true })
    for _, l in ipairs(dropped) do assert.are.equal(2, #l) end
  end)

  it("keeps PyTorch's order at the same world size, skipping what the state took", function()
    local s = data.DistributedSampler(10, { num_replicas = 2, rank = 1, seed = 5 })
    s:set_epoch(3)
    local whole = s:indices()
    local t = data.DistributedSampler(10, { num_replicas = 2, rank = 1, seed = 5 })
    t:load_state_dict({ epoch = 3, position = 2 }) -- an old state: no offset, no num_replicas
    assert.are.same(table.move(whole, 3, 5, 1, {}), t:indices())
  end)

  it("refuses a state that does not fit, naming the field", function()
    local s = data.DistributedSampler(10, { num_replicas = 2, rank = 0 })
    local cases = {
      { { epoch = 1, offset = 11 }, "offset is 11, expected an integer in 0..10" },
      { { epoch = 1, num_replicas = 0 }, "num_replicas is 0, expected a positive integer" },
      { { epoch = 1, position = 4, offset = 4, num_replicas = 3 }, "position is 4, expected an integer in 0..2" },
      { { epoch = 1, rank = 1 }, "unknown field 'rank' (expected epoch, position, offset, num_replicas)" },
    }
    for _, c in ipairs(cases) do
      local ok, err = pcall(s.load_state_dict, s, c[1])
      assert.is_false(ok)
      assert.matches(c[2], err, 1, true)
    end
  end)
end)

describe("ddp.checkpoint_every", function()
  it("refuses bad options, naming them", function()
    local model = ddp.nn.Linear(2, 2)
    local cases = {
      { {}, "checkpoint_every: path must be a file name" },
      { { path = "x", model = model }, "give either steps= or seconds=" },
      { { path = "x", model = model, steps = 0 }, "steps must be a positive integer, got 0" },
      { { path = "x", model = model, seconds = -1 }, "seconds must be a positive number, got -1" },
      { { path = "x", steps = 1 }, "model= is needed" },
      { { path = "x", model = model, steps = 1, sampler = {} }, "the sampler must have state_dict()" },
      { { path = "x", model = model, steps = 1, every = 2 }, "unknown option 'every'" },
    }
    for _, c in ipairs(cases) do
      local ok, err = pcall(ddp.checkpoint_every, c[1])
      assert.is_false(ok)
      assert.matches(c[2], err, 1, true)
    end
    local ok, err = pcall(ddp.resume, {})
    assert.is_false(ok)
    assert.matches("resume: call ddp.checkpoint_every{...} first", err, 1, true)
  end)
end)
