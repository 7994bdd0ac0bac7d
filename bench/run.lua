-- The benchmark table: each ddplua benchmark beside its PyTorch peer, run in
-- the same session, several repetitions, medians.
--
--   ./build/bin/ddplua bench/run.lua [reps=5] [only=group,...] [train_reps=1] [cnn_epochs=2] [op_runs=15]
--                                    [mlp_epochs=5] [quick=0]
--   make bench                       (every group; make bench only=train,ops BENCH_QUICK=1)
-- Groups: mlp ddp launch allreduce csv (the throughput rows), train (the
-- Fashion-MNIST MLP and CNN examples start to end), models (the GPT,
-- ResNet and LSTM examples: bench/train_rows.lua), video (the 3-d ResNet's
-- step, also in train_rows.lua), ops (the per-op table) and step (the MLP
-- step against the FMA peak: bench/op_rows.lua).
-- quick=1 (or BENCH_QUICK=1 in the environment) is a short check of every
-- row: 1 repetition, 1 process only for the training rows, 2 MLP epochs,
-- 1 CNN epoch, short GPT/LSTM/ResNet runs, 5 runs per op; its figures are
-- not the ones the goals are about.
--
-- Peers are /usr/bin/python3 scripts from ../shared/peers relative to the
-- repository root (override with DDPLUA_PEERS=dir) and from bench/. They run
-- with OPENBLAS_CORETYPE set to the OpenBLAS kernels this CPU can run
-- (SkylakeX with AVX-512, Haswell with AVX2; DDPLUA_PEER_CORETYPE overrides,
-- an inherited OPENBLAS_CORETYPE is not kept): Debian's OpenBLAS 0.3.21 does not
-- know the newer CPU models and picks its generic Prescott kernels, which
-- would make PyTorch's GEMMs 4x slower than a PyTorch user tuning it gets.
-- They also run with OPENBLAS_NUM_THREADS set to the thread count they ask
-- torch for (ctx.python_for): torch.set_num_threads(1) alone leaves
-- Debian's OpenBLAS-pthread on every core.
-- To add a benchmark, append a function to `benchmarks`: it gets the
-- context below and returns rows {name=, ours=, theirs=, fmt=, ratio=,
-- goal=, pass=} (or {name=, note=} for a row that has nothing to measure).
local ddp = require "ddplua"
local core = ddp.core

local script_dir = (arg and arg[0] or "bench/run.lua"):match("^(.*)/[^/]*$") or "."
local ctx = {
  root = script_dir .. "/..",
  ddplua = arg and arg[-1] or "ddplua", -- the host running this script
  python = "/usr/bin/python3",
  reps = 5,
  train_reps = 1, -- the training rows run whole examples: one alternation of minutes each
  cnn_epochs = 2,
  op_runs = 15,
  mlp_epochs = 5,
  quick = 0,
  only = nil,
}
-- ../shared/peers beside the repository (or beside a worktree's parent)
ctx.peers = os.getenv("DDPLUA_PEERS")
if not ctx.peers then
  for _, dir in ipairs({ ctx.root .. "/../shared/peers", ctx.root .. "/../../shared/peers" }) do
    local f = io.open(dir .. "/torch_ddp_mlp.py")
    if f then
      f:close()
      ctx.peers = ctx.peers or dir
    end
  end
  ctx.peers = ctx.peers or ctx.root .. "/../shared/peers"
end
do
  local f = io.open(ctx.peers .. "/torch_ddp_mlp.py")
  if not f then
    error(string.format("bench: the PyTorch peers are not in %s (set DDPLUA_PEERS to the directory holding "
      .. "torch_ddp_mlp.py)", ctx.peers), 0)
  end
  f:close()
end
for _, a in ipairs(arg or {}) do
  local k, v = a:match("^([%w_]+)=(.+)$")
  if k == "only" then
    ctx.only = {}
    for g in v:gmatch("[^,]+") do ctx.only[g] = true end
  elseif k and ctx[k] ~= nil and type(ctx[k]) == "number" and math.tointeger(tonumber(v)) then
    ctx[k] = math.tointeger(tonumber(v))
  else
    error("usage: ddplua bench/run.lua [reps=N] [only=group,...] [train_reps=N] [cnn_epochs=N] [op_runs=N] " ..
      "[mlp_epochs=N] [quick=0|1], got " .. a, 0)
  end
end
if os.getenv("BENCH_QUICK") == "1" then ctx.quick = 1 end
ctx.nprocs = { 1, 2 } -- the process counts of the training rows
if ctx.quick == 1 then
  -- a short check: every row runs, on less (what was given explicitly stays)
  local given = {}
  for _, a in ipairs(arg or {}) do given[a:match("^([%w_]+)=") or ""] = true end
  for k, v in pairs({ reps = 1, op_runs = 5, mlp_epochs = 2, cnn_epochs = 1 }) do
    if not given[k] then ctx[k] = v end
  end
  ctx.nprocs = { 1 }
end

ctx.cpu = core.cpu_info()
do -- the CPUs Python's os.cpu_count() sees (the peers' thread rule)
  local f = io.popen("getconf _NPROCESSORS_ONLN 2>/dev/null")
  ctx.cores = math.tointeger(tonumber(f and f:read("l") or "")) or 1
  if f then f:close() end
