-- nn.ConvTranspose2d(in_channels, out_channels, kernel_size [, stride [, padding [, output_padding [, groups [,
-- bias [, dilation [, padding_mode [, device [, dtype]]]]]]]]]), PyTorch's positional order, or the settings as one
-- options table {stride=1, padding=0, output_padding=0, groups=1, bias=true, dilation=1, ...}: NCHW (or unbatched
-- CHW) input, weight in x out/groups x kh x kw, PyTorch's default init (U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in =
-- out/groups * kh * kw, PyTorch's reading of that weight). The output is
-- (H - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1 a side; forward(x, output_size)
-- takes the size wanted instead ({h, w}, or with the leading dims), as PyTorch's, and derives output_padding from it.
-- output_padding must be below the stride (src/ops/conv_transpose.c); a padding_mode other than "zeros" is an error.
local ddp = require "ddplua"
local Module = require "ddplua.nn.module"
local util = require "ddplua.nn.util"
local init = require "ddplua.nn.initializers"
local E = require "ddplua.errors"

local ConvTranspose2d = Module:extend("ConvTranspose2d")

local SETTINGS = { "stride", "padding", "output_padding", "groups", "bias", "dilation", "padding_mode", "device",
  "dtype" }

function ConvTranspose2d:__init(in_channels, out_channels, kernel_size, ...)
  local who = "ConvTranspose2d"
  local opts = util.args(who, SETTINGS, ...)
  self.in_channels = util.check_int(who, "in_channels", in_channels)
  self.out_channels = util.check_int(who, "out_channels", out_channels)
  self.kernel_size = { util.check_pair(who, "kernel_size", kernel_size) }
  self.stride = { util.check_pair(who, "stride", opts.stride or 1) }
  self.padding = { util.check_pair(who, "padding", opts.padding or 0, true) }
  self.output_padding = { util.check_pair(who, "output_padding", opts.output_padding or 0, true) }
  self.dilation = { util.check_pair(who, "dilation", opts.dilation or 1) }
  self.groups = util.check_int(who, "groups", opts.groups or 1)
  if in_channels % self.groups ~= 0 or out_channels % self.groups ~= 0 then
    E.raise(string.format("%s: in_channels %d and out_channels %d must both be divisible by groups %d", who,
      in_channels, out_channels, self.groups))
  end
  for d = 1, 2 do
    if self.output_padding[d] >= self.stride[d] then
      E.raise(string.format("%s: output_padding (%d, %d) must be smaller than the stride (%d, %d)", who,
        self.output_padding[1], self.output_padding[2], self.stride[1], self.stride[2]))
    end
  end
  util.unsupported(who, "padding_mode", opts.padding_mode, "zeros", "only zero padding is implemented")
  if opts.bias ~= nil and type(opts.bias) ~= "boolean" then
    E.raise(who .. ": bias must be true or false, got " .. tostring(opts.bias))
  end
  local kh, kw = self.kernel_size[1], self.kernel_size[2]
  local opg = out_channels // self.groups
  local topts = util.tensor_opts(opts)
  self:register_parameter("weight", util.parameter(function()
    return init.kaiming_uniform_(ddp.empty(in_channels, opg, kh, kw, topts), math.sqrt(5))
  end))
  if opts.bias == false then
    self:register_parameter("bias", nil)
  else
    local bound = 1 / math.sqrt(opg * kh * kw)
    self:register_parameter("bias", util.parameter(function()
      return init.uniform_(ddp.empty(out_channels, topts), -bound, bound)
    end))
  end
end

function ConvTranspose2d:forward(x, output_size)
  if (x:dim() ~= 4 and x:dim() ~= 3) or x:size(-3) ~= self.in_channels then
    E.raise(string.format("%s: expected input of shape [N, %d, H, W] or [%d, H, W], got %s", tostring(self),
      self.in_channels, self.in_channels, util.shape_str(x)))
  end
  local op = util.transposed_output_padding(self, x, output_size, 2)
  return ddp.conv_transpose2d(x, self.weight, self.bias, util.pair_arg(self.stride[1], self.stride[2]),
    util.pair_arg(self.padding[1], self.padding[2]), util.pair_arg(op[1], op[2]), self.groups,
    util.pair_arg(self.dilation[1], self.dilation[2]))
end

function ConvTranspose2d:extra_repr()
  local s = string.format("%d, %d, kernel_size=(%d, %d), stride=(%d, %d)", self.in_channels, self.out_channels,
    self.kernel_size[1], self.kernel_size[2], self.stride[1], self.stride[2])
  if self.padding[1] ~= 0 or self.padding[2] ~= 0 then
    s = s .. string.format(", padding=(%d, %d)", self.padding[1], self.padding[2])
  end
  if self.dilation[1] ~= 1 or self.dilation[2] ~= 1 then -- (PyTorch's order: dilation, then output_padding)
    s = s .. string.format(", dilation=(%d, %d)", self.dilation[1], self.dilation[2])
  end
  if self.output_padding[1] ~= 0 or self.output_padding[2] ~= 0 then
    s = s .. string.format(", output_padding=(%d, %d)", self.output_padding[1], self.output_padding[2])
  end
  if self.groups ~= 1 then s = s .. string.format(", groups=%d", self.groups) end
  if self.bias == nil then s = s .. ", bias=False" end
  return s
end

return ConvTranspose2d
