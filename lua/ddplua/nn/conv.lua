-- nn.Conv2d(in_channels, out_channels, kernel_size [, stride [, padding [,
-- dilation [, groups [, bias [, padding_mode [, device [, dtype]]]]]]]]),
-- PyTorch's positional order, or the same settings as one options table
-- {stride=1, padding=0, dilation=1, groups=1, bias=true, ...}: NCHW (or
-- unbatched CHW) input, weight out x in/groups x kh x kw, PyTorch's default
-- init (U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = in/groups * kh * kw).
-- kernel_size, stride, padding and dilation are integers or {h, w}; padding
-- may also be "valid" (0) or "same" (stride 1, an even dilation * (kernel -
-- 1)). padding_mode "reflect", "replicate" or "circular" pads with F.pad first and convolves unpadded, as PyTorch.
local ddp = require "ddplua"
local Module = require "ddplua.nn.module"
local util = require "ddplua.nn.util"
local init = require "ddplua.nn.initializers"
local E = require "ddplua.errors"

local Conv2d = Module:extend("Conv2d")

local SETTINGS = { "stride", "padding", "dilation", "groups", "bias", "padding_mode", "device", "dtype" }

-- "valid" / "same" -> an explicit padding (PyTorch's string forms; "same" pads dilation * (kernel - 1) / 2 a side).
local function padding_of(padding, kernel, stride, dilation)
  if padding == "valid" then return 0 end
  if padding == "same" then
    local th, tw = dilation[1] * (kernel[1] - 1), dilation[2] * (kernel[2] - 1)
    if stride[1] ~= 1 or stride[2] ~= 1 or th % 2 ~= 0 or tw % 2 ~= 0 then
      E.raise("Conv2d: padding=\"same\" needs stride 1 and an even dilation * (kernel_size - 1) here, got stride (" ..
        table.concat(stride, ", ") .. "), kernel (" .. table.concat(kernel, ", ") .. ") and dilation (" ..
        table.concat(dilation, ", ") .. ")")
    end
    return { th // 2, tw // 2 }
  end
  if type(padding) == "string" then
    E.raise("Conv2d: padding must be an integer, {h, w}, \"valid\" or \"same\", got \"" .. padding .. "\"")
  end
  return padding or 0
end

function Conv2d:__init(in_channels, out_channels, kernel_size, ...)
  local opts = util.args("Conv2d", SETTINGS, ...)
  self.in_channels = util.check_int("Conv2d", "in_channels", in_channels)
  self.out_channels = util.check_int("Conv2d", "out_channels", out_channels)
  self.kernel_size = { util.check_pair("Conv2d", "kernel_size", kernel_size) }
  self.stride = { util.check_pair("Conv2d", "stride", opts.stride or 1) }
  self.dilation = { util.check_pair("Conv2d", "dilation", opts.dilation or 1) }
  self.padding = { util.check_pair("Conv2d", "padding",
    padding_of(opts.padding, self.kernel_size, self.stride, self.dilation), true) }
  self.groups = util.check_int("Conv2d", "groups", opts.groups or 1)
  if in_channels % self.groups ~= 0 or out_channels % self.groups ~= 0 then
    E.raise(string.format("Conv2d: in_channels %d and out_channels %d must both be divisible by groups %d",
      in_channels, out_channels, self.groups))
  end
  self.padding_mode = util.check_padding_mode("Conv2d", opts.padding_mode)
  if opts.bias ~= nil and type(opts.bias) ~= "boolean" then
    E.raise("Conv2d: bias must be true or false, got " .. tostring(opts.bias))
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
    E.raise(string.format("%s: expected input of shape [N, %d, H, W] or [%d, H, W], got %s", tostring(self),
      self.in_channels, self.in_channels, util.shape_str(x)))
  end
  if self.padding_mode ~= "zeros" and (self.padding[1] > 0 or self.padding[2] > 0) then
    local ph, pw = self.padding[1], self.padding[2]
    x = util.conv_mode_pad(x, { pw, pw, ph, ph }, self.padding_mode, x:dim() == 4)
    return ddp.conv2d(x, self.weight, self.bias, self._stride_arg, 0, self._dilation_arg, self.groups)
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
  if self.padding_mode ~= "zeros" then s = s .. ", padding_mode=" .. self.padding_mode end
  return s
end

return Conv2d
