-- torchvision's resnet18 in ddplua: the same layout and state_dict names
-- (conv1, bn1, layer1.0.conv1, ..., layer2.0.downsample.0, ..., fc), so a
-- torchvision state_dict loads as it is (tests/spec/resnet_parity_spec.lua
-- checks the logits and gradients against torchvision's).
--
--   local resnet = dofile("examples/resnet/model.lua")
--   local model = resnet.resnet18 { num_classes = 10, in_channels = 3, width = 64 }
--
-- width scales every stage (64, 128, 256, 512 for width = 64, torchvision's);
-- in_channels is 3 in torchvision. PyTorch's init: kaiming_normal_ (fan_out,
-- relu) for the convolutions, BatchNorm weight 1 and bias 0.
local ddp = require "ddplua"
local nn = ddp.nn

local M = {}

local function conv(cin, cout, k, stride, pad)
  local c = nn.Conv2d(cin, cout, k, { stride = stride, padding = pad, bias = false })
  local std = math.sqrt(2 / (cout * k * k)) -- kaiming_normal_(mode="fan_out", nonlinearity="relu")
  ddp.no_grad(function() c.weight:copy_(ddp.randn(c.weight:size()) * std) end)
  return c
end

local BasicBlock = nn.Module:extend("BasicBlock")
M.BasicBlock = BasicBlock

function BasicBlock:__init(inplanes, planes, stride)
  self.conv1 = conv(inplanes, planes, 3, stride, 1)
  self.bn1 = nn.BatchNorm2d(planes)
  self.relu = nn.ReLU()
  self.conv2 = conv(planes, planes, 3, 1, 1)
  self.bn2 = nn.BatchNorm2d(planes)
  if stride ~= 1 or inplanes ~= planes then
    self.downsample = nn.Sequential { conv(inplanes, planes, 1, stride, 0), nn.BatchNorm2d(planes) }
  end
end

-- bn:forward_relu(x) is relu(bn(x)) (self.relu's op) in one pass over memory
function BasicBlock:forward(x)
  local out = self.bn1:forward_relu(self.conv1(x))
  out = self.bn2(self.conv2(out))
  local identity = self.downsample and self.downsample(x) or x
  return self.relu(out + identity)
end

local ResNet = nn.Module:extend("ResNet")
M.ResNet = ResNet

function ResNet:__init(layers, opts)
  opts = opts or {}
  local w = opts.width or 64
  self.conv1 = conv(opts.in_channels or 3, w, 7, 2, 3)
  self.bn1 = nn.BatchNorm2d(w)
  self.relu = nn.ReLU()
  self.maxpool = nn.MaxPool2d(3, 2, 1)
  local inplanes = w
  for i, n in ipairs(layers) do
    local planes, blocks = w << (i - 1), {}
    for b = 1, n do
      blocks[b] = BasicBlock(inplanes, planes, (b == 1 and i > 1) and 2 or 1)
      inplanes = planes
    end
    self["layer" .. i] = nn.Sequential(blocks)
  end
  self.avgpool = nn.AdaptiveAvgPool2d({ 1, 1 })
  self.fc = nn.Linear(inplanes, opts.num_classes or 1000)
end

function ResNet:forward(x)
  x = self.maxpool(self.bn1:forward_relu(self.conv1(x)))
  x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
  return self.fc(self.avgpool(x):flatten(2))
end

function M.resnet18(opts) return ResNet({ 2, 2, 2, 2 }, opts) end

return M
