-- nn.AdaptiveAvgPool2d(output_size): average pooling to a fixed output
-- size (n or {h, w}; nil in a pair keeps that input size), PyTorch's
-- windows [floor(i H / h), ceil((i + 1) H / h)) (src/ops/optim_extra.c).
local Module = require "ddplua.nn.module"
local F = require "ddplua.nn.functional"
local util = require "ddplua.nn.util"

local AdaptiveAvgPool2d = Module:extend("AdaptiveAvgPool2d")

function AdaptiveAvgPool2d:__init(output_size)
  if type(output_size) == "table" then
    for i = 1, 2 do
      local v = output_size[i]
      if v ~= nil then util.check_int("AdaptiveAvgPool2d", "output_size", v) end
    end
    self.output_size = { output_size[1], output_size[2] }
  else
    self.output_size = util.check_int("AdaptiveAvgPool2d", "output_size", output_size)
  end
end

function AdaptiveAvgPool2d:forward(x)
  local s = self.output_size
  if type(s) == "table" then s = { s[1] or x:size(-2), s[2] or x:size(-1) } end
  return F.adaptive_avg_pool2d(x, s)
end

function AdaptiveAvgPool2d:extra_repr()
  local s = self.output_size
  if type(s) == "table" then return string.format("output_size=(%s, %s)", tostring(s[1] or "None"), tostring(s[2] or "None")) end
  return "output_size=" .. s
end

return AdaptiveAvgPool2d
