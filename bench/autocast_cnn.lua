-- A conv net's training step in float32 and under ddp.autocast("bfloat16"),
-- ms per step (forward, backward, SGD), best of 5 rounds of 10 steps: two
-- conv -> ReLU -> max_pool2d stages and a Linear at Fashion-MNIST's size
-- (batch 64, 1x28x28, 32 and 64 channels), the net of the seed's CNN
-- without BatchNorm. Under autocast the convolutions output bfloat16, so
-- ReLU and pooling see bfloat16 planes (cpu_conv.c's half_pool: the
-- float32 kernels on widened planes, one rounding).
--
--   ddplua bench/autocast_cnn.lua [threads=2] [steps=10]
local ddp = require "ddplua"
local nn = ddp.nn

local here = (arg and arg[0] or "bench/x.lua"):gsub("[^/]*$", "")
local cfg = dofile(here .. "int_args.lua")("bench/autocast_cnn.lua", { threads = 2, steps = 10 })
ddp.set_num_threads(cfg.threads)
local step_ms = dofile(here .. "step_ms.lua")
print("cpu: " .. ddp.core.cpu_info())
print("oneDNN: " .. ddp.core.onednn_info())

local function run(autocast)
  ddp.manual_seed(0)
  local model = nn.Sequential { nn.Conv2d(1, 32, 3, { padding = 1 }), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(32, 64, 3, { padding = 1 }), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(64 * 7 * 7, 10) }
  return step_ms(ddp, model, ddp.randn(64, 1, 28, 28), ddp.randint(1, 11, { 64 }), autocast, cfg.steps)
end

local f32, bf16 = run(false), run(true)
print(string.format("conv-relu-pool CNN, batch 64, %d thread(s): float32 %.2f ms/step, bf16 autocast %.2f ms/step " ..
  "(%.2fx)", cfg.threads, f32, bf16, f32 / bf16))
