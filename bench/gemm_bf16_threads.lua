-- bfloat16 GEMMs (oneDNN) against float32 (ddplua's own GEMM) at 1 and 2
-- threads, GFLOP/s, best of 7 rounds: how a process with a spare core
-- splits a bfloat16 product over the GEMM pool (src/backends/cpu/
-- cpu_dnnl_matmul.c). Shapes: square, the GPT's qkv / MLP products, the
-- MLP's layers, and small ones near the split's 4 MFLOP per part.
--
--   ddplua bench/gemm_bf16_threads.lua [reps=10]
local ddp = require "ddplua"

local here = (arg and arg[0] or "bench/x.lua"):gsub("[^/]*$", "")
local reps = dofile(here .. "int_args.lua")("bench/gemm_bf16_threads.lua", { reps = 10 }).reps
print("cpu: " .. ddp.core.cpu_info())
print("oneDNN: " .. ddp.core.onednn_info())
ddp.manual_seed(1)

local function best(f, flop)
  f()
  local n = math.max(1, math.floor(reps * 2e8 / flop))
  local b = math.huge
  for _ = 1, 7 do
    local t0 = ddp.clock()
    for _ = 1, n do f() end
    b = math.min(b, (ddp.clock() - t0) / n)
  end
  return flop / b / 1e9
end

print(string.format("%-16s %10s %10s %10s %10s %8s", "M x N x K", "f32 1t", "bf16 1t", "f32 2t", "bf16 2t",
  "bf16 2t/1t"))
for _, s in ipairs({ { 1024, 1024, 1024 }, { 2048, 384, 128 }, { 2048, 128, 384 }, { 2048, 512, 128 },
  { 512, 128, 2048 }, { 64, 1024, 784 }, { 1000, 100, 300 }, { 256, 256, 256 }, { 128, 128, 256 }, { 64, 128, 512 } }) do
  local m, n, k = s[1], s[2], s[3]
  local a, b = ddp.randn(m, k), ddp.randn(k, n)
  local ab, bb = a:to("bfloat16"), b:to("bfloat16")
  local flop = 2 * m * n * k
  local r = {}
  for _, t in ipairs({ 1, 2 }) do
    ddp.set_num_threads(t)
    r[#r + 1] = best(function() a:matmul(b) end, flop)
    r[#r + 1] = best(function() ab:matmul(bb) end, flop)
  end
  print(string.format("%-16s %10.1f %10.1f %10.1f %10.1f %7.2fx", m .. "x" .. n .. "x" .. k, r[1], r[2], r[3], r[4],
    r[4] / r[2]))
end
