-- U-Net (Ronneberger et al.), the layout of the widely used PyTorch port (milesial/Pytorch-UNet's unet_parts.py):
-- DoubleConv = (Conv2d 3x3 without bias, BatchNorm2d, ReLU) twice; Down = MaxPool2d(2) then DoubleConv; Up =
-- ConvTranspose2d(2, stride 2) halving the channels, the skip connection concatenated on the channel dim, then
-- DoubleConv; a 1x1 Conv2d to the classes. examples/unet/torch_unet.py builds the same network in PyTorch.
--
--   local UNet = dofile("examples/unet/model.lua")
--   local model = UNet { in_channels = 1, classes = 11, width = 16 }   -- three downsamplings: H and W % 8 == 0
local ddp = require "ddplua"
local nn = ddp.nn

local function double_conv(cin, cout)
  return nn.Sequential {
    nn.Conv2d(cin, cout, 3, { padding = 1, bias = false }), nn.BatchNorm2d(cout), nn.ReLU(),
    nn.Conv2d(cout, cout, 3, { padding = 1, bias = false }), nn.BatchNorm2d(cout), nn.ReLU(),
  }
end

local Up = nn.Module:extend("Up")
function Up:__init(cin, cout)
  self.up = nn.ConvTranspose2d(cin, cin // 2, 2, { stride = 2 })
  self.conv = double_conv(cin, cout)
end
function Up:forward(x, skip) return self.conv(ddp.cat({ skip, self.up(x) }, 2)) end

local UNet = nn.Module:extend("UNet")
function UNet:__init(o)
  local w = o.width or 16
  self.inc = double_conv(o.in_channels or 1, w)
  self.down1 = nn.Sequential { nn.MaxPool2d(2), double_conv(w, 2 * w) }
  self.down2 = nn.Sequential { nn.MaxPool2d(2), double_conv(2 * w, 4 * w) }
  self.down3 = nn.Sequential { nn.MaxPool2d(2), double_conv(4 * w, 8 * w) }
  self.up1, self.up2, self.up3 = Up(8 * w, 4 * w), Up(4 * w, 2 * w), Up(2 * w, w)
  self.outc = nn.Conv2d(w, o.classes, 1)
end
function UNet:forward(x)
  -- three poolings and three upsamplings meet again only where H and W divide by 8
  if x:dim() ~= 4 or x:size(3) % 8 ~= 0 or x:size(4) % 8 ~= 0 then
    error(string.format("UNet: expected images [N, C, H, W] with H and W multiples of 8, got [%s]",
      table.concat(x:size(), ", ")), 2)
  end
  local x1 = self.inc(x)
  local x2 = self.down1(x1)
  local x3 = self.down2(x2)
  local x4 = self.down3(x3)
  return self.outc(self.up3(self.up2(self.up1(x4, x3), x2), x1))
end

return UNet
