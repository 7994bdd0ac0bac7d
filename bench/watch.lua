-- Edit-to-output under `ddplua --watch` against a cold start, on the
-- Fashion-MNIST example (examples/fashion_mnist/train.lua, which keeps its
-- datasets with ddp.keep), at --nproc 2:
--   warm: from saving the script (a temporary file renamed over it, as editors do) to the rerun's
--         first output (the example's configuration, "config (defaults < command line):"), and to
--         its line "Fashion-MNIST mlp on 2 process(es) ...", printed once the data, the model
--         (1.9 M parameters drawn from the generator), the DDP wrapper and the optimizer are ready;
--   cold: from starting `ddplua --nproc 2 train.lua` to the same two lines.
-- The two alternate (a cold run, then an edit), on a copy of the example in a temporary directory.
--   ./build/bin/ddplua bench/watch.lua [reps=5]          (bench/run.lua runs it: make bench)
local ddp = require "ddplua"

local reps = 5
for _, a in ipairs(arg) do reps = tonumber(a:match("^reps=(%d+)$")) or error("usage: watch.lua [reps=N]", 0) end
local root = (arg[0]:match("^(.*)/bench/[^/]*$") or ".")
local function q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end
local host = io.popen("readlink -f " .. q(arg[-1])):read("l") -- the host running this script
local dir = io.popen("mktemp -d /tmp/ddplua-bench-watch.XXXXXX"):read("l")
assert(os.execute("cp " .. q(root .. "/examples/fashion_mnist/train.lua") .. " " .. q(dir .. "/train.lua")))
local args = "epochs=1 train_samples=2048 run_name=bench_watch"
local FIRST, READY = "^%[rank 0%] config %(", "Fashion%-MNIST mlp on 2 process%(es%)"

local function read_until(p, pattern, what)
  for line in p:lines() do
    if line:find(pattern) then return line end
  end
  error("bench/watch.lua: the output ended before " .. what, 0)
end

local function median(xs)
  local s = { table.unpack(xs) }
  table.sort(s)
  local m = #s // 2
  return #s % 2 == 1 and s[m + 1] or (s[m] + s[m + 1]) / 2
end

local text
do
  local f = assert(io.open(dir .. "/train.lua"))
  text = f:read("a")
  f:close()
end
local function save(k)
  local tmp = dir .. "/.train.lua.swp"
  local f = assert(io.open(tmp, "w"))
  f:write(text, "-- edit ", k, "\n")
  f:close()
  assert(os.rename(tmp, dir .. "/train.lua"))
end

-- $$ is the host's pid once the shell has exec'ed it: the watch is ended by that id
local watch = io.popen(("cd %s && echo $$ >host.pid && exec %s --watch --nproc 2 train.lua %s 2>&1"):format(q(dir),
  q(host), args))
read_until(watch, "run 1 done", "the first run ended")
local warm, cold, warm_ready, cold_ready = {}, {}, {}, {}
for k = 1, reps do
  local t0 = ddp.clock()
  local p = io.popen(("cd %s && exec %s --nproc 2 train.lua %s 2>&1"):format(q(dir), q(host), args))
  read_until(p, FIRST, "the cold run's first output")
  cold[k] = (ddp.clock() - t0) * 1000
  read_until(p, READY, "the cold run's set-up line")
  cold_ready[k] = (ddp.clock() - t0) * 1000
  p:read("a")
  p:close()
  t0 = ddp.clock()
  save(k)
  read_until(watch, FIRST, "the rerun's first output")
  warm[k] = (ddp.clock() - t0) * 1000
  read_until(watch, READY, "the rerun's set-up line")
  warm_ready[k] = (ddp.clock() - t0) * 1000
  read_until(watch, "rerun " .. k .. " done", "rerun " .. k .. " ended")
  print(string.format("rep %d: first output warm %.1f ms, cold %.1f ms; set up warm %.1f ms, cold %.1f ms", k,
    warm[k], cold[k], warm_ready[k], cold_ready[k]))
end
local pid = io.open(dir .. "/host.pid"):read("n")
os.execute("kill -INT " .. math.tointeger(pid))
watch:close()
os.execute("rm -rf " .. q(dir))
print(string.format("watch: warm_ms=%.1f cold_ms=%.1f warm_ready_ms=%.1f cold_ready_ms=%.1f (medians of %d)",
  median(warm), median(cold), median(warm_ready), median(cold_ready), reps))
