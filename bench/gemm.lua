-- float32 GEMM throughput: ddplua's own GEMM against OpenBLAS, per shape.
--
--   ./build/bin/ddplua bench/gemm.lua [threads=1] [rounds=15] [ms=30] [clock=wall|cpu] [evict=0|1]
--
-- Each shape runs through ddp.matmul / ddp.linear on float32 tensors with
-- the transposes the op layer uses (x @ W^T forward, g @ W and g^T @ x
-- backward, conv im2col products), once with the implementation
-- DDPLUA_GEMM selects by default ("own": the CPU's best micro-kernel) and
-- once with OpenBLAS (ddp.set_gemm_impl("blas"), the same as running with
-- DDPLUA_GEMM=blas), plus the AVX2 kernel where the CPU has AVX-512 too.
-- The implementations alternate within every round and each keeps its best
-- round, so a busy machine slows both alike instead of skewing the ratio.
-- clock=cpu times with the process's CPU time (os.clock) instead of the
-- wall clock: on a machine shared with other jobs it counts only the time
-- the GEMM actually ran (one thread only: CPU time adds up over threads).
-- evict=1 times single calls with the caches as a training step leaves
-- them: before each call a 4 MiB buffer is rewritten (the L2 and more), so
-- C and the operands come from L3 or memory; each implementation then
-- reports its median call over the rounds instead of its best round.
local ddp = require "ddplua"

local opts = { threads = 1, rounds = 15, ms = 30, clock = "wall", evict = 0 }
for _, a in ipairs(arg or {}) do
  local k, v = a:match("^(%w+)=(%w+)$")
  local ok = k ~= nil and opts[k] ~= nil
  if ok and k ~= "clock" then
    v = tonumber(v)
    ok = math.type(v) == "integer" and (k == "evict" and (v == 0 or v == 1) or k ~= "evict" and v >= 1)
  elseif ok then
    ok = v == "wall" or v == "cpu"
  end
  if not ok then
    error("bench/gemm.lua: bad argument '" .. a ..
      "' (expected threads=N, rounds=N, ms=N with N >= 1, clock=wall|cpu or evict=0|1)", 0)
  end
  opts[k] = v
end
if opts.clock == "cpu" and opts.threads > 1 then
  error("bench/gemm.lua: clock=cpu measures one thread; use the wall clock with threads=" .. opts.threads, 0)
end
local clock = opts.clock == "cpu" and os.clock or ddp.clock

-- {M, N, K, what, run(A, B)}: stored operands are built so the product is M x N
local function nt(x, w) return ddp.matmul(x, w:transpose(1, 2)) end
local function nn(g, w) return ddp.matmul(g, w) end
local function tn(g, x) return ddp.matmul(g:transpose(1, 2), x) end
local shapes = {
  { 64, 1024, 784, "fwd x@W^T (linear)", function(x, w) return ddp.linear(x, w) end, { 64, 784 }, { 1024, 784 } },
  { 64, 1024, 1024, "fwd x@W^T", nt, { 64, 1024 }, { 1024, 1024 } },
  { 64, 10, 1024, "fwd x@W^T", nt, { 64, 1024 }, { 10, 1024 } },
  { 64, 784, 1024, "bwd dX = g@W", nn, { 64, 1024 }, { 1024, 784 } },
  { 64, 1024, 1024, "bwd dX = g@W", nn, { 64, 1024 }, { 1024, 1024 } },
  { 64, 1024, 10, "bwd dX = g@W", nn, { 64, 10 }, { 10, 1024 } },
  { 1024, 784, 64, "bwd dW = g^T@x", tn, { 64, 1024 }, { 64, 784 } },
  { 1024, 1024, 64, "bwd dW = g^T@x", tn, { 64, 1024 }, { 64, 1024 } },
  { 10, 1024, 64, "bwd dW = g^T@x", tn, { 64, 10 }, { 64, 1024 } },
  { 32, 784, 25, "conv W@cols", nn, { 32, 25 }, { 25, 784 } },
  { 64, 196, 800, "conv W@cols", nn, { 64, 800 }, { 800, 196 } },
  { 1024, 1024, 1024, "square", nn, { 1024, 1024 }, { 1024, 1024 } },
  -- many rows against k: C stays in rows (sgemm.c's orientation), the LSTM LM decoder and a GPT MLP
  { 700, 10000, 200, "fwd x@W^T LM decoder", nt, { 700, 200 }, { 10000, 200 } },
  { 512, 3072, 768, "fwd x@W^T GPT MLP", nt, { 512, 768 }, { 3072, 768 } },
  { 20, 800, 200, "fwd h@W^T LSTM step", nt, { 20, 200 }, { 800, 200 } },
  -- k = 384 held whole in narrower blocks (sgemm.c's run_blocked): a 384-wide GPT's qkv and MLP products
  { 2048, 1152, 384, "fwd x@W^T GPT-384 qkv", nt, { 2048, 384 }, { 1152, 384 } },
  { 2048, 1536, 384, "bwd dX = g@W GPT-384", nn, { 2048, 384 }, { 384, 1536 } },
  -- weight gradients near sgemm.c's swap_pays boundary: the LSTM LM decoder and its input weights
  { 10000, 200, 700, "bwd dW = g^T@x LM decoder", tn, { 700, 10000 }, { 700, 200 } },
  { 800, 200, 700, "bwd dW = g^T@x LSTM input", tn, { 700, 800 }, { 700, 200 } },
  { 1000, 500, 2000, "bwd dW = g^T@x", tn, { 2000, 1000 }, { 2000, 500 } },
}

local impls = { { name = "own", label = nil }, { name = "blas", label = "OpenBLAS" } }
ddp.set_gemm_impl("own")
impls[1].label = "own:" .. ddp.gemm_impl()
if ddp.gemm_impl() == "avx512" and pcall(ddp.set_gemm_impl, "avx2") then
  impls[#impls + 1] = { name = "avx2", label = "own:avx2" }
end
ddp.set_num_threads(opts.threads)

local scrub = opts.evict == 1 and ddp.zeros({ 1024 * 1024 }) or nil -- 4 MiB

-- best GFLOP/s of each implementation over the rounds (evict=1: the median call)
local function measure(s)
  local a, b = ddp.randn(s[6]), ddp.randn(s[7])
  local flop = 2.0 * s[1] * s[2] * s[3]
  local best, reps = {}, {}
  for i, im in ipairs(impls) do -- warm up and size the repetitions to ~opts.ms per round
    ddp.set_gemm_impl(im.name)
    local out = s[5](a, b)
    assert(out:size(1) == s[1] and out:size(2) == s[2], "bench shape mismatch")
    local t0, n = clock(), 0
    repeat
      s[5](a, b)
      n = n + 1
    until clock() - t0 > 0.005
    reps[i] = math.max(1, math.floor(n * opts.ms / 5 + 0.5))
    best[i] = 0
  end
  if opts.evict == 1 then -- one call per round after the scrub; the median call
    local runs = {}
    for i = 1, #impls do runs[i] = {} end
    for _ = 1, opts.rounds do
      for i, im in ipairs(impls) do
        ddp.set_gemm_impl(im.name)
        scrub:mul_(1.0)
        local t0 = clock()
        s[5](a, b)
        runs[i][#runs[i] + 1] = flop / (clock() - t0) / 1e9
      end
      ddp.core.gc_pace()
    end
    for i = 1, #impls do
      table.sort(runs[i])
      best[i] = runs[i][(#runs[i] + 1) // 2]
    end
    return best
  end
  for _ = 1, opts.rounds do
    for i, im in ipairs(impls) do
      ddp.set_gemm_impl(im.name)
      local t0 = clock()
      for _ = 1, reps[i] do s[5](a, b) end
      local gflops = flop * reps[i] / (clock() - t0) / 1e9
      if gflops > best[i] then best[i] = gflops end
    end
    ddp.core.gc_pace()
  end
  return best
end

ddp.set_gemm_impl("blas")
print("cpu=" .. ddp.core.cpu_info())
print(("float32 GEMM, %d thread(s), %s of %d rounds, %s clock; OpenBLAS: %s"):format(opts.threads,
  opts.evict == 1 and "median call, L2 evicted before each," or "best", opts.rounds, opts.clock, ddp.blas_info()))
local head = ("%-17s %-20s"):format("M x N x K", "product")
for _, im in ipairs(impls) do head = head .. ("%12s"):format(im.label) end
print(head .. ("%11s"):format("own/blas"))
local log_sum, count = 0, 0
for _, s in ipairs(shapes) do
  local best = measure(s)
  local line = ("%-17s %-20s"):format(("%dx%dx%d"):format(s[1], s[2], s[3]), s[4])
  for i = 1, #impls do line = line .. ("%12.1f"):format(best[i]) end
  local ratio = best[1] / best[2]
  log_sum, count = log_sum + math.log(ratio), count + 1
  print(line .. ("%10.2fx"):format(ratio))
end
print(("geometric mean own/blas: %.2fx (GFLOP/s columns; higher is better)"):format(math.exp(log_sum / count)))
ddp.set_gemm_impl("own")
