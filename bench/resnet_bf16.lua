-- ResNet-18 (examples/resnet/model.lua, 1 input channel, 32x32 images,
-- batch 64) under ddp.autocast("bfloat16") against float32: each distinct
-- convolution of the network (forward + both gradients, ms, median of 21),
-- then a whole training step (forward, backward, SGD; ms, best of 5 rounds
-- of `steps`). Which convolutions autocast computes in bfloat16 depends on
-- the CPU and on DDPLUA_CONV_BF16 (README): run it as is and with
-- DDPLUA_CONV_BF16=1 (every shape in bfloat16) to see what the choice
-- gains.
--
--   ddplua bench/resnet_bf16.lua [width=16] [threads=2] [steps=20]
--   DDPLUA_CONV_BF16=1 ddplua bench/resnet_bf16.lua [width=16]
local ddp = require "ddplua"
local F = ddp.nn.F

local here = (arg and arg[0] or "bench/x.lua"):gsub("[^/]*$", "")
local cfg = dofile(here .. "int_args.lua")("bench/resnet_bf16.lua", { width = 16, threads = 2, steps = 20 })
ddp.set_num_threads(cfg.threads)
local median_of, step_ms = dofile(here .. "median_ms.lua"), dofile(here .. "step_ms.lua")
local resnet = dofile(here .. "../examples/resnet/model.lua")
print("cpu: " .. ddp.core.cpu_info())
print(string.format("oneDNN: %s; DDPLUA_CONV_BF16=%s", ddp.core.onednn_info(), os.getenv("DDPLUA_CONV_BF16") or "(unset)"))

local function autocast(on, fn)
  if not on then return fn() end
  local _ <close> = ddp.autocast("bfloat16")
  return fn()
end

-- the network's convolutions: in, out, input size, kernel, stride, padding
local w = cfg.width
local layers = { { 1, w, 32, 7, 2, 3 }, { w, w, 8, 3, 1, 1 }, { w, 2 * w, 8, 3, 2, 1 }, { 2 * w, 2 * w, 4, 3, 1, 1 },
  { w, 2 * w, 8, 1, 2, 0 }, { 2 * w, 4 * w, 4, 3, 2, 1 }, { 4 * w, 4 * w, 2, 3, 1, 1 }, { 2 * w, 4 * w, 4, 1, 2, 0 },
  { 4 * w, 8 * w, 2, 3, 2, 1 }, { 8 * w, 8 * w, 1, 3, 1, 1 }, { 4 * w, 8 * w, 2, 1, 2, 0 } }
print(string.format("%-28s %9s %9s %8s", "conv (batch 64)", "float32", "autocast", "bf16/f32"))
for _, l in ipairs(layers) do
  local cin, cout, h, k, s, p = table.unpack(l)
  local x = ddp.randn(64, cin, h, h):requires_grad_()
  local wt = ddp.randn(cout, cin, k, k):requires_grad_()
  local function step(on)
    local y = autocast(on, function() return F.conv2d(x, wt, nil, s, p) end)
    local t = y:float():sum()
    t:backward()
  end
  local f32 = median_of(ddp, 21, function() step(false) end)
  local b16 = median_of(ddp, 21, function() step(true) end)
  print(string.format("%3d -> %3d %dx%d / %d at %2dx%-2d %9.3f %9.3f %7.2fx", cin, cout, k, k, s, h, h, f32, b16, b16 / f32))
end

local function model_step_ms(on)
  ddp.manual_seed(0)
  local model = resnet.resnet18 { num_classes = 10, in_channels = 1, width = w }
  return step_ms(ddp, model, ddp.randn(64, 1, 32, 32), ddp.randint(1, 11, { 64 }), on, cfg.steps)
end
local f32, b16 = model_step_ms(false), model_step_ms(true)
print(string.format("ResNet-18 width %d step, %d thread(s): float32 %.2f ms, bf16 autocast %.2f ms (%.2fx float32's " ..
  "speed)", w, cfg.threads, f32, b16, f32 / b16))
