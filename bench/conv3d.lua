-- 3-d convolutions and a small 3-d ResNet against PyTorch 1.13, one thread each side (run both pinned to one
-- core: `taskset -c 0`): conv3d forward and forward + backward at video-model shapes, ms (median of 7 after 3
-- warm-up runs; beside them the composition of 2-d convolutions other devices run), and the training step of examples/video3d's R3D (forward, backward, SGD) on a batch of
-- [8, 3, 8, 56, 56] clips, ms per step (median of `steps`). bench/torch_conv3d.py prints the same rows for
-- PyTorch; bench/run.lua's `models` group runs the two side by side.
--
--   taskset -c 0 ddplua bench/conv3d.lua [steps=7]
local ddp = require "ddplua"
local nn, F = ddp.nn, ddp.nn.F
local here = (arg and arg[0] or "bench/x.lua"):gsub("[^/]*$", "")
local cfg = dofile(here .. "int_args.lua")("bench/conv3d.lua", { steps = 7 })
local median_ms = dofile(here .. "median_ms.lua")
local R3D = dofile(here .. "../examples/video3d/model.lua")
ddp.set_num_threads(1)
print("cpu: " .. ddp.core.cpu_info())

-- name, input shape, weight shape, stride, padding: R3D-18's stem and its stages at a 56x56 clip of 8 frames
local LAYERS = {
  { "stem 3->16 3x7x7 s(1,2,2)", { 8, 3, 8, 56, 56 }, { 16, 3, 3, 7, 7 }, { 1, 2, 2 }, { 1, 3, 3 } },
  { "16->16 3x3x3", { 8, 16, 8, 28, 28 }, { 16, 16, 3, 3, 3 }, 1, 1 },
  { "16->32 3x3x3 s2", { 8, 16, 8, 28, 28 }, { 32, 16, 3, 3, 3 }, 2, 1 },
  { "64->64 3x3x3", { 8, 64, 2, 7, 7 }, { 64, 64, 3, 3, 3 }, 1, 1 },
}

-- each layer the way F.conv3d runs it here (oneDNN's direct 3-d convolution on the CPU), then composed of 2-d
-- convolutions as on the devices without one (nn/conv3d.lua)
local conv3d = require "ddplua.nn.conv3d"
ddp.manual_seed(0)
for _, l in ipairs(LAYERS) do
  local x = ddp.randn(l[2]):requires_grad_()
  local w = (ddp.randn(l[3]) * 0.05):requires_grad_()
  local fwd = median_ms(ddp, 7, function() return F.conv3d(x, w, nil, l[4], l[5]) end)
  local both = median_ms(ddp, 7, function() F.conv3d(x, w, nil, l[4], l[5]):sum():backward() end)
  conv3d.direct = false
  local cfwd = median_ms(ddp, 7, function() return F.conv3d(x, w, nil, l[4], l[5]) end)
  local cboth = median_ms(ddp, 7, function() F.conv3d(x, w, nil, l[4], l[5]):sum():backward() end)
  conv3d.direct = true
  print(string.format("conv3d %-28s fwd %8.2f ms  fwd+bwd %8.2f ms   (composed: %.2f / %.2f)", l[1], fwd, both, cfwd,
    cboth))
end

local model = R3D { num_classes = 10, width = 16 }
local opt = ddp.optim.SGD(model:parameters(), { lr = 0.01, momentum = 0.9 })
local x, y = ddp.randn(8, 3, 8, 56, 56), ddp.randint(1, 11, { 8 })
local function step()
  local loss = F.cross_entropy(model(x), y)
  opt:zero_grad()
  loss:backward()
  opt:step()
end
print(string.format("R3D width 16 train step, batch 8x3x8x56x56: %.1f ms", median_ms(ddp, cfg.steps, step)))
