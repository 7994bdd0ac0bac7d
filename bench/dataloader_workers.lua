-- DataLoader worker processes: an epoch over a Lua dataset whose get(i)
-- takes 5 ms, with num_workers = 0 (every item read in the training loop)
-- against num_workers = 2, measured in the same run, alternating.
--
--   ddplua bench/dataloader_workers.lua [n=256] [batch=16] [get_ms=5] [step_ms=20] [reps=3]
--
-- Two datasets: "sleep" waits get_ms (an item read from disk or the
-- network: the worker is idle meanwhile) and "busy" computes for get_ms (a
-- slow Python-style decode: the worker needs a core). Two loops: "load"
-- only iterates; "load + step" runs a stand-in training step of step_ms
-- (a busy loop) per batch, so workers fill the queue while the step runs.
-- The ideal for the step loop is max(load, step) per batch instead of
-- load + step. Reported: seconds per epoch (median of reps) and the speedup.
local ddp = require "ddplua"
local data, core = ddp.data, ddp.core

local opt = { n = 256, batch = 16, get_ms = 5, step_ms = 20, reps = 3 }
for _, a in ipairs(arg or {}) do
  local k, v = a:match("^([%w_]+)=(.*)$")
  if not k or opt[k] == nil then error("dataloader_workers: unexpected argument '" .. a .. "'", 0) end
  opt[k] = assert(tonumber(v), k .. " must be a number")
end

local function busy(ms)
  local t = ddp.clock() + ms / 1000
  while ddp.clock() < t do end
end
local function sleep(ms) core._worker_poll({}, ms / 1000) end -- poll on no socket: a sleep

local function dataset(wait)
  return setmetatable({ n = opt.n, get = function(_, i)
    wait(opt.get_ms)
    return ddp.full({ 32 }, i), i
  end }, { __len = function(s) return s.n end })
end

local function epoch(loader, step)
  local t0, seen = ddp.clock(), 0
  for x in loader:iter() do
    seen = seen + x:size(1)
    if step then busy(opt.step_ms) end
  end
  assert(seen == opt.n, "the epoch saw " .. seen .. " items")
  return ddp.clock() - t0
end

local function median(xs)
  table.sort(xs)
  return xs[(#xs + 1) // 2]
end

print(string.format("DataLoader, %d items of a %g ms get, batch %d, %d cores; seconds per epoch (median of %d)",
  opt.n, opt.get_ms, opt.batch, tonumber(io.popen("nproc"):read("l")) or 0, opt.reps))
print(string.format("%-6s %-18s %12s %12s %9s", "get", "loop", "workers=0", "workers=2", "speedup"))
for _, kind in ipairs { "sleep", "busy" } do
  local ds = dataset(kind == "sleep" and sleep or busy)
  for _, step in ipairs { false, true } do
    local t = { [0] = {}, [2] = {} }
    for _ = 1, opt.reps do
      for _, nw in ipairs { 0, 2 } do
        local loader = data.DataLoader(ds, { batch_size = opt.batch, num_workers = nw })
        t[nw][#t[nw] + 1] = epoch(loader, step)
      end
    end
    local a, b = median(t[0]), median(t[2])
    print(string.format("%-6s %-18s %12.3f %12.3f %8.2fx", kind, step and ("load + " .. opt.step_ms .. " ms step")
      or "load", a, b, a / b))
  end
end
