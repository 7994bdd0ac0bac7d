-- conv2d forward + backward (input, weight and bias gradients) in float32
-- and under ddp.autocast("bfloat16"), ms per step, best of 5 rounds of 5,
-- at the shapes of the ResNet and CNN examples. Under autocast the
-- convolutions run in bfloat16 through oneDNN where the CPU has native
-- bfloat16 and (without AMX) the shape measured faster that way, else in
-- float32 rounded to bfloat16 (README: DDPLUA_CONV_BF16);
-- DDPLUA_CONV_BF16=1 runs every shape in bfloat16, =0 none.
--
--   ddplua bench/conv_bf16.lua [threads=1]
--   DDPLUA_CONV_BF16=1 ddplua bench/conv_bf16.lua [threads=1]
--   DDPLUA_CONV_BF16=0 ddplua bench/conv_bf16.lua [threads=1]
local ddp = require "ddplua"
local F = ddp.nn.F

local here = (arg and arg[0] or "bench/x.lua"):gsub("[^/]*$", "")
local threads = dofile(here .. "int_args.lua")("bench/conv_bf16.lua", { threads = 1 }).threads
ddp.set_num_threads(threads)
print("cpu: " .. ddp.core.cpu_info())
print(string.format("oneDNN: %s; bfloat16 convolutions %s", ddp.core.onednn_info(),
  os.getenv("DDPLUA_CONV_BF16") == "0" and "in float32, rounded (DDPLUA_CONV_BF16=0)"
  or os.getenv("DDPLUA_CONV_BF16") == "1" and "in bfloat16 for every shape (DDPLUA_CONV_BF16=1)"
  or "in bfloat16 where the CPU has it natively and the shape pays"))

for _, s in ipairs({ { 64, 16, 16, 32 }, { 64, 32, 32, 16 }, { 64, 64, 64, 8 }, { 64, 32, 64, 14 }, { 64, 1, 32, 28 },
  { 32, 3, 16, 32 } }) do
  local n, c, o, h = s[1], s[2], s[3], s[4]
  local x = ddp.randn(n, c, h, h):requires_grad_()
  local w, b = ddp.randn(o, c, 3, 3):requires_grad_(), ddp.randn(o):requires_grad_()
  local function step(bf)
    local y
    if bf then
      local _ <close> = ddp.autocast("bfloat16")
      y = F.conv2d(x, w, b, 1, 1)
    else
      y = F.conv2d(x, w, b, 1, 1)
    end
    y:float():sum():backward()
  end
  local ms = {}
  for _, bf in ipairs({ false, true }) do
    for _ = 1, 3 do step(bf) end
    local best = math.huge
    for _ = 1, 5 do
      local t0 = ddp.clock()
      for _ = 1, 5 do step(bf) end
      best = math.min(best, (ddp.clock() - t0) / 5)
    end
    ms[#ms + 1] = best * 1e3
  end
  print(string.format("conv %-2d -> %-2d 3x3 pad 1, %2dx%-2d batch %d: float32 %6.2f ms, bf16 autocast %6.2f ms (%.2fx)",
    c, o, h, h, n, ms[1], ms[2], ms[1] / ms[2]))
end
