-- nn.Conv2d(in_channels, out_channels, kernel_size [, stride [, padding [,
-- dilation [, groups [, bias [, padding_mode [, device [, dtype]]]]]]]]),
-- PyTorch's positional order, or the same settings as one options table
-- {stride=1, padding=0, bias=true, ...}: NCHW input, weight out x in x kh x
-- kw, PyTorch's default init (U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in =
-- in * kh * kw). kernel_size, stride and padding are integers or {h, w};
-- padding may also be "valid" (0) or "same" (stride 1, odd kernel). The op
-- has no dilation or groups yet: values other than 1 are errors saying so,
-- as is a padding_mode other than "zeros".
local ddp = require "ddplua"
local Module = require "ddplua.nn.module"
local util = require "ddplua.nn.util"
local init = require "ddplua.nn.initializers"
local E = require "ddplua.errors"

local Conv2d = Module:extend("Conv2d")

local SETTINGS = { "stride", "padding", "dilation", "groups", "bias", "padding_mode", "device", "dtype" }

-- "valid" / "same" -> an explicit padding (PyTorch's string forms).
local function padding_of(padding, kernel, stride)
  if padding == "valid" then return 0 end
  if padding == "same" then
    if stride[1] ~= 1 or stride[2] ~= 1 or kernel[1] % 2 == 0 or kernel[2] % 2 == 0 then
      E.raise("Conv2d: padding=\"same\" needs stride 1 and an odd kernel size here, got stride (" ..
        table.concat(stride, ", ") .. ") and kernel (" .. table.concat(kernel, ", ") .. ")")
    end
    return { kernel[1] // 2, kernel[2] // 2 }
  end
  if type(padding) == "string" then
    E.raise("Conv2d: padding must be an integer, {h, w}, \"valid\" or \"same\", got \"" .. padding .. "\"")
  end
  return padding or 0
end

local function is_one(v) return v == nil or v == 1 or (type(v) == "table" and v[1] == 1 and v[2] == 1 and #v == 2) end

function Conv2d:__init(in_channels, out_channels, kernel_size, ...)
  local opts = util.args("Conv2d", SETTINGS, ...)
  self.in_channels = util.check_int("Conv2d", "in_channels", in_channels)
  self.out_channels = util.check_int("Conv2d", "out_channels", out_channels)
  self.kernel_size = { util.check_pair("Conv2d", "kernel_size", kernel_size) }
  self.stride = { util.check_pair("Conv2d", "stride", opts.stride or 1) }
  self.padding = { util.check_pair("Conv2d", "padding", padding_of(opts.padding, self.kernel_size, self.stride), true) }
  if not is_one(opts.dilation) then
    E.raise("Conv2d: dilation=" .. util.value_str(opts.dilation) .. " is not supported yet (the conv2d op has no " ..
      "dilation); leave it at 1")
  end
  if not is_one(opts.groups) then
    E.raise("Conv2d: groups=" .. util.value_str(opts.groups) .. " is not supported yet (the conv2d op has no " ..
      "groups); leave it at 1")
  end
  util.unsupported("Conv2d", "padding_mode", opts.padding_mode, "zeros", "only zero padding is implemented")
  if opts.bias ~= nil and type(opts.bias) ~= "boolean" then
    E.raise("Conv2d: bias must be true or false, got " .. tostring(opts.bias))
  end
  self.dilation, self.groups = { 1, 1 }, 1
  local kh, kw = self.kernel_size[1], self.kernel_size[2]
  local topts = util.tensor_opts(opts)
  self:register_parameter("weight", util.parameter(function()
    return init.kaiming_uniform_(ddp.empty(out_channels, in_channels, kh, kw, topts), math.sqrt(5))
  end))
  if opts.bias == false then
    self:register_parameter("bias", nil)
  else
    local bound = 1 / math.sqrt(in_channels * kh * kw)
    self:register_parameter("bias", util.parameter(function()
      return init.uniform_(ddp.empty(out_channels, topts), -bound, bound)
    end))
  end
  self._stride_arg = util.pair_arg(self.stride[1], self.stride[2])
  self._padding_arg = util.pair_arg(self.padding[1], self.padding[2])
end

function Conv2d:forward(x)
  if x:dim() ~= 4 or x:size(2) ~= self.in_channels then
    E.raise(string.format("%s: expected input of shape [N, %d, H, W], got %s", tostring(self), self.in_channels,
      util.shape_str(x)))
  end
  return ddp.conv2d(x, self.weight, self.bias, self._stride_arg, self._padding_arg)
end

function Conv2d:extra_repr()
  local s = string.format("%d, %d, kernel_size=(%d, %d), stride=(%d, %d)", self.in_channels, self.out_channels,
    self.kernel_size[1], self.kernel_size[2], self.stride[1], self.stride[2])
  if self.padding[1] ~= 0 or self.padding[2] ~= 0 then
    s = s .. string.format(", padding=(%d, %d)", self.padding[1], self.padding[2])
  end
  if self.bias == nil then s = s .. ", bias=False" end
  return s
end

return Conv2d