end
-- The peers get the fastest OpenBLAS kernels this CPU runs, whatever OPENBLAS_CORETYPE the shell happens to
-- carry: an inherited Haswell on an AVX-512 machine halves PyTorch's GEMMs (matmul 1024^3 on one Zen 5 core:
-- 97 GFLOP/s with Haswell, 171 with SkylakeX), which would flatter every ratio. DDPLUA_PEER_CORETYPE chooses.
local coretype = os.getenv("DDPLUA_PEER_CORETYPE")
if not coretype then
  if ctx.cpu:find("avx512f") and ctx.cpu:find("avx512bw") then coretype = "SkylakeX"
  elseif ctx.cpu:find("avx2") then coretype = "Haswell"
  else coretype = os.getenv("OPENBLAS_CORETYPE") end
end
local inherited = os.getenv("OPENBLAS_CORETYPE")
if inherited and coretype and inherited ~= coretype then
  io.stderr:write(string.format("bench: the peers run with OPENBLAS_CORETYPE=%s, not the inherited %s "
    .. "(DDPLUA_PEER_CORETYPE=%s keeps it)\n", coretype, inherited, inherited))
end
local python = ctx.python
--- The command that runs a peer whose ranks compute on `threads` threads
--- each: Debian's torch does its float32 GEMMs in OpenBLAS-pthread, which
--- torch.set_num_threads does not reach, so a peer asking for 1 thread
--- would still run every GEMM on all cores without OPENBLAS_NUM_THREADS.
function ctx.python_for(threads)
  return string.format("env %sOPENBLAS_NUM_THREADS=%d %s", coretype and ("OPENBLAS_CORETYPE=" .. coretype .. " ") or "",
    threads, python)
end
ctx.python = ctx.python_for(1) -- the peers of ../shared/peers call torch.set_num_threads(1)
ctx.peer_coretype = coretype or "OpenBLAS's own choice"

--- The FP32 FMA peak in GFLOP/s of `threads` threads, measured now.
function ctx.fma_peak(threads)
  local prev = ddp.get_num_threads()
  ddp.set_num_threads(math.max(prev, threads))
  local gflops = core._fma_peak(threads, 1.0)
  ddp.set_num_threads(prev)
  return gflops
end

