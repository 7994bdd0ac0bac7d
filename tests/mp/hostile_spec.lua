-- The host and the store under hostile conditions (issue 12): strangers
-- flooding the store's port, a multi-node job without a secret token, the
-- rank blamed for a failure, a vanished remote host, what a killed host
-- leaves behind, and memory across init/destroy cycles. Timings are
-- asserted with generous bounds; the figures are printed (`busted -o TAP`
-- or the spec's output shows them).
-- Run: DDPLUA_BIN=./build/bin/ddplua busted --cpath="./build/lib/?.so" tests/mp/hostile_spec.lua
local H = require "helpers.host"

local BIN, q, sh, write = H.bin, H.q, H.sh, H.write
local SCRIPTS = H.abspath("tests/mp/scripts")

local function figure(fmt, ...) io.stderr:write("\n    [figure] " .. string.format(fmt, ...) .. "\n") end

describe("hostile conditions", function()
  local dir
  before_each(function() dir = H.tmpdir() end)
  after_each(function() sh("rm -rf " .. q(dir)) end)

  describe("a flood of unauthenticated connections on the store's port", function()
    -- Runs flood_job.lua at 2 ranks under a 1024-file limit; with `flood`,
    -- 2000 connections that never authenticate are opened before the ranks
    -- join. Returns the exit code, the job's result and time, the host's CPU
    -- seconds, the output.
    local function run_job(flood)
      sh("rm -rf " .. q(dir .. "/run") .. " && mkdir " .. q(dir .. "/run"))
      local run = dir .. "/run"
      local r = sh(([[
cd %s
prlimit --nofile=1024 %s --nproc 2 %s %s >out 2>err & host=$!
n=0; while [ ! -s port ] && [ $n -lt 1000 ]; do sleep 0.01; n=$((n+1)); done
if [ %s = 1 ]; then
  python3 %s $(cat port) 2000 ready & flood=$!
  n=0; while [ ! -s ready ] && [ $n -lt 3000 ]; do sleep 0.01; n=$((n+1)); done
fi
touch go
( sleep 90; kill -9 $host ) 2>/dev/null & watchdog=$!
wait $host; echo "rc=$?"
kill $watchdog 2>/dev/null
[ -n "$flood" ] && kill $flood
cat ready 2>/dev/null
]]):format(q(run), q(BIN), q(SCRIPTS .. "/flood_job.lua"), q(run), flood and 1 or 0, q(SCRIPTS .. "/flood.py")))
      local out = H.read(run .. "/out") or ""
      local res = {
        code = tonumber(r.out:match("rc=(%d+)")),
        opened = tonumber(r.out:match("rc=%d+\n(%d+)")),
        out = out .. (H.read(run .. "/err") or ""),
      }
      res.sum, res.ms = out:match("%[rank 0%] RESULT (%S+) (%d+)")
      res.ms = tonumber(res.ms)
      res.cpu = tonumber(out:match("HOSTCPU (%S+)"))
      return res
    end

    it("leaves the job's result and time unchanged and costs the store little CPU (under a 1024-file limit)", function()
      local base = run_job(false)
      assert.are.equal(0, base.code, base.out)
      local flooded = run_job(true)
      assert.are.equal(2000, flooded.opened, "the flood did not get its 2000 connections")
      assert.are.equal(0, flooded.code, flooded.out) -- it was "refused the connection (wrong job token?)"
      assert.are.equal(base.sum, flooded.sum)
      assert.matches("%[rank 1%] RESULT " .. H.pat(base.sum), flooded.out)
      figure("store flood: job %d ms without, %d ms with 2000 idle connections; host CPU over 2 s: %.3f s without, " ..
        "%.3f s with", base.ms, flooded.ms, base.cpu, flooded.cpu)
      assert.is_true(flooded.ms < base.ms + 10000, ("the job took %d ms flooded, %d ms not"):format(flooded.ms, base.ms))
      -- a store thread spinning on accept() would use most of the 2 s
      assert.is_true(flooded.cpu < 0.5, "the host used " .. flooded.cpu .. " s of CPU in 2 s")
    end)
  end)
end)
