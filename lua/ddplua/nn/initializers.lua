-- nn.init: in-place initialisers drawing from ddplua's Philox generator
-- (ddp.manual_seed makes them reproducible on every device).
local ddp = require "ddplua"
local E = require "ddplua.errors"

local M = {}

local function fill_from(t, src)
  ddp.no_grad(function() t:copy_(src) end)
  return t
end

--- U(a, b)
function M.uniform_(t, a, b)
  a, b = a or 0, b or 1
  return fill_from(t, ddp.rand(t:size(), { dtype = t:dtype(), device = t:device() }) * (b - a) + a)
end

--- N(mean, std^2)
function M.normal_(t, mean, std)
  mean, std = mean or 0, std or 1
  return fill_from(t, ddp.randn(t:size(), { dtype = t:dtype(), device = t:device() }) * std + mean)
end

function M.constant_(t, v)
  ddp.no_grad(function() t:fill_(v) end)
  return t
end
function M.zeros_(t) return M.constant_(t, 0) end
function M.ones_(t) return M.constant_(t, 1) end

--- fan_in of a Linear (out x in) or Conv (out x in x kh x kw) weight.
function M.fan_in(t)
  if t:dim() < 2 then E.raise("fan_in: expected a tensor with at least 2 dimensions, got " .. t:dim()) end
  return t:numel() // t:size(1)
end

--- Kaiming (He) uniform, PyTorch's leaky_relu gain with slope a:
--- bound = sqrt(3) * sqrt(2 / (1 + a^2)) / sqrt(fan_in). a = sqrt(5), the
--- Linear/Conv default, gives bound = 1 / sqrt(fan_in).
function M.kaiming_uniform_(t, a)
  a = a or 0
  local bound = math.sqrt(3) * math.sqrt(2 / (1 + a * a)) / math.sqrt(M.fan_in(t))
  return M.uniform_(t, -bound, bound)
end

return M
