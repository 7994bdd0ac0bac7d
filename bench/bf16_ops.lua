-- bfloat16 against float32 per op: what a bfloat16 activation costs where
-- autocast leaves one (a Linear's or a conv's output meeting ReLU, dropout,
-- pooling, a mask or an argmax) or a model converted to bfloat16 runs it.
-- Each op on a [64, 64, 16, 16] tensor (1M values), forward, or forward and
-- backward where marked, one thread unless threads=N, the median of `runs`
-- (bench/median_ms.lua: after warm-up, each run after a full collection).
-- A bfloat16 op slower than 2x its float32 figure is flagged: a
-- per-element double path (cpu_elementwise.c, cpu_reduce.c) reads 4-130x;
-- the widening alone costs up to about 2x an op as light as a compare.
--
--   ddplua bench/bf16_ops.lua [runs=15] [threads=1]
local ddp = require "ddplua"
local F = ddp.nn.F

local here = (arg and arg[0] or "bench/x.lua"):gsub("[^/]*$", "")
local cfg = dofile(here .. "int_args.lua")("bench/bf16_ops.lua", { runs = 15, threads = 1 })
ddp.set_num_threads(cfg.threads)
local median_of = dofile(here .. "median_ms.lua")
print("cpu: " .. ddp.core.cpu_info())

local function bwd(f)
  return function(x)
    local y = f(x:detach():requires_grad_())
    local s = y:float():sum()
    s:backward()
  end
end
local cases = {
  { "relu", function(x) return F.relu(x) end },
  { "relu fwd+bwd", bwd(F.relu) },
  { "gelu fwd+bwd", bwd(F.gelu) },
  { "add", function(x) return x + x end },
  { "mul by a number", function(x) return x * 2 end },
  { "gt 0 (a mask)", function(x) return x:gt(0) end },
  { "eq (tensors)", function(x) return x:eq(x) end },
  { "dropout p=0.1 fwd+bwd", bwd(function(t) return F.dropout(t, 0.1, true) end) },
  { "max_pool2d 2x2 fwd+bwd", bwd(function(t) return F.max_pool2d(t, 2) end) },
  { "max_pool2d 3x3/2 pad 1 fwd+bwd", bwd(function(t) return F.max_pool2d(t, 3, 2, 1) end) },
  { "avg_pool2d 2x2 fwd+bwd", bwd(function(t) return F.avg_pool2d(t, 2) end) },
  { "adaptive_avg_pool2d 1x1 fwd+bwd", bwd(function(t) return F.adaptive_avg_pool2d(t, { 1, 1 }) end) },
  { "mean over H, W", function(x) return x:mean({ 3, 4 }) end },
  { "sum", function(x) return x:sum() end },
  { "max along C", function(x) return x:max(2) end },
  { "argmax along W", function(x) return x:argmax(4) end },
  { "softmax along W fwd+bwd", bwd(function(t) return ddp.softmax(t, 4) end) },
  { "transpose + contiguous", function(x) return x:transpose(2, 3):contiguous() end },
  { "cat along C", function(x) return ddp.cat({ x, x }, 2) end },
}

ddp.manual_seed(0)
local xf = ddp.randn(64, 64, 16, 16)
local xb = xf:to("bfloat16")
print(string.format("%-34s %10s %10s %8s", "op ([64, 64, 16, 16])", "float32", "bfloat16", "bf16/f32"))
local slow = 0
for _, c in ipairs(cases) do
  local f32 = median_of(ddp, cfg.runs, function() return c[2](xf) end)
  local b16 = median_of(ddp, cfg.runs, function() return c[2](xb) end)
  local flag = b16 > 2 * f32 and "  slow" or ""
  if flag ~= "" then slow = slow + 1 end
  print(string.format("%-34s %8.3f ms %8.3f ms %7.2fx%s", c[1], f32, b16, b16 / f32, flag))
end
print(string.format("bfloat16 ops slower than 2x float32: %d of %d", slow, #cases))
