-- The benchmark table: each ddplua benchmark beside its PyTorch peer, run in
-- the same session, several repetitions, medians.
--
--   ./build/bin/ddplua bench/run.lua [reps=3]        (make bench)
--
-- Peers are /usr/bin/python3 scripts from ../shared/peers relative to the
-- repository root (override with DDPLUA_PEERS=dir). To add a benchmark,
-- append a function to `benchmarks`: it gets the context below and returns
-- rows {name=, ours=, theirs=, unit=, ratio=, goal=, pass=}.
local ddp = require "ddplua"

local script_dir = (arg and arg[0] or "bench/run.lua"):match("^(.*)/[^/]*$") or "."
local ctx = {
  root = script_dir .. "/..",
  ddplua = arg and arg[-1] or "ddplua", -- the host running this script
  python = "/usr/bin/python3",
  reps = 3,
}
ctx.peers = os.getenv("DDPLUA_PEERS") or ctx.root .. "/../shared/peers"
do
  local f = io.open(ctx.peers .. "/torch_ddp_mlp.py")
  if not f then
    error(string.format("bench: the PyTorch peers are not in %s (set DDPLUA_PEERS to the directory holding "
      .. "torch_ddp_mlp.py)", ctx.peers), 0)
  end
  f:close()
end
for _, a in ipairs(arg or {}) do
  local v = a:match("^reps=(%d+)$")
  if not v then error("usage: ddplua bench/run.lua [reps=N], got " .. a, 0) end
  ctx.reps = math.tointeger(tonumber(v))
end

--- Runs a shell command; returns its whole output (stdout and stderr) or
--- raises naming the command.
function ctx.run(cmd)
  local p = assert(io.popen(cmd .. " 2>&1"))
  local out = p:read("a")
  local ok, _, code = p:close()
  if not ok then error(string.format("bench: `%s` failed (exit %s):\n%s", cmd, tostring(code), out), 0) end
  return out
end

--- The number after `key` (key=123 or "key: 123") in text, or an error.
function ctx.field(text, key, cmd)
  local v = text:match(key:gsub("%p", "%%%0") .. "%s*[=:]%s*([%d.]+)")
  if not v then error(string.format("bench: no %s in the output of `%s`:\n%s", key, cmd, text), 0) end
  return tonumber(v)
end

function ctx.median(xs)
  local s = { table.unpack(xs) }
  table.sort(s)
  local m = #s // 2
  if #s % 2 == 1 then return s[m + 1] end
  return (s[m] + s[m + 1]) / 2
end

--- Runs each of the functions once per repetition, alternating them so that
--- both sides see the same machine load; returns for each function, for
--- each key of its result table, the list of values.
function ctx.repeat_runs(...)
  local fns, all = { ... }, {}
  for i = 1, #fns do all[i] = {} end
  for _ = 1, ctx.reps do
    for i, fn in ipairs(fns) do
      for k, v in pairs(fn()) do
        all[i][k] = all[i][k] or {}
        table.insert(all[i][k], v)
      end
    end
  end
  return table.unpack(all)
end

local benchmarks = {}

-- Single-process MLP training: speed, peak memory, memory growth.
benchmarks[#benchmarks + 1] = function(c)
  local ours_cmd = string.format("%s %s/bench/mlp.lua steps=2000", c.ddplua, c.root)
  local peer_cmd = string.format("/usr/bin/time -v %s %s/torch_ddp_mlp.py 1 200 64", c.python, c.peers)
  local ours, theirs = c.repeat_runs(function()
    local out = c.run(ours_cmd)
    return {
      sps = c.field(out, "samples/s", ours_cmd),
      peak = c.field(out, "peak_rss_kib", ours_cmd),
      growth = (c.field(out, "rss_2000_kib", ours_cmd) - c.field(out, "rss_100_kib", ours_cmd)) /
          c.field(out, "rss_100_kib", ours_cmd),
    }
  end, function()
    local out = c.run(peer_cmd)
    -- GNU time reports the largest process of the run (the training worker mp.spawn starts)
    return { sps = c.field(out, "samples/s", peer_cmd), peak = c.field(out, "Maximum resident set size (kbytes)",
      peer_cmd) }
  end)
  local sps, tsps = c.median(ours.sps), c.median(theirs.sps)
  local peak, tpeak = c.median(ours.peak) / 1024, c.median(theirs.peak) / 1024
  local growth = c.median(ours.growth)
  return {
    { name = "MLP 1 process, samples/s", ours = sps, theirs = tsps, fmt = "%.0f", ratio = sps / tsps,
      goal = ">= 1.20x", pass = sps / tsps >= 1.2 },
    { name = "MLP 1 process, peak RSS MiB", ours = peak, theirs = tpeak, fmt = "%.1f", ratio = peak / tpeak,
      goal = "<= 0.25x", pass = peak / tpeak <= 0.25 },
    { name = "MLP RSS growth 100->2000 steps", ours = 100 * growth, fmt = "%.2f%%", goal = "<= 10%",
      pass = growth <= 0.10 },
  }
end

local rows = {}
for _, b in ipairs(benchmarks) do
  for _, r in ipairs(b(ctx)) do rows[#rows + 1] = r end
end

local function cell(fmt, v) return v == nil and "-" or string.format(fmt, v) end
local row_fmt = "%-34s %12s %12s %8s %10s  %s"
local header = string.format(row_fmt, "benchmark", "ddplua", "PyTorch", "ratio", "goal", "result")
print(string.format("ddplua benchmarks (%d repetitions, medians; %s)", ctx.reps, ddp.blas_info()))
print(header)
print(string.rep("-", #header))
local failed = 0
for _, r in ipairs(rows) do
  print(string.format(row_fmt, r.name, cell(r.fmt, r.ours), cell(r.fmt, r.theirs),
    cell("%.2fx", r.ratio), r.goal, r.pass and "pass" or "FAIL"))
  if not r.pass then failed = failed + 1 end
end
print(string.format("%d of %d goals met", #rows - failed, #rows))
