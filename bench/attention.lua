-- The CPU attention kernel (backends/cpu/cpu_attention.c) alone: milliseconds
-- per call of F.self_attention_qkv (float32, one thread unless threads=N)
-- forward (under no_grad) and forward + backward (with a given output
-- gradient, so no other op is timed), the median of the runs, at the GPT
-- example's shape (B=16, T=128, C=128, 4 heads of 32, causal: one layer) and
-- at T=256 and T=512 with head dim 64, not causal. dtype=bfloat16 times
-- bfloat16 operands, with bfloat16 attention's products on `kernel` (auto,
-- amx, avx512_bf16 or widen: ddp.core.attention_bf16).
--
--   taskset -c 1 ./build/bin/ddplua bench/attention.lua [runs=30] [threads=1] [only=substring]
--     [dtype=float32|bfloat16] [kernel=auto]
--
-- Prints the CPU line first, then one line per case:
-- `case=<name>|fwd_ms=<x>|both_ms=<y>`.
local ddp = require "ddplua"
local F = ddp.nn.F

local cfg = { runs = 30, threads = 1, only = "", dtype = "float32", kernel = "auto" }
for _, a in ipairs(arg or {}) do
  local k, v = a:match("^(%w+)=(.*)$")
  if not k or cfg[k] == nil then
    error("usage: ddplua bench/attention.lua [runs=N] [threads=N] [only=text], got " .. a, 0)
  end
  cfg[k] = type(cfg[k]) == "number" and math.tointeger(tonumber(v)) or v
end
if not cfg.runs or cfg.runs < 1 or not cfg.threads or cfg.threads < 1 then
  error("usage: runs and threads must be positive integers", 0)
end
if cfg.dtype ~= "float32" and cfg.dtype ~= "bfloat16" then error("usage: dtype is float32 or bfloat16", 0) end
ddp.core.attention_bf16(cfg.kernel)
ddp.set_num_threads(cfg.threads)
ddp.manual_seed(0)
print("cpu=" .. ddp.core.cpu_info() .. " dtype=" .. cfg.dtype .. " kernel=" .. cfg.kernel)

local median_of = dofile((arg and arg[0] or "bench/x.lua"):gsub("[^/]*$", "") .. "median_ms.lua")
local function median_ms(fn) return median_of(ddp, cfg.runs, fn) end

local cases = {
  { name = "GPT B=16 T=128 C=128 4 heads causal", B = 16, T = 128, C = 128, H = 4, causal = true },
  { name = "B=4 T=256 C=256 4 heads (hd 64)", B = 4, T = 256, C = 256, H = 4, causal = false },
  { name = "B=2 T=512 C=256 4 heads (hd 64)", B = 2, T = 512, C = 256, H = 4, causal = false },
}
for _, c in ipairs(cases) do
  if c.name:find(cfg.only, 1, true) then
    local x = ddp.randn(c.B, c.T, 3 * c.C):to(cfg.dtype):requires_grad_()
    local gy = ddp.randn(c.B, c.T, c.C):to(cfg.dtype)
    local o = { is_causal = c.causal }
    local fwd = median_ms(function() return ddp.no_grad(function() return F.self_attention_qkv(x, c.H, o) end) end)
    local both = median_ms(function()
      x.grad = nil
      F.self_attention_qkv(x, c.H, o):backward(gy)
    end)
    print(string.format("case=%s|fwd_ms=%.4f|both_ms=%.4f", c.name, fwd, both))
  end
end
