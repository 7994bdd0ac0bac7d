-- GPU benchmarks, each beside the figure of a reference that does not go
-- through ddplua, measured in the same run on the same GPU:
-- build/bin/ddplua_gpu_raw (cuBLAS, cudaMemcpy and NCCL called directly on
-- the same shapes, the GEMM on random operands with its result checked)
-- and PyTorch (bench/gpu_torch.py: the same GEMMs and the same MLP step):
--   GEMM TFLOP/s (float32, TF32, bfloat16, float16) vs cuBLAS's own and torch.matmul,
--   training samples/s of an MLP on one GPU (float32 and bfloat16 autocast) vs PyTorch,
--   device memory across training steps (must stay flat),
--   NCCL all_reduce bandwidth at world size 1 vs raw NCCL,
--   host-to-device copy bandwidth: t:to("cuda") vs raw pinned and pageable.
-- Run: ddplua bench/gpu.lua [quick=true]; with $OUT set the summary is also
-- written to $OUT/gpu_bench.txt. DDPLUA_TORCH_PYTHON names the Python with
-- PyTorch (default python3; "none" skips the PyTorch figures). A reference
-- whose check fails (ddplua_gpu_raw's GEMM error) fails the run.
local ddp = require "ddplua"

-- key=value options through ddp.config (under the launcher), else from arg
local defaults = { quick = false, port = 29571 }
local cfg = ddp.config and ddp.config(defaults) or defaults
if not ddp.config then
  for _, a in ipairs(arg or {}) do
    local k, v = a:match("^([%w_]+)=(.*)$")
    if k then cfg[k] = (v == "true") or (v ~= "false" and (tonumber(v) or v)) end
  end
end

local available, reason = ddp.cuda_is_available()
if not available then
  print("bench/gpu.lua: no GPU, nothing to measure: " .. tostring(reason))
  if os.getenv("DDPLUA_REQUIRE_GPU") == "1" then os.exit(1) end
  return
end
local dev = ddp.device()
local lines = {}
local function report(fmt, ...)
  local s = string.format(fmt, ...)
  print(s)
  lines[#lines + 1] = s
end
report("device: %s (%s)", ddp.cuda_device_name(tonumber(dev:match("%d+"))), dev)

-- a section that fails (a module missing, an error) is reported and skipped
local failed = 0
local function section(name, fn)
  local ok, err = pcall(fn)
  if not ok then
    report("%s: failed: %s", name, tostring(err))
    failed = failed + 1
  end
end

-- key=value pairs as both references print them: keys and values hold
-- underscores (max_rel_err=, variant=f32_host; without them in the pattern
-- the first GPU run read "err=" and took f32_host's figure for f32's)
local KV = "([%w_]+)=([%w_%.%-%+:]+)"

-- the raw reference program, next to the ddplua binary
local raw = os.getenv("DDPLUA_GPU_RAW") or ((os.getenv("DDPLUA_BIN") or "./build/bin/ddplua") .. "_gpu_raw")
local function raw_run(args)
  local p = io.popen(raw .. " " .. args .. " 2>&1")
  local out = p and p:read("a") or ""
  if p then p:close() end
  local kv = {}
  for k, v in out:gmatch(KV) do kv[k] = tonumber(v) or v end
  if not kv.mode then kv.error = out end
  return kv
end

-- PyTorch on the same GPU: every job in one process (importing torch takes
-- seconds), run before ddplua's own figures; bench/gpu_torch.py prints a
-- key=value line per job, found again by the job's key
local torch_py = os.getenv("DDPLUA_TORCH_PYTHON") or "python3"
local torch_results = {}
local function torch_jobs(jobs)
  if torch_py == "none" then return end
  local quoted = {}
  for i, j in ipairs(jobs) do quoted[i] = "'" .. j .. "'" end
  local p = io.popen(torch_py .. " bench/gpu_torch.py jobs " .. table.concat(quoted, " ") .. " 2>&1")
  local out = p and p:read("a") or ""
  if p then p:close() end
  for line in out:gmatch("[^\n]+") do
    local kv = {}
    for k, v in line:gmatch(KV) do kv[k] = tonumber(v) or v end
    if kv.mode == "gemm" and kv.dtype then
      torch_results[string.format("gemm %d %d %d %s", kv.m or 0, kv.n or 0, kv.k or 0, kv.dtype)] = kv
    elseif kv.mode == "mlp" and kv.variant then
      torch_results["mlp " .. kv.variant] = kv
    end
  end
  torch_results.output = out:gsub("%s+$", ""):sub(-300)
end
local function torch_run(key)
  if torch_py == "none" then return { error = "DDPLUA_TORCH_PYTHON=none" } end
  return torch_results[key] or { error = "no result (" .. tostring(torch_results.output) .. ")" }
end

local function timeit(iters, fn)
  fn()
  ddp.synchronize()
  local t0 = ddp.clock()
  for _ = 1, iters do fn() end
  ddp.synchronize()
  return (ddp.clock() - t0) / iters
end

local GEMM_SHAPES = cfg.quick and { { 2048, 2048, 2048 } } or { { 4096, 4096, 4096 }, { 8192, 1024, 4096 } }
local GEMM_KINDS = { "float32", "tf32", "bfloat16", "float16" }
local function gemm_iters(kind) return kind == "float32" and 10 or 30 end
local MLP_STEPS = cfg.quick and 100 or 400
local MLP_VARIANTS = { { nil, false, "float32, batch on the GPU", "f32" },
                       { nil, true, "float32, batch copied per step", "f32_host" },
                       { "bfloat16", false, "bfloat16 autocast", "bf16" } }
section("pytorch", function()
  local jobs = {}
  for _, sh in ipairs(GEMM_SHAPES) do
    for _, kind in ipairs(GEMM_KINDS) do
      jobs[#jobs + 1] = string.format("gemm %d %d %d %s %d", sh[1], sh[2], sh[3], kind, gemm_iters(kind))
    end
  end
  for _, v in ipairs(MLP_VARIANTS) do jobs[#jobs + 1] = string.format("mlp %s %d", v[4], MLP_STEPS) end
  torch_jobs(jobs)
end)

-- GEMM ----------------------------------------------------------------------
section("gemm", function()
  local shapes = GEMM_SHAPES
  for _, sh in ipairs(shapes) do
    local m, n, k = sh[1], sh[2], sh[3]
    for _, kind in ipairs(GEMM_KINDS) do
      local dt = kind == "tf32" and "float32" or kind
      ddp.set_float32_matmul_precision(kind == "tf32" and "high" or "highest")
      local a = ddp.randn(m, k, { device = dev }):to(dt)
      local b = ddp.randn(k, n, { device = dev }):to(dt)
      local iters = gemm_iters(kind)
      local s = ddp.no_grad(function() return timeit(iters, function() return a:matmul(b) end) end)
      local tf = 2 * m * n * k / s / 1e12
      local r = raw_run(string.format("gemm %d %d %d %s %d", m, n, k, kind, iters))
      local t = torch_run(string.format("gemm %d %d %d %s", m, n, k, kind))
      local torch_txt = t.tflops and string.format("torch.matmul %7.1f", t.tflops) or ("torch: " .. tostring(t.error))
      if r.tflops and r.check == "ok" then
        report("gemm %-8s %5dx%5dx%5d: ddplua %7.1f TFLOP/s, cuBLAS direct %7.1f (ratio %.2f, its error %.1e), %s",
               kind, m, n, k, tf, r.tflops, tf / r.tflops, r.max_rel_err, torch_txt)
      else
        report("gemm %-8s %5dx%5dx%5d: ddplua %7.1f TFLOP/s (cuBLAS reference failed: %s), %s", kind, m, n, k, tf,
               r.tflops and ("check " .. tostring(r.check) .. ", error " .. tostring(r.max_rel_err))
                 or tostring(r.error), torch_txt)
        failed = failed + 1
      end
    end
  end
  ddp.set_float32_matmul_precision("highest")
end)

-- MLP training throughput ------------------------------------------------------
section("mlp training", function()
  local nn, optim = ddp.nn, ddp.optim
  local function train_rate(autocast_dtype, host_batches)
    ddp.manual_seed(0)
    local model = nn.Sequential { nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                                  nn.Linear(1024, 10) }
    model = model:to(dev) or model
    local opt = optim.SGD(model:parameters(), { lr = 0.01, momentum = 0.9 })
    local loss_fn = nn.CrossEntropyLoss()
    local B = 256
    local xh, yh = ddp.randn(B, 784), (ddp.rand(B) * 10):long() + 1
    local xd, yd = xh:to(dev), yh:to(dev)
    local function step()
      local x, y = xd, yd
      if host_batches then x, y = xh:to(dev), yh:to(dev) end -- the data loader's copy, every step
      opt:zero_grad()
      local loss
      if autocast_dtype then
        local _ <close> = ddp.autocast(autocast_dtype)
        loss = loss_fn(model(x), y)
      else
        loss = loss_fn(model(x), y)
      end
      loss:backward()
      opt:step()
    end
    for _ = 1, 10 do step() end
    ddp.synchronize()
    local live10 = ddp.cuda_memory_stats().live_bytes
    local steps = MLP_STEPS -- PyTorch's count too
    local t0 = ddp.clock()
    for _ = 1, steps do step() end
    ddp.synchronize()
    local s = ddp.clock() - t0
    collectgarbage()
    local live = ddp.cuda_memory_stats().live_bytes
    return B * steps / s, live10, live
  end
  for _, v in ipairs(MLP_VARIANTS) do
    local rate, l10, l = train_rate(v[1], v[2])
    local t = torch_run("mlp " .. v[4])
    local torch_txt = t.samples_per_s and string.format("PyTorch %s %9.0f samples/s (ratio %.2f)", t.torch or "?",
                                                        t.samples_per_s, rate / t.samples_per_s)
                      or ("PyTorch: " .. tostring(t.error))
    report("MLP 784-1024-1024-10 SGD, batch 256, %-30s ddplua %9.0f samples/s, %s; device memory after 10 steps "
           .. "%.1f MiB, at the end %.1f MiB", v[3] .. ":", rate, torch_txt, l10 / 2 ^ 20, l / 2 ^ 20)
  end
end)

-- NCCL all_reduce at world size 1 ----------------------------------------------
section("nccl all_reduce", function()
  local dist = ddp.distributed
  local ok, err = pcall(dist.init_process_group, { backend = "nccl", init_method = "tcp://127.0.0.1:" .. cfg.port,
                                                     world_size = 1, rank = 0 })
  if ok then
    for _, mib in ipairs(cfg.quick and { 64 } or { 16, 256 }) do
      local t = ddp.zeros(mib * 2 ^ 18, { device = dev }) -- float32
      local s = timeit(20, function() dist.all_reduce(t, "sum") end)
      local r = raw_run(string.format("allreduce %d 20", mib * 2 ^ 20))
      report("nccl all_reduce %4d MiB, world 1: ddplua %7.1f GB/s, NCCL direct %s GB/s", mib, mib * 2 ^ 20 / s / 1e9,
             r.algbw_gbs and string.format("%7.1f", r.algbw_gbs) or ("failed: " .. tostring(r.error)))
    end
    dist.destroy_process_group()
  else
    report("nccl all_reduce: could not start a world-1 group: %s", tostring(err))
  end
end)

-- host <-> device copies -----------------------------------------------------
section("copies", function()
  for _, mib in ipairs({ 4, 64 }) do
    local h = ddp.randn(mib * 2 ^ 18)
    local s_in = timeit(10, function() return h:to(dev) end)
    local g = h:to(dev)
    local s_out = timeit(10, function() return g:to("cpu") end)
    local r = raw_run(string.format("h2d %d 10", mib * 2 ^ 20))
    report("copy %3d MiB: t:to(\"cuda\") %6.1f GB/s, t:to(\"cpu\") %6.1f GB/s; cudaMemcpy direct: pinned %s GB/s, "
           .. "pageable %s GB/s", mib, mib * 2 ^ 20 / s_in / 1e9, mib * 2 ^ 20 / s_out / 1e9,
           tostring(r.pinned_gbs), tostring(r.pageable_gbs))
  end
end)

local out = os.getenv("OUT")
if out and out ~= "" then
  local f = io.open(out .. "/gpu_bench.txt", "w")
  if f then
    f:write(table.concat(lines, "\n"), "\n")
    f:close()
  end
end
if failed > 0 then os.exit(1) end
