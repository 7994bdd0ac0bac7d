-- A small Vision Transformer (Dosovitskiy et al.; torchvision's vit_b_16 layout at toy size): the image cut into
-- patches by a strided Conv2d, a class token and learned position embeddings, pre-norm nn.TransformerEncoder
-- layers (GELU, batch_first), a final LayerNorm and a Linear head on the class token.
-- examples/vit/torch_vit.py builds the same network in PyTorch.
--
--   local ViT = dofile("examples/vit/model.lua")
--   local model = ViT { image = 28, patch = 4, channels = 1, dim = 64, depth = 4, heads = 4, mlp = 128,
--                       num_classes = 10, dropout = 0 }
local ddp = require "ddplua"
local nn = ddp.nn

local ViT = nn.Module:extend("ViT")

function ViT:__init(o)
  for _, k in ipairs({ "image", "patch", "channels", "dim", "depth", "heads", "mlp", "num_classes" }) do
    if math.type(o[k]) ~= "integer" or o[k] < 1 then
      error(string.format("ViT: %s must be a positive integer, got %s", k, tostring(o[k])), 3)
    end
  end
  if o.image % o.patch ~= 0 then
    error(string.format("ViT: the image size %d is not a multiple of the patch size %d", o.image, o.patch), 3)
  end
  local side = o.image // o.patch
  local n = side * side
  self.image = o.image
  self.patch_embed = nn.Conv2d(o.channels, o.dim, o.patch, { stride = o.patch })
  self.cls_token = ddp.zeros(1, 1, o.dim):requires_grad_()
  self.pos_embed = (ddp.randn(1, n + 1, o.dim) * 0.02):requires_grad_()
  self.dropout = nn.Dropout(o.dropout)
  local layer = nn.TransformerEncoderLayer(o.dim, o.heads, { dim_feedforward = o.mlp, dropout = o.dropout,
    activation = "gelu", batch_first = true, norm_first = true })
  self.encoder = nn.TransformerEncoder(layer, o.depth)
  self.norm = nn.LayerNorm(o.dim)
  self.head = nn.Linear(o.dim, o.num_classes)
end

function ViT:forward(x)
  local want = { self.patch_embed.in_channels, self.image, self.image }
  if x:dim() ~= 4 or x:size(2) ~= want[1] or x:size(3) ~= want[2] or x:size(4) ~= want[3] then
    error(string.format("ViT: expected images [N, %d, %d, %d], got [%s]", want[1], want[2], want[3],
      table.concat(x:size(), ", ")), 2)
  end
  local B = x:size(1)
  local t = self.patch_embed(x):flatten(3):transpose(2, 3) -- [B, patches, dim]
  t = ddp.cat({ self.cls_token:expand(B, -1, -1), t }, 2) + self.pos_embed
  t = self.encoder(self.dropout(t))
  return self.head(self.norm(t:select(2, 1)))
end

return ViT