--- The prefix that runs a command on cpu 0 ("taskset -c 0 "), or "" where taskset cannot. The one-thread rows run
--- both sides there: on this project's 2-vCPU VM the two vCPUs differ for memory-bound work (2026-12-07: a mul of
--- [1024, 1024] in a C loop 0.119 ms on cpu 0 against 0.160 on cpu 1 in every run, the MLP step 14000-14850 against
--- 12000-12200 samples/s, the FMA peak alike), and an unpinned process lands on either, so a row compared two draws.
local pin1 = nil
function ctx.pin1()
  if pin1 == nil then pin1 = os.execute("taskset -c 0 true >/dev/null 2>&1") and "taskset -c 0 " or "" end
  return pin1
end

--- Runs a shell command; returns its whole output (stdout and stderr) or
--- raises naming the command. A run that failed because its fixed
--- rendezvous port was taken (the peers hard-code theirs, and on a shared
--- machine another run of the same peer may hold it) runs again in a
--- network namespace of its own (unshare -rn, loopback up), where the port
--- is free; where that is not allowed, again after a pause, up to 5 times.
local function run_once(cmd)
  local p = assert(io.popen(cmd .. " 2>&1"))
  local out = p:read("a")
  local ok, _, code = p:close()
  return ok, out, code
end
local own_netns = nil -- whether unshare -rn works here (tried once)
function ctx.run(cmd)
  local ok, out, code = run_once(cmd)
  for _ = 1, 5 do
    if ok or not out:find("Address already in use", 1, true) or cmd:find("'", 1, true) then break end
    if own_netns == nil then own_netns = run_once("unshare -rn sh -c 'ip link set lo up'") end
    if own_netns then
      ok, out, code = run_once("unshare -rn sh -c 'ip link set lo up && exec " .. cmd .. "'")
    else
      os.execute("sleep 20")
      ok, out, code = run_once(cmd)
    end
  end
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
function ctx.repeat_n(reps, ...)
  local fns, all = { ... }, {}
  for i = 1, #fns do all[i] = {} end
  for _ = 1, reps do
    for i, fn in ipairs(fns) do
      for k, v in pairs(fn()) do
        all[i][k] = all[i][k] or {}
        table.insert(all[i][k], v)
      end
    end
  end
  return table.unpack(all)
end
function ctx.repeat_runs(...) return ctx.repeat_n(ctx.reps, ...) end

local benchmarks, group_of = {}, {} -- group_of[i]: the group of benchmarks[i] (only=)

