-- The example networks' files (examples/vit/model.lua, examples/unet/model.lua) as a user builds them: the output
-- shapes, the gradients reaching every parameter, and clear errors for settings and inputs they cannot take.
local ddp = require "ddplua"
local R = require "helpers.ref"

local ViT = dofile("examples/vit/model.lua")
local UNet = dofile("examples/unet/model.lua")

local function vit(over)
  local o = { image = 28, patch = 4, channels = 1, dim = 16, depth = 2, heads = 2, mlp = 32, num_classes = 10,
    dropout = 0 }
  for k, v in pairs(over or {}) do o[k] = v end
  return ViT(o)
end

describe("the example networks", function()
  it("ViT: logits per image, a gradient for every parameter", function()
    ddp.manual_seed(1)
    local net = vit()
    local y = net(ddp.randn(3, 1, 28, 28))
    assert.are.same({ 3, 10 }, y:size())
    y:sum():backward()
    for name, p in net:named_parameters() do
      assert(p.grad ~= nil, name .. " has no gradient")
      assert.equal(p:numel(), p.grad:isfinite():sum():item(), name)
    end
    assert.is_true(net.cls_token.grad:abs():sum():item() > 0, "the class token is read")
  end)

  it("UNet: class scores per pixel, a gradient for every parameter", function()
    ddp.manual_seed(2)
    local net = UNet { in_channels = 1, classes = 5, width = 4 }
    local y = net(ddp.randn(2, 1, 24, 16))
    assert.are.same({ 2, 5, 24, 16 }, y:size())
    y:sum():backward()
    for name, p in net:named_parameters() do
      assert(p.grad ~= nil, name .. " has no gradient")
    end
  end)

  it("refuse settings and inputs they cannot take, naming them", function()
    R.assert_errors({
      { function() vit { patch = 5 } end, "ViT: the image size 28 is not a multiple of the patch size 5" },
      { function() vit { heads = 0 } end, "ViT: heads must be a positive integer, got 0" },
      { function() vit { dim = 16.5 } end, "ViT: dim must be a positive integer, got 16.5" },
      { function() vit()(ddp.randn(2, 1, 32, 32)) end, "ViT: expected images [N, 1, 28, 28], got [2, 1, 32, 32]" },
      { function() vit()(ddp.randn(2, 28, 28)) end, "ViT: expected images [N, 1, 28, 28], got [2, 28, 28]" },
      { function() UNet { in_channels = 1, classes = 3, width = 4 }(ddp.randn(1, 1, 30, 32)) end,
        "UNet: expected images [N, C, H, W] with H and W multiples of 8, got [1, 1, 30, 32]" },
    })
  end)
end)
