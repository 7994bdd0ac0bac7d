-- A small 3-d ResNet for video clips ([N, C, T, H, W]), torchvision's R3D-18 recipe at a chosen width and depth:
-- a stem Conv3d (3x7x7, stride (1, 2, 2)) + BatchNorm3d + ReLU, then three stages of one basic block each (two
-- 3x3x3 Conv3d + BatchNorm3d, a 1x1x1 Conv3d shortcut where the shape changes; stages 2 and 3 halve T, H and W),
-- AdaptiveAvgPool3d(1) and a Linear classifier. bench/torch_conv3d.py builds the same network in PyTorch.
--
--   local R3D = dofile("examples/video3d/model.lua")
--   local model = R3D { num_classes = 10, width = 16, in_channels = 3 }
local ddp = require "ddplua"
local nn = ddp.nn

local Block = nn.Module:extend("Block3d")

function Block:__init(cin, cout, stride)
  self.conv1 = nn.Conv3d(cin, cout, 3, { stride = stride, padding = 1, bias = false })
  self.bn1 = nn.BatchNorm3d(cout)
  self.conv2 = nn.Conv3d(cout, cout, 3, { padding = 1, bias = false })
  self.bn2 = nn.BatchNorm3d(cout)
  if stride ~= 1 or cin ~= cout then
    self.down = nn.Sequential { nn.Conv3d(cin, cout, 1, { stride = stride, bias = false }), nn.BatchNorm3d(cout) }
  end
end

function Block:forward(x)
  local out = self.bn1(self.conv1(x)):relu()
  out = self.bn2(self.conv2(out))
  return (out + (self.down and self.down(x) or x)):relu()
end

local R3D = nn.Module:extend("R3D")

function R3D:__init(opts)
  local w, cin = opts.width or 16, opts.in_channels or 3
  self.stem = nn.Sequential {
    nn.Conv3d(cin, w, { 3, 7, 7 }, { stride = { 1, 2, 2 }, padding = { 1, 3, 3 }, bias = false }),
    nn.BatchNorm3d(w), nn.ReLU(),
  }
  self.layers = nn.Sequential { Block(w, w, 1), Block(w, 2 * w, 2), Block(2 * w, 4 * w, 2) }
  self.pool = nn.AdaptiveAvgPool3d(1)
  self.fc = nn.Linear(4 * w, opts.num_classes or 10)
end

function R3D:forward(x)
  return self.fc(self.pool(self.layers(self.stem(x))):flatten(2))
end

return R3D