-- Single-process MLP training: speed, peak memory, memory growth.
group_of[#benchmarks + 1] = "mlp"
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

-- 2-rank DDP MLP: against PyTorch's 2-rank DDP (gloo), and the same script
-- at 1 rank, as PyTorch's own 2/1 figure is taken; beside it the first row's
-- workload without DDP at all.
group_of[#benchmarks + 1] = "ddp"
benchmarks[#benchmarks + 1] = function(c)
  local ours2 = string.format("%s --nproc 2 %s/bench/ddp_mlp.lua steps=200 batch=64", c.ddplua, c.root)
  local ours1 = string.format("%s --nproc 1 %s/bench/ddp_mlp.lua steps=200 batch=64", c.ddplua, c.root)
  local plain1 = string.format("%s %s/bench/mlp.lua steps=200", c.ddplua, c.root)
  local peer2 = string.format("%s %s/torch_ddp_mlp.py 2 200 64", c.python, c.peers)
  local peer1 = string.format("%s %s/torch_ddp_mlp.py 1 200 64", c.python, c.peers)
  -- the machine's own ceiling: two independent single processes side by
  -- side (no communication at all), summed, over a single one run next
  local pair = string.format("(%s & %s; wait)", plain1, plain1)
  local o2, o1, t2, t1, op, p1 = c.repeat_runs(
    function() return { sps = c.field(c.run(ours2), "samples/s", ours2) } end,
    function() return { sps = c.field(c.run(ours1), "samples/s", ours1) } end,
    function() return { sps = c.field(c.run(peer2), "samples/s", peer2) } end,
    function() return { sps = c.field(c.run(peer1), "samples/s", peer1) } end,
    function()
      local text, sum = c.run(pair), 0
      for v in text:gmatch("samples/s=([%d.]+)") do sum = sum + tonumber(v) end
      return { sps = sum }
    end,
    function() return { sps = c.field(c.run(plain1), "samples/s", plain1) } end)
  local a2, a1, b2, b1 = c.median(o2.sps), c.median(o1.sps), c.median(t2.sps), c.median(t1.sps)
  local plain = c.median(p1.sps)
  -- ratios are taken within each repetition, between runs seconds apart,
  -- then their median: this VM's speed drifts over minutes, and a ratio of
  -- medians would pair a 2-process run with a 1-process run from another phase
  local function paired(num, den)
    local r = {}
    for i = 1, #num do r[i] = num[i] / den[i] end
    return c.median(r)
  end
  local ours_ratio, peer_ratio = paired(o2.sps, o1.sps), paired(t2.sps, t1.sps)
  local ceiling = paired(op.sps, p1.sps)
  return {
    { name = "MLP DDP 2 processes, samples/s", ours = a2, theirs = b2, fmt = "%.0f", ratio = a2 / b2,
      goal = ">= 2.00x", pass = a2 / b2 >= 2.0 },
    { name = "MLP 2 processes / 1 process", ours = ours_ratio, theirs = peer_ratio, fmt = "%.2f", ratio = nil,
      goal = ">= 1.60", pass = ours_ratio >= 1.6 },
    { name = "MLP DDP 1 process, samples/s", ours = a1, theirs = b1, fmt = "%.0f", ratio = a1 / b1,
      goal = "(info)", pass = true },
    { name = "  without DDP (bench/mlp.lua)", ours = plain, fmt = "%.0f", goal = "(info)", pass = true },
    { name = "  2 independent processes / 1", ours = ceiling, fmt = "%.2f", goal = "(ceiling)", pass = true },
  }
end

-- Launch latency: `ddplua --nproc 2 examples/hello.lua` (init, one
-- all_reduce, destroy) against PyTorch's mp.spawn + gloo hello.
group_of[#benchmarks + 1] = "launch"
benchmarks[#benchmarks + 1] = function(c)
  local launch = dofile(c.root .. "/bench/launch.lua")
  local rows, peer = launch.measure(20, c.reps)
  local hello, first, idle
  for _, r in ipairs(rows) do
    if r.name:find("hello") then hello = r.seconds end
    if r.first_step then first = r.seconds end
    if r.first_step_idle then idle = r.seconds end
  end
  if not hello or not peer then error("bench: launch measurement incomplete", 0) end
  return {
    { name = "launch --nproc 2 hello.lua, ms", ours = hello * 1000, theirs = peer * 1000, fmt = "%.1f",
      ratio = hello / peer, goal = "<= 0.02x", pass = hello / peer <= 0.02 },
    { name = "  first step --nproc 2 (data, DDP), ms", ours = first * 1000, fmt = "%.1f", goal = "(info)",
      pass = true },
    { name = "  the same after 6 s idle, ms", ours = idle * 1000, fmt = "%.1f", goal = "(info)", pass = true },
  }
end

-- all_reduce between 2 ranks: algbw against gloo at 16 MiB and 100 MiB, and
-- busbw as a fraction of this machine's memcpy bandwidth.
group_of[#benchmarks + 1] = "allreduce"
benchmarks[#benchmarks + 1] = function(c)
  local cases = { { floats = 4194304, iters = 20, label = "16 MiB" }, { floats = 26214400, iters = 5, label = "100 MiB" } }
  local out = {}
  for _, case in ipairs(cases) do
    local ours_cmd = string.format("%s %s/examples/allreduce_bench.lua nproc=2 sizes=%d iters=%d shared=0", c.ddplua,
      c.root, case.floats * 4, case.iters * 3)
    local peer_cmd = string.format("%s %s/torch_allreduce.py 2 %d %d", c.python, c.peers, case.floats, case.iters)
    local ours, theirs = c.repeat_runs(function()
      local text = c.run(ours_cmd)
      local row = text:match("\n%s*" .. case.floats * 4 .. "%s+[^\n]*")
      local memcpy = tonumber(text:match("memcpy ([%d.]+) GB/s"))
      if not row or not memcpy then error("bench: allreduce_bench printed no result:\n" .. text, 0) end
      local v = {}
      for x in row:gmatch("[%d.]+") do v[#v + 1] = tonumber(x) end
      return { algbw = v[5], bus = v[6] / memcpy }
    end, function()
      return { algbw = c.field(c.run(peer_cmd), "algbw", peer_cmd) }
    end)
    local a, g = c.median(ours.algbw), c.median(theirs.algbw)
    out[#out + 1] = { name = "all_reduce 2 ranks " .. case.label .. ", GB/s", ours = a, theirs = g, fmt = "%.2f",
      ratio = a / g, goal = ">= 5.00x", pass = a / g >= 5 }
    out[#out + 1] = { name = "  busbw / memcpy bandwidth", ours = c.median(ours.bus), fmt = "%.2f", goal = "(info)",
      pass = true }
    -- DDP's gradient buckets live in the group's shared pool (alloc_shared): the peers' copies reduce in place
    local shared_cmd = ours_cmd:gsub("shared=0", "shared=1")
    local shared = c.repeat_runs(function()
      local row = c.run(shared_cmd):match("\n%s*" .. case.floats * 4 .. "%s+[^\n]*")
      if not row then error("bench: allreduce_bench shared=1 printed no result", 0) end
      local v = {}
      for x in row:gmatch("[%d.]+") do v[#v + 1] = tonumber(x) end
      return { algbw = v[5] }
    end)
    local sa = c.median(shared.algbw)
    out[#out + 1] = { name = "  in the shared pool (DDP's), GB/s", ours = sa, theirs = g, ratio = sa / g,
      fmt = "%.2f", goal = "(info)", pass = true }
  end
  return out
end

-- CSVImageDataset: images/s of a loop that loads 3x96x96 batches while a
-- stand-in training step computes, with 2 C workers decoding in the
-- background against none (decoding on the training thread); no peer.
group_of[#benchmarks + 1] = "csv"
benchmarks[#benchmarks + 1] = function(c)
  local cmd = string.format("%s %s/bench/csv_images.lua n=2000 epochs=2 dir=%s", c.ddplua, c.root,
    os.getenv("DDPLUA_BENCH_CSV") or "runs/bench_csv")
  local runs = c.repeat_runs(function()
    local text = c.run(cmd)
    local block = text:match("3x96x96.-\n(.*)$")
    local function col(workers)
      local line = block and block:match("\n" .. workers .. "%s+[^\n]*")
      local v = {}
      for x in (line or ""):gmatch("[%d.]+") do v[#v + 1] = tonumber(x) end
      if not v[4] then error("bench: csv_images printed no row for " .. workers .. " workers:\n" .. text, 0) end
      return v[4] -- prefetch + step
    end
    return { pool = col(2), none = col(0) }
  end)
  local pool, none = c.median(runs.pool), c.median(runs.none)
  return {
    { name = string.format("CSV images/s, 2 workers (0: %.0f)", none), ours = pool, fmt = "%.0f",
      ratio = pool / none, goal = "(info)", pass = true },
  }
end

-- `ddplua --watch` (bench/watch.lua): from saving the Fashion-MNIST example to the rerun's line after its
-- set-up (data kept with ddp.keep, model, DDP, optimizer), beside a cold start's time to the same line; no peer.
group_of[#benchmarks + 1] = "watch"
benchmarks[#benchmarks + 1] = function(c)
  local cmd = string.format("%s %s/bench/watch.lua reps=%d", c.ddplua, c.root, math.max(c.reps, 5))
  local out = c.run(cmd)
  local warm, cold = c.field(out, "warm_ready_ms", cmd), c.field(out, "cold_ready_ms", cmd)
  local first, cold_first = c.field(out, "warm_ms", cmd), c.field(out, "cold_ms", cmd)
  return {
    { name = "--watch rerun: edit to set-up, ms", ours = warm, fmt = "%.1f", goal = "< 100", pass = warm < 100 },
    { name = "  cold start to the same line, ms", ours = cold, fmt = "%.1f", ratio = warm / cold, goal = "(info)",
      pass = true },
    { name = string.format("  to the first line (cold %.1f), ms", cold_first), ours = first, fmt = "%.1f",
      goal = "(info)", pass = true },
  }
end

-- the examples start to end, the per-op table, the MLP step against the peak
for _, file in ipairs({ "train_rows.lua", "op_rows.lua" }) do
  for _, fn in ipairs(dofile(script_dir .. "/" .. file)) do
    group_of[#benchmarks + 1] = fn.group
    benchmarks[#benchmarks + 1] = fn.run
  end
end

-- the machine, printed first: what every figure below depends on
local threads = ddp.get_num_threads()
print("CPU: " .. ctx.cpu)
print(string.format("threads: %d by default (cores / ranks on the node); oneDNN: %s; float32 GEMM: %s",
  threads, core.onednn_info(), ddp.gemm_impl()))
local peak1, peak_all = ctx.fma_peak(1), ctx.fma_peak(threads)
print(string.format("FP32 FMA peak (measured): %.0f GFLOP/s on 1 thread, %.0f on %d; memcpy %.1f GB/s (read + " ..
  "written, 1 thread, 256 MiB)", peak1, peak_all, threads, core._memcpy_gbs(256 << 20, 5)))
print(string.format("PyTorch peers: %s, OPENBLAS_CORETYPE=%s, OPENBLAS_NUM_THREADS = the threads each asks torch for",
  python, ctx.peer_coretype))
if ctx.quick == 1 then print("BENCH_QUICK: a short check (1 repetition, 1 process, short runs), not the goals' figures") end
print("")
local t_start = ddp.clock()

local rows = {}
for i, b in ipairs(benchmarks) do
  if not ctx.only or ctx.only[group_of[i] or "other"] then
    -- progress on stderr: the table comes at the end of a run of minutes
    io.stderr:write(string.format("[bench %4.0f s] %s ...\n", ddp.clock() - t_start, group_of[i] or "other"))
    for _, r in ipairs(b(ctx)) do rows[#rows + 1] = r end
  end
end

local function cell(fmt, v) return v == nil and "-" or string.format(fmt, v) end
local row_fmt = "%-40s %12s %12s %8s %10s  %s"
local header = string.format(row_fmt, "benchmark", "ddplua", "PyTorch", "ratio", "goal", "result")
print(string.format("ddplua benchmarks (%d repetitions, medians; training rows %d; %s)", ctx.reps, ctx.train_reps,
  ddp.blas_info()))
print(header)
print(string.rep("-", #header))
local failed, goals, missing = 0, 0, 0
for _, r in ipairs(rows) do
  if r.note then
    print(string.format("%-40s %s", r.name, r.note))
    missing = missing + 1
  else
    local info = r.goal:sub(1, 1) == "(" -- "(info)": a figure beside the goals, nothing to meet
    local result = info and "" or r.pass and "pass" or "FAIL"
    if r.note_result then result = result .. " (" .. r.note_result .. ")" end
    print(string.format(row_fmt, r.name, cell(r.fmt, r.ours), cell(r.fmt, r.theirs), cell("%.2fx", r.ratio),
      r.goal, result))
    if not info then
      goals = goals + 1
      if not r.pass then failed = failed + 1 end
    end
  end
end
print(string.format("%d of %d goals met%s; the whole run took %.0f s", goals - failed, goals,
  missing > 0 and string.format("; %d row(s) not yet available", missing) or "", ddp.clock() - t_start))
