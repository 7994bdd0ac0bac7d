-- The ddplua host: command line, config, ranks' environment, output relay,
-- supervision (failures, signals, clean-up), multi-node and schedulers.
-- Run: DDPLUA_BIN=./build/bin/ddplua busted --cpath="./build/lib/?.so" tests/mp/host_spec.lua
local H = require "helpers.host"

local BIN = H.bin
local q, sh, write = H.q, H.sh, H.write

-- A script printing the launcher's variables as one line "K=V K=V ...".
local ENV_NAMES = { "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR",
  "MASTER_PORT", "DDPLUA_JOB_TOKEN", "DDPLUA_TIMEOUT", "DDPLUA_BACKEND", "DDPLUA_NNODES", "DDPLUA_LAUNCHED",
  "DDPLUA_CONFIG", "DDPLUA_RANK_PREFIX", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "DDPLUA_WORKER_OF" }
local ENV_SCRIPT = [[
local names = {]] .. '"' .. table.concat(ENV_NAMES, '","') .. '"' .. [[}
local t = {}
for _, n in ipairs(names) do t[#t + 1] = n .. "=" .. (os.getenv(n) or "<unset>") end
local pid = io.open("/proc/self/stat"):read("n")
print("ENV " .. table.concat(t, " ") .. " PID=" .. pid)
]]

-- Parses the ENV lines of an output into { [rank] = {K = V} }, asserting
-- that each line carries its own rank's prefix and each rank appears once.
local function ranks_env(out)
  local by_rank, n = {}, 0
  for prefix, line in out:gmatch("([^\n]-)ENV ([^\n]*)") do
    local env = {}
    for k, v in line:gmatch("(%S+)=(%S+)") do env[k] = v end
    local r = tonumber(env.RANK)
    assert(r, "no RANK in: " .. line)
    assert(by_rank[r] == nil, "rank " .. r .. " printed twice")
    if prefix ~= "" then assert.are.equal("[rank " .. r .. "] ", prefix) end
    by_rank[r] = env
    n = n + 1
  end
  return by_rank, n
end

local cores = tonumber(sh("nproc").out)

-- The shared secret that jobs of processes started apart need (several
-- nodes' hosts, a scheduler's tasks): hostile_spec checks the refusal without one.
local SECRET = "DDPLUA_JOB_TOKEN=host-spec-0123456789abcdef "

describe("ddplua host", function()
  local dir
  before_each(function() dir = H.tmpdir() end)
  after_each(function() sh("rm -rf " .. q(dir)) end)

  describe("command line", function()
    it("rejects unknown options and bad values with exit 2, naming the option and what it expects", function()
      local cases = {
        { "--bogus 1 x.lua", "unknown option '%-%-bogus' %(valid options: %-%-nproc" },
        { "-x x.lua", "unknown option '%-x'" },
        { "--nproc 0 x.lua", "%-%-nproc: expected a positive integer or 'auto', got '0'" },
        { "--nproc=two x.lua", "%-%-nproc: expected a positive integer or 'auto', got 'two'" },
        { "--nproc", "%-%-nproc expects a value" },
        { "--backend gloo x.lua", "%-%-backend: expected one of auto, nccl, cpu, got 'gloo'" },
        { "--master_port 70000 x.lua", "%-%-master_port: expected a port number from 1 to 65535" },
        { "--timeout -1 x.lua", "%-%-timeout: expected a positive number of seconds, got '%-1'" },
        { "--nnodes 2 --node_rank 2 x.lua", "%-%-node_rank 2 is out of range for %-%-nnodes 2" },
        { "--config /nonexistent.yaml x.lua", "%-%-config: cannot open '/nonexistent.yaml'" },
        { "", "no script given" },
      }
      for _, c in ipairs(cases) do
        local r = sh(q(BIN) .. " " .. c[1])
        assert.are.equal(2, r.code, c[1])
        assert.matches(c[2], r.err)
      end
    end)

    it("prints --help and --version", function()
      local r = sh(q(BIN) .. " --help")
      assert.are.equal(0, r.code)
      assert.matches("%-%-nproc N|auto", r.out)
      assert.matches("%-%-master_port", r.out)
      r = sh(q(BIN) .. " --version")
      assert.are.equal(0, r.code)
      assert.matches("^ddplua %d+%.%d+ %(Lua 5%.4", r.out)
    end)

    it("runs --nproc 1 in-process with arg and ... as lua5.4 sets them", function()
      write(dir .. "/args.lua", [[
local parts = {}
for i = 0, #arg do parts[#parts + 1] = i .. "=" .. arg[i] end
print("ARGS " .. table.concat(parts, " ") .. " | " .. table.concat({...}, ","))
print("NEG " .. tostring(arg[-3]) .. " " .. tostring(arg[-2]) .. " " .. tostring(arg[-1]) .. " " .. tostring(arg[-4]))
local stat = io.open("/proc/self/stat"):read("a")
print("PID " .. stat:match("^(%d+)"))
]])
      local lua = sh("cd " .. q(dir) .. " && lua5.4 args.lua a 'b c' x=1")
      local ours = sh("cd " .. q(dir) .. " && " .. q(BIN) .. " args.lua a 'b c' x=1")
      assert.are.equal(0, ours.code, ours.err)
      assert.are.equal(lua.out:match("ARGS [^\n]*"), ours.out:match("ARGS [^\n]*"))
      assert.matches("ARGS 0=args.lua 1=a 2=b c 3=x=1 | a,b c,x=1", ours.out)
      -- the interpreter and its options sit at negative indices
      local withopts = sh("cd " .. q(dir) .. " && " .. q(BIN) .. " --timeout 5 args.lua a")
      assert.matches("NEG " .. H.pat(BIN) .. " %-%-timeout 5 nil", withopts.out)
      -- no fork: the script runs in the process the shell exec'ed
      local same = sh("cd " .. q(dir) .. " && sh -c " .. q("echo SHELL $$ && exec " .. q(BIN) .. " args.lua"))
      assert.are.equal(same.out:match("SHELL (%d+)"), same.out:match("PID (%d+)"))
    end)

    it("gives an in-process run the environment of a one-rank job", function()
      write(dir .. "/env.lua", ENV_SCRIPT)
      local r = sh(q(BIN) .. " " .. q(dir .. "/env.lua"))
      assert.are.equal(0, r.code, r.err)
      local env, n = ranks_env(r.out)
      assert.are.equal(1, n)
      local e = env[0]
      assert.are.same({ "0", "1", "1", "0", "127.0.0.1", "1", "1", "<unset>", "<unset>" },
        { e.LOCAL_RANK, e.WORLD_SIZE, e.LOCAL_WORLD_SIZE, e.NODE_RANK, e.MASTER_ADDR, e.DDPLUA_NNODES,
          e.DDPLUA_LAUNCHED, e.DDPLUA_RANK_PREFIX, e.DDPLUA_WORKER_OF })
      assert.matches("^%x+$", e.DDPLUA_JOB_TOKEN)
      assert.is_true(tonumber(e.MASTER_PORT) > 0)
      if cores > 1 then assert.are.equal("<unset>", e.OMP_NUM_THREADS) end
    end)

    it("serves the store of an in-process run on MASTER_PORT", function()
      -- a second job on the same port is refused while the first one runs
      write(dir .. "/nested.lua", ([[
local r = os.execute(%q .. " --master_port " .. os.getenv("MASTER_PORT") .. " " .. %q .. " 2>%s/nested.err")
print("NESTED", r)
]]):format(BIN, dir .. "/nested.lua", dir))
      local r = sh(q(BIN) .. " " .. q(dir .. "/nested.lua"))
      assert.are.equal(0, r.code, r.err)
      assert.matches("NESTED\tnil", r.out)
      assert.matches("port %d+ on 127%.0%.0%.1 is already in use", H.read(dir .. "/nested.err"))
    end)
  end)

  describe("workers", function()
    it("gives each of N ranks the torchrun environment, ranks 0..N-1 exactly once", function()
      write(dir .. "/env.lua", ENV_SCRIPT)
      local r = sh(q(BIN) .. " --nproc 3 --backend cpu --timeout 7.5 " .. q(dir .. "/env.lua"))
      assert.are.equal(0, r.code, r.err)
      local env, n = ranks_env(r.out)
      assert.are.equal(3, n)
      local pids = {}
      for rank = 0, 2 do
        local e = env[rank]
        assert.is_not_nil(e, "rank " .. rank .. " missing")
        assert.are.same({ tostring(rank), "3", "3", "0", "127.0.0.1", "7.5", "cpu", "1", "1", "1", "<unset>" },
          { e.LOCAL_RANK, e.WORLD_SIZE, e.LOCAL_WORLD_SIZE, e.NODE_RANK, e.MASTER_ADDR, e.DDPLUA_TIMEOUT,
            e.DDPLUA_BACKEND, e.DDPLUA_NNODES, e.DDPLUA_LAUNCHED, e.DDPLUA_RANK_PREFIX, e.DDPLUA_WORKER_OF })
        assert.are.equal(env[0].MASTER_PORT, e.MASTER_PORT)
        assert.are.equal(env[0].DDPLUA_JOB_TOKEN, e.DDPLUA_JOB_TOKEN)
        assert.is_nil(pids[e.PID], "two ranks in one process")
        pids[e.PID] = true
      end
      assert.matches("^%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x", env[0].DDPLUA_JOB_TOKEN)
    end)

    it("sets one BLAS/OpenMP thread per rank when the ranks fill the cores, unless the user set them", function()
      write(dir .. "/env.lua", ENV_SCRIPT)
      local r = sh(q(BIN) .. " --nproc " .. cores .. " " .. q(dir .. "/env.lua"))
      local env = ranks_env(r.out)
      assert.are.equal("1", env[0].OMP_NUM_THREADS)
      assert.are.equal("1", env[0].OPENBLAS_NUM_THREADS)
      r = sh("OMP_NUM_THREADS=3 " .. q(BIN) .. " --nproc " .. cores .. " " .. q(dir .. "/env.lua"))
      env = ranks_env(r.out)
      assert.are.equal("3", env[0].OMP_NUM_THREADS)
      assert.are.equal("1", env[0].OPENBLAS_NUM_THREADS)
    end)

    it("--nproc auto starts one rank per visible GPU, else one per core", function()
      write(dir .. "/env.lua", ENV_SCRIPT)
      local r = sh("CUDA_VISIBLE_DEVICES=0,1,2 " .. q(BIN) .. " --nproc auto " .. q(dir .. "/env.lua"))
      local _, n = ranks_env(r.out)
      assert.are.equal(3, n)
      r = sh("CUDA_VISIBLE_DEVICES= " .. q(BIN) .. " --nproc auto " .. q(dir .. "/env.lua"))
      _, n = ranks_env(r.out)
      assert.are.equal(cores, n)
    end)

    it("relays whole lines under heavy concurrent output (2 ranks x 10000 long lines)", function()
      write(dir .. "/spam.lua", [[
local r = os.getenv("RANK")
local pad = string.rep(string.char(97 + tonumber(r)), 300)
io.stdout:setvbuf("full", 4096) -- flushed in 4 KiB pieces, cutting lines anywhere
for i = 1, 10000 do
  if i % 3 == 0 then
    io.write(r, ":", i, ":") -- half a line, then a pause the other rank can write in
    io.stdout:flush()
    io.write(pad, "\n")
  elseif i % 3 == 1 then
    print(r .. ":" .. i .. ":" .. pad)
  else
    io.write(r, ":", i, ":", pad, "\n")
  end
end
]])
      local r = sh(q(BIN) .. " --nproc 2 " .. q(dir .. "/spam.lua"))
      assert.are.equal(0, r.code, r.err)
      local seen, count = { [0] = {}, [1] = {} }, 0
      for line in r.out:gmatch("[^\n]+") do
        local pr, rank, i, pad = line:match("^%[rank (%d)%] (%d):(%d+):(%l+)$")
        assert(pr and pr == rank, "mangled line: " .. line:sub(1, 80))
        assert.are.equal(string.rep(string.char(97 + tonumber(rank)), 300), pad)
        seen[tonumber(rank)][tonumber(i)] = true
        count = count + 1
      end
      assert.are.equal(20000, count)
      for rank = 0, 1 do
        for i = 1, 10000 do assert(seen[rank][i], ("rank %d line %d missing"):format(rank, i)) end
      end
    end)

    it("writes --log_dir/rank_N.log with both streams unprefixed, creating the directory", function()
      write(dir .. "/log.lua", [[
local r = os.getenv("RANK")
print("out line of " .. r)
io.stderr:write("err line of " .. r .. "\n")
io.write("partial last line of " .. r)
]])
      local logs = dir .. "/logs/sub"
      local r = sh(q(BIN) .. " --nproc 2 --log_dir " .. q(logs) .. " " .. q(dir .. "/log.lua"))
      assert.are.equal(0, r.code, r.err)
      for rank = 0, 1 do
        local log = H.read(logs .. "/rank_" .. rank .. ".log")
        assert.is_not_nil(log, "no log for rank " .. rank)
        local lines = {}
        for l in log:gmatch("[^\n]*\n") do lines[#lines + 1] = l end
        table.sort(lines) -- stdout and stderr are separate pipes: their relative order is not defined
        assert.are.same({ "err line of " .. rank .. "\n", "out line of " .. rank .. "\n",
          "partial last line of " .. rank .. "\n" }, lines)
        assert.matches("%[rank " .. rank .. "%] partial last line of " .. rank .. "\n", r.out)
        assert.matches("%[rank " .. rank .. "%] err line of " .. rank .. "\n", r.err)
      end
      -- a one-rank job with --log_dir is relayed too (in-process output could not be logged)
      r = sh(q(BIN) .. " --log_dir " .. q(logs) .. " " .. q(dir .. "/log.lua"))
      assert.are.equal(0, r.code, r.err)
      assert.matches("^%[rank 0%] out line of 0\n", r.out)
      assert.matches("out line of 0\n", H.read(logs .. "/rank_0.log"))
    end)

    it("shows a script error's traceback with the rank prefix and exits with its code", function()
      write(dir .. "/err.lua", [[
local function inner() error("boom on rank " .. os.getenv("RANK")) end
if os.getenv("RANK") == "1" then inner() end
]])
      local r = sh(q(BIN) .. " --nproc 2 " .. q(dir .. "/err.lua"))
      assert.are.equal(1, r.code)
      assert.matches("%[rank 1%] ddplua: [^\n]*err%.lua:1: boom on rank 1\n%[rank 1%] stack traceback:", r.err)
      assert.matches("%[rank 1%] \t[^\n]*in local 'inner'", r.err)
      assert.matches("ddplua: rank 1 %(pid %d+%) exited with code 1\n", r.err)
      assert.matches("ddplua: last %d+ lines of rank 1:\n    ddplua: [^\n]*boom on rank 1", r.err)
    end)

    it("propagates a rank's exit code, stopping the others at once", function()
      write(dir .. "/exit3.lua", [[
if os.getenv("RANK") == "1" then os.exit(3) end
os.execute("sleep 30")
]])
      local t0 = os.time()
      local r = sh(q(BIN) .. " --nproc 3 " .. q(dir .. "/exit3.lua"))
      assert.are.equal(3, r.code)
      assert.is_true(os.time() - t0 < 10)
      local _, summaries = r.err:gsub("ddplua: rank %d+ %(pid %d+%)", "")
      assert.are.equal(1, summaries)
      assert.matches("ddplua: rank 1 %(pid %d+%) exited with code 3", r.err)
    end)

    it("SIGKILLs ranks that outlive SIGTERM after the 3 s grace period", function()
      -- started with SIGTERM ignored (inherited by the ranks), rank 0 survives the SIGTERM
      local marker = H.marker()
      write(dir .. "/stubborn.lua", ([[
if os.getenv("RANK") == "1" then os.execute("sleep 0.2") os.exit(4) end
os.execute("sleep %s")
]]):format(marker))
      local r = sh("s=$(date +%s%N); env --ignore-signal=TERM " .. q(BIN) .. " --nproc 2 " ..
        q(dir .. "/stubborn.lua") .. "; rc=$?; echo $rc $(( ($(date +%s%N) - s) / 1000000 ))")
      local rc, ms = r.out:match("(%d+) (%d+)")
      assert.are.equal(4, tonumber(rc), r.err)
      assert.is_true(tonumber(ms) >= 3000 and tonumber(ms) < 10000, "took " .. ms .. " ms")
      assert.are.equal("", sh("pgrep -f " .. q("3[7]" .. marker:sub(3))).out, "processes left behind")
    end)

    it("lets a rank finish early with os.exit(0): the job ends when all do", function()
      write(dir .. "/early.lua", [[
if os.getenv("RANK") == "0" then os.exit(0) end
os.execute("sleep 0.3")
print("late rank done")
]])
      local r = sh(q(BIN) .. " --nproc 2 " .. q(dir .. "/early.lua"))
      assert.are.equal(0, r.code, r.err)
      assert.matches("%[rank 1%] late rank done", r.out)
    end)
  end)

  describe("supervision", function()
    -- Starts `ddplua --nproc 2 hang.lua` in the background; each rank writes
    -- its pid and token, creates a /dev/shm file named like the cpu process
    -- group's segments, and sleeps in a child process (found by the marker).
    local function start_hanging_job(extra_sh)
      local marker = H.marker()
      write(dir .. "/hang.lua", ([[
local r = os.getenv("RANK")
local token = os.getenv("DDPLUA_JOB_TOKEN")
io.open("/dev/shm/ddplua-" .. token .. "-seg" .. r, "w"):close()
local f = io.open(%q .. "/token", "w"); f:write(token); f:close()
local pid = io.open("/proc/self/stat"):read("n")
f = io.open(%q .. "/pid_" .. r .. ".tmp", "w"); f:write(pid); f:close()
os.rename(%q .. "/pid_" .. r .. ".tmp", %q .. "/pid_" .. r)
print("rank " .. r .. " waiting")
os.execute("sleep %s")
]]):format(dir, dir, dir, dir, marker))
      return marker, ([[
cd %s
env --default-signal=INT %s --nproc 2 hang.lua %s >out 2>err &
host=$!
n=0; while [ ! -s pid_0 ] || [ ! -s pid_1 ]; do sleep 0.02; n=$((n+1)); [ $n -gt 500 ] && break; done
%s
t0=$(date +%%s%%N)
( sleep 20; kill -9 $host ) 2>/dev/null & watchdog=$!
wait $host; rc=$?
t1=$(date +%%s%%N)
kill $watchdog 2>/dev/null
echo "$rc $(( (t1 - t0) / 1000000 ))"
]]):format(q(dir), q(BIN), marker, extra_sh)
    end

    local function check_clean(marker)
      -- "3[7].x" matches the marker but not this pgrep's own shell command line
      assert.are.equal("", sh("pgrep -f " .. q("3[7]" .. marker:sub(3))).out, "processes left behind")
      local token = H.read(dir .. "/token")
      assert.is_not_nil(token)
      assert.are.equal("", sh("ls /dev/shm | grep -F " .. q(token) .. " || true").out, "segments left behind")
    end

    it("ends the job when a rank is killed with kill -9, naming it, leaving no process or segment", function()
      local marker, script = start_hanging_job("kill -9 $(cat pid_1)")
      local r = sh(script)
      local rc, ms = r.out:match("(%d+) (%d+)")
      assert.are.equal(128 + 9, tonumber(rc))
      assert.is_true(tonumber(ms) < 10000, "took " .. ms .. " ms")
      local err = H.read(dir .. "/err")
      local pid1 = H.read(dir .. "/pid_1")
      assert.matches("ddplua: rank 1 %(pid " .. pid1 .. "%) was killed by signal 9 %(SIGKILL%)", err)
      assert.matches("last 1 line of rank 1:\n    rank 1 waiting", err)
      check_clean(marker)
    end)

    for _, sig in ipairs({ { "INT", 2 }, { "TERM", 15 } }) do
      it("stops everything on SIG" .. sig[1] .. " to the host", function()
        local marker, script = start_hanging_job("kill -" .. sig[1] .. " $host")
        local r = sh(script)
        local rc, ms = r.out:match("(%d+) (%d+)")
        assert.are.equal(128 + sig[2], tonumber(rc))
        assert.is_true(tonumber(ms) < 10000, "took " .. ms .. " ms")
        assert.matches("ddplua: received SIG" .. sig[1] .. "; stopped all 2 ranks", H.read(dir .. "/err"))
        check_clean(marker)
      end)
    end
  end)

  describe("store port", function()
    it("reports a busy --master_port clearly", function()
      -- rank 0 of a running job starts a second job on the first one's port
      write(dir .. "/busy.lua", ([[
if os.getenv("RANK") == "0" then
  os.execute(%q .. " --nproc 2 --master_port " .. os.getenv("MASTER_PORT") .. " x.lua 2>" .. %q)
end
]]):format(BIN, dir .. "/busy.err"))
      local r = sh("cd " .. q(dir) .. " && touch x.lua && " .. q(BIN) .. " --nproc 2 busy.lua")
      assert.are.equal(0, r.code, r.err)
      local err = H.read(dir .. "/busy.err")
      assert.matches("ddplua: store: port %d+ on 127%.0%.0%.1 is already in use %(pick another %-%-master_port", err)
    end)
  end)

  describe("multi-node", function()
    it("joins two hosts with different --nproc into one job of 3 ranks", function()
      write(dir .. "/env.lua", ENV_SCRIPT)
      local port = H.free_port()
      local common = SECRET .. q(BIN) .. " --nnodes 2 --master_addr 127.0.0.1 --master_port " .. port
      local r = sh(("cd %s && (%s --node_rank 1 --nproc 1 env.lua >out1 2>err1; echo $? >rc1) & " ..
        "sleep 0.2; cd %s && %s --node_rank 0 --nproc 2 env.lua >out0 2>err0; echo $? >rc0; wait")
        :format(q(dir), common, q(dir), common))
      assert.are.equal(0, r.code)
      assert.are.equal("0", H.read(dir .. "/rc0"):match("%d+"), H.read(dir .. "/err0"))
      assert.are.equal("0", H.read(dir .. "/rc1"):match("%d+"), H.read(dir .. "/err1"))
      local env0, n0 = ranks_env(H.read(dir .. "/out0"))
      local env1, n1 = ranks_env(H.read(dir .. "/out1"))
      assert.are.equal(2, n0)
      assert.are.equal(1, n1)
      local expect = { [0] = { env0, "0", "0", "2" }, [1] = { env0, "1", "0", "2" }, [2] = { env1, "0", "1", "1" } }
      for rank, x in pairs(expect) do
        local e = x[1][rank]
        assert.is_not_nil(e, "rank " .. rank)
        assert.are.same({ x[2], x[3], x[4], "3", "2", tostring(port) },
          { e.LOCAL_RANK, e.NODE_RANK, e.LOCAL_WORLD_SIZE, e.WORLD_SIZE, e.DDPLUA_NNODES, e.MASTER_PORT })
        assert.are.equal(env0[0].DDPLUA_JOB_TOKEN, e.DDPLUA_JOB_TOKEN)
      end
    end)

    it("stops every node when a rank on another node fails", function()
      write(dir .. "/f.lua", [[
if os.getenv("RANK") == "2" then os.exit(5) end
os.execute("sleep 30")
]])
      local port = H.free_port()
      local common = SECRET .. q(BIN) .. " --nnodes 2 --master_port " .. port
      local t0 = os.time()
      sh(("cd %s && (%s --node_rank 1 --nproc 1 f.lua >out1 2>err1; echo $? >rc1) & " ..
        "cd %s && %s --node_rank 0 --nproc 2 f.lua >out0 2>err0; echo $? >rc0; wait")
        :format(q(dir), common, q(dir), common))
      assert.is_true(os.time() - t0 < 10)
      assert.are.equal("5", H.read(dir .. "/rc1"):match("%d+"))
      assert.are.equal("5", H.read(dir .. "/rc0"):match("%d+"))
      assert.matches("rank 2 %(pid %d+ on node 1%) exited with code 5", H.read(dir .. "/err1"))
      assert.matches("stopped because another node failed: rank 2 %(pid %d+ on node 1%) exited with code 5",
        H.read(dir .. "/err0"))
    end)

    it("names the nodes that never joined when the timeout passes", function()
      write(dir .. "/x.lua", "")
      local r = sh(SECRET .. q(BIN) .. " --nnodes 3 --node_rank 0 --timeout 0.5 --master_port " .. H.free_port() .. " " ..
        q(dir .. "/x.lua"))
      assert.are.equal(1, r.code)
      assert.matches("node 0: rendezvous with the other nodes' hosts at 127%.0%.0%.1:%d+ failed", r.err)
      assert.matches("host/node/1 host/node/2", r.err)
    end)
  end)

  describe("schedulers", function()
    it("maps Slurm task variables to ranks (srun), rank 0 serving the store", function()
      write(dir .. "/env.lua", ENV_SCRIPT)
      -- 3 tasks on 2 nodes: 2 + 1; no MASTER_PORT, so every task derives it from the job id
      local tasks = { { 0, 0, 0 }, { 1, 1, 0 }, { 2, 0, 1 } }
      local cmds = {}
      for _, t in ipairs(tasks) do
        cmds[#cmds + 1] = ("env -u MASTER_PORT -u MASTER_ADDR " .. SECRET .. "SLURM_JOB_ID=4242 SLURM_STEP_ID=0 SLURM_NTASKS=3 " ..
          "SLURM_NNODES=2 SLURM_STEP_TASKS_PER_NODE='2,1' SLURM_LAUNCH_NODE_IPADDR=127.0.0.1 " ..
          "SLURM_PROCID=%d SLURM_LOCALID=%d SLURM_NODEID=%d %s env.lua >out%d 2>&1")
          :format(t[1], t[2], t[3], q(BIN), t[1])
      end
      local r = sh("cd " .. q(dir) .. " && " .. table.concat(cmds, " && "))
      assert.are.equal(0, r.code, r.err)
      local port
      for _, t in ipairs(tasks) do
        local env, n = ranks_env(H.read(dir .. "/out" .. t[1]))
        assert.are.equal(1, n)
        local e = env[t[1]]
        assert.is_not_nil(e, H.read(dir .. "/out" .. t[1]))
        assert.are.same({ tostring(t[2]), tostring(t[3]), t[3] == 0 and "2" or "1", "3", "2", "127.0.0.1", "1" },
          { e.LOCAL_RANK, e.NODE_RANK, e.LOCAL_WORLD_SIZE, e.WORLD_SIZE, e.DDPLUA_NNODES, e.MASTER_ADDR,
            e.DDPLUA_LAUNCHED })
        port = port or e.MASTER_PORT
        assert.are.equal(port, e.MASTER_PORT)
      end
      -- rank 0 holds MASTER_PORT while its script runs
      write(dir .. "/probe.lua", ([[
os.execute("env -u SLURM_PROCID " .. %q .. " --master_port " .. os.getenv("MASTER_PORT") .. " " .. %q .. " 2>" .. %q)
]]):format(BIN, dir .. "/env.lua", dir .. "/probe.err"))
      r = sh("cd " .. q(dir) .. " && " .. SECRET .. "SLURM_JOB_ID=7 SLURM_STEP_ID=0 SLURM_NTASKS=2 SLURM_PROCID=0 SLURM_LOCALID=0 " ..
        "SLURM_NODEID=0 MASTER_ADDR=127.0.0.1 " .. q(BIN) .. " probe.lua")
      assert.are.equal(0, r.code, r.err)
      assert.matches("port %d+ on 127%.0%.0%.1 is already in use", H.read(dir .. "/probe.err"))
    end)

    it("reads this node's task count from Slurm's compressed SLURM_STEP_TASKS_PER_NODE", function()
      write(dir .. "/env.lua", ENV_SCRIPT)
      -- "3(x2),1": nodes 0 and 1 run 3 tasks each, node 2 runs 1
      for node, expect in pairs({ [0] = "3", [1] = "3", [2] = "1" }) do
        local r = sh((SECRET .. "SLURM_JOB_ID=5 SLURM_STEP_ID=1 SLURM_NTASKS=7 SLURM_NNODES=3 " ..
          "SLURM_STEP_TASKS_PER_NODE='3(x2),1' SLURM_PROCID=6 SLURM_LOCALID=0 SLURM_NODEID=%d " ..
          "MASTER_ADDR=127.0.0.1 %s %s"):format(node, q(BIN), q(dir .. "/env.lua")))
        assert.are.equal(0, r.code, r.err)
        local e = ranks_env(r.out)[6]
        assert.are.same({ expect, tostring(node), "3" }, { e.LOCAL_WORLD_SIZE, e.NODE_RANK, e.DDPLUA_NNODES })
      end
      local r = sh("SLURM_JOB_ID=5 SLURM_STEP_ID=1 SLURM_NTASKS=7 SLURM_NNODES=3 SLURM_STEP_TASKS_PER_NODE='3(x2' " ..
        "SLURM_PROCID=6 SLURM_LOCALID=0 SLURM_NODEID=2 MASTER_ADDR=127.0.0.1 " .. q(BIN) .. " x.lua")
      assert.are.equal(2, r.code)
      assert.matches("Slurm: cannot read node 2's task count from SLURM_STEP_TASKS_PER_NODE='3%(x2'", r.err)
    end)

    it("maps Open MPI variables to ranks (mpirun)", function()
      write(dir .. "/env.lua", ENV_SCRIPT)
      local r = sh(SECRET .. "OMPI_COMM_WORLD_RANK=3 OMPI_COMM_WORLD_SIZE=4 OMPI_COMM_WORLD_LOCAL_RANK=1 " ..
        "OMPI_COMM_WORLD_LOCAL_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=1 " .. q(BIN) .. " " .. q(dir .. "/env.lua"))
      assert.are.equal(0, r.code, r.err)
      local env = ranks_env(r.out)
      local e = env[3]
      assert.is_not_nil(e, r.out)
      assert.are.same({ "1", "1", "2", "4", "2", "1" },
        { e.LOCAL_RANK, e.NODE_RANK, e.LOCAL_WORLD_SIZE, e.WORLD_SIZE, e.DDPLUA_NNODES, e.MASTER_PORT })
    end)

    it("says which scheduler variable is wrong or missing", function()
      local r = sh("OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=4 OMPI_COMM_WORLD_LOCAL_RANK=1 " ..
        "OMPI_COMM_WORLD_LOCAL_SIZE=2 MASTER_PORT=5 env -u MASTER_ADDR " .. q(BIN) .. " x.lua")
      assert.are.equal(2, r.code)
      assert.matches("Open MPI: MASTER_ADDR is not set; the ranks span 2 nodes", r.err)
      r = sh("SLURM_PROCID=5 SLURM_STEP_ID=0 SLURM_NTASKS=2 SLURM_LOCALID=0 SLURM_NODEID=0 " .. q(BIN) .. " x.lua")
      assert.are.equal(2, r.code)
      assert.matches("Slurm: SLURM_PROCID=5 is out of range for SLURM_NTASKS=2", r.err)
    end)
  end)

  describe("--config", function()
    it("takes launcher options from ddplua: and the script from script:, the command line winning", function()
      write(dir .. "/env.lua", ENV_SCRIPT)
      sh("mkdir -p " .. q(dir .. "/configs"))
      write(dir .. "/configs/run.yaml", "script: ../env.lua\nlr: 0.1\nddplua:\n  nproc: 2\n  backend: cpu\n" ..
        "  timeout: 12\n")
      local r = sh("cd " .. q(dir) .. " && " .. q(BIN) .. " --config configs/run.yaml lr=0.2")
      assert.are.equal(0, r.code, r.err)
      local env, n = ranks_env(r.out)
      assert.are.equal(2, n)
      local real = sh("realpath " .. q(dir .. "/configs/run.yaml")).out:match("[^\n]+")
      assert.are.same({ "cpu", "12", real }, { env[1].DDPLUA_BACKEND, env[1].DDPLUA_TIMEOUT, env[1].DDPLUA_CONFIG })
      r = sh("cd " .. q(dir) .. " && " .. q(BIN) .. " --nproc 1 --timeout 3 --config configs/run.yaml")
      env, n = ranks_env(r.out)
      assert.are.equal(1, n)
      assert.are.same({ "3", "cpu", real }, { env[0].DDPLUA_TIMEOUT, env[0].DDPLUA_BACKEND, env[0].DDPLUA_CONFIG })
    end)

    it("reports YAML errors with file:line:column and bad ddplua: keys and values, exit 2", function()
      write(dir .. "/bad.yaml", "a: 1\n  b: [1, 2\n")
      write(dir .. "/key.yaml", "ddplua:\n  nprocs: 2\n")
      write(dir .. "/val.yaml", "ddplua:\n  nproc: two\n")
      write(dir .. "/float.yaml", "ddplua:\n  master_port: 80.0\n")
      write(dir .. "/noscript.yaml", "script: missing.lua\n")
      -- 30000 levels crashed the host (SIGSEGV, exit 139)
      write(dir .. "/deep.yaml", "lr: " .. string.rep("[", 30000) .. string.rep("]", 30000) .. "\n")
      local cases = {
        { "deep.yaml", "ddplua: deep%.yaml:1:104: nested more than 100 levels deep" },
        { "bad.yaml", "ddplua: bad%.yaml:2:%d+: " },
        { "key.yaml", "key%.yaml: unknown key 'ddplua%.nprocs' %(valid keys: nproc, nnodes, node_rank, master_addr, " ..
          "master_port, backend, timeout, log_dir%)" },
        { "val.yaml", "val%.yaml: ddplua%.nproc: expected a positive integer or 'auto', got 'two'" },
        { "float.yaml", "float%.yaml: ddplua%.master_port: expected a port number from 1 to 65535, got '80%.0'" },
        { "noscript.yaml", "noscript%.yaml: script 'missing%.lua' not found" },
      }
      for _, c in ipairs(cases) do
        local r = sh("cd " .. q(dir) .. " && " .. q(BIN) .. " --config " .. c[1])
        assert.are.equal(2, r.code, c[1])
        assert.matches(c[2], r.err)
      end
    end)
  end)

  describe("tools", function()
    it("runs lua/ddplua/tools/<name>.lua next to the Lua library, and lists the tools for an unknown one", function()
      -- a copy of the host in a tree of its own: <root>/build/bin/ddplua finds <root>/lua
      local root = dir .. "/tree"
      sh("mkdir -p " .. q(root .. "/build/bin") .. " " .. q(root .. "/lua/ddplua/tools") .. " && cp " .. q(BIN) ..
        " " .. q(root .. "/build/bin/ddplua"))
      write(root .. "/lua/ddplua/init.lua", "return {}\n")
      write(root .. "/lua/ddplua/tools/greet.lua", "print('greet', arg[0]:match('[^/]+$'), ...)\n")
      write(root .. "/lua/ddplua/tools/plot_all.lua", "\n")
      local bin = q(root .. "/build/bin/ddplua")
      local r = sh("cd " .. q(dir) .. " && " .. bin .. " greet a b")
      assert.are.equal(0, r.code, r.err)
      assert.are.equal("greet\tgreet.lua\ta\tb\n", r.out)
      r = sh("cd " .. q(dir) .. " && " .. bin .. " nosuch x")
      assert.are.equal(2, r.code)
      assert.matches("'nosuch' is neither a script file nor a tool; available tools: ", r.err)
      assert.matches("greet", r.err)
      assert.matches("plot_all", r.err)
      -- an existing file of that name is a script, not a tool
      write(dir .. "/greet", "print('the file')\n")
      r = sh("cd " .. q(dir) .. " && " .. bin .. " greet")
      assert.are.equal("the file\n", r.out)
    end)
  end)
end)
