-- nn.Conv2d(in_channels, out_channels, kernel_size, {stride=1, padding=0,
-- dilation=1, groups=1, bias=true, dtype=, device=}), or PyTorch's
-- positional order nn.Conv2d(in, out, k, stride, padding, dilation, groups,
-- bias): NCHW input, weight out x in/groups x kh x kw, PyTorch's default
-- init (U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = in/groups * kh * kw).
-- kernel_size, stride, padding and dilation are integers or {h, w}.
local ddp = require "ddplua"
local Module = require "ddplua.nn.module"
local util = require "ddplua.nn.util"
local init = require "ddplua.nn.initializers"

local Conv2d = Module:extend("Conv2d")

local POSITIONAL = { "stride", "padding", "dilation", "groups", "bias" }

function Conv2d:__init(in_channels, out_channels, kernel_size, opts, ...)
  if opts ~= nil and (type(opts) ~= "table" or opts[1] ~= nil) then -- PyTorch's positional arguments
    local args = { opts, ... }
    opts = {}
    for i, key in ipairs(POSITIONAL) do opts[key] = args[i] end
  end
  opts = util.check_opts("Conv2d", opts, { "stride", "padding", "dilation", "groups", "bias", "dtype", "device" })
  self.in_channels = util.check_int("Conv2d", "in_channels", in_channels)
  self.out_channels = util.check_int("Conv2d", "out_channels", out_channels)
  self.kernel_size = { util.check_pair("Conv2d", "kernel_size", kernel_size) }
  self.stride = { util.check_pair("Conv2d", "stride", opts.stride or 1) }
  self.padding = { util.check_pair("Conv2d", "padding", opts.padding or 0, true) }
  self.dilation = { util.check_pair("Conv2d", "dilation", opts.dilation or 1) }
  self.groups = util.check_int("Conv2d", "groups", opts.groups or 1)
  if in_channels % self.groups ~= 0 or out_channels % self.groups ~= 0 then
    error(string.format("Conv2d: in_channels %d and out_channels %d must both be divisible by groups %d", in_channels,
      out_channels, self.groups), 2)
  end
  local kh, kw = self.kernel_size[1], self.kernel_size[2]
  local cpg = in_channels // self.groups
  local topts = util.tensor_opts(opts)
  self:register_parameter("weight", util.parameter(function()
    return init.kaiming_uniform_(ddp.empty(out_channels, cpg, kh, kw, topts), math.sqrt(5))
  end))
  if opts.bias == false then
    self:register_parameter("bias", nil)
  else
    local bound = 1 / math.sqrt(cpg * kh * kw)
    self:register_parameter("bias", util.parameter(function()
      return init.uniform_(ddp.empty(out_channels, topts), -bound, bound)
    end))
  end
  self._stride_arg = util.pair_arg(self.stride[1], self.stride[2])
  self._padding_arg = util.pair_arg(self.padding[1], self.padding[2])
  self._dilation_arg = util.pair_arg(self.dilation[1], self.dilation[2])
end

function Conv2d:forward(x)
  if (x:dim() ~= 4 and x:dim() ~= 3) or x:size(-3) ~= self.in_channels then
    error(string.format("%s: expected input of shape [N, %d, H, W] or [%d, H, W], got %s", tostring(self),
      self.in_channels, self.in_channels, util.shape_str(x)), 2)
  end
  return ddp.conv2d(x, self.weight, self.bias, self._stride_arg, self._padding_arg, self._dilation_arg, self.groups)
end

function Conv2d:extra_repr()
  local s = string.format("%d, %d, kernel_size=(%d, %d), stride=(%d, %d)", self.in_channels, self.out_channels,
    self.kernel_size[1], self.kernel_size[2], self.stride[1], self.stride[2])
  if self.padding[1] ~= 0 or self.padding[2] ~= 0 then
    s = s .. string.format(", padding=(%d, %d)", self.padding[1], self.padding[2])
  end
  if self.dilation[1] ~= 1 or self.dilation[2] ~= 1 then
    s = s .. string.format(", dilation=(%d, %d)", self.dilation[1], self.dilation[2])
  end
  if self.groups ~= 1 then s = s .. string.format(", groups=%d", self.groups) end
  if self.bias == nil then s = s .. ", bias=False" end
  return s
end

return Conv2d
