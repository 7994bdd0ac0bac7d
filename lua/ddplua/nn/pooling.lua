-- nn.MaxPool2d(kernel_size [, stride [, padding [, dilation [,
-- return_indices [, ceil_mode]]]]]) and nn.AvgPool2d(kernel_size [, stride
-- [, padding [, ceil_mode [, count_include_pad [, divisor_override]]]]]),
-- PyTorch's positional order, or (k, {stride=, padding=, ...}). stride
-- defaults to kernel_size; each is an integer or {h, w}. The ops have no
-- dilation, ceil_mode, return_indices or divisor_override yet (errors when
-- set); average pooling counts the padding (count_include_pad=true).
local ddp = require "ddplua"
local Module = require "ddplua.nn.module"
local util = require "ddplua.nn.util"
local E = require "ddplua.errors"

local M = {}

local SETTINGS = {
  MaxPool2d = { "stride", "padding", "dilation", "return_indices", "ceil_mode" },
  AvgPool2d = { "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override" },
}

local function check_unsupported(name, o)
  if o.dilation ~= nil and o.dilation ~= 1 and not (type(o.dilation) == "table" and o.dilation[1] == 1 and
      o.dilation[2] == 1) then
    E.raise(name .. ": dilation=" .. util.value_str(o.dilation) .. " is not supported yet; leave it at 1")
  end
  util.unsupported(name, "return_indices", o.return_indices, false, "the op returns the values only")
  util.unsupported(name, "ceil_mode", o.ceil_mode, false, "output sizes are rounded down")
  util.unsupported(name, "count_include_pad", o.count_include_pad, true, "the padding is always counted")
  util.unsupported(name, "divisor_override", o.divisor_override, nil, "the divisor is the window size")
end

local function pool(name, op)
  local cls = Module:extend(name)
  function cls:__init(kernel_size, ...)
    local o = util.args(name, SETTINGS[name], ...)
    check_unsupported(name, o)
    local stride, padding = o.stride, o.padding
    local kh, kw = util.check_pair(name, "kernel_size", kernel_size)
    local sh, sw = util.check_pair(name, "stride", stride == nil and kernel_size or stride)
    local ph, pw = util.check_pair(name, "padding", padding or 0, true)
    if ph * 2 > kh or pw * 2 > kw then
      E.raise(string.format("%s: padding (%d, %d) must be at most half the kernel size (%d, %d)", name, ph, pw, kh, kw))
    end
    self.kernel_size, self.stride, self.padding = { kh, kw }, { sh, sw }, { ph, pw }
    self._args = { util.pair_arg(kh, kw), util.pair_arg(sh, sw), util.pair_arg(ph, pw) }
  end
  function cls:forward(x)
    if x:dim() ~= 4 then
      E.raise(string.format("%s: expected input of shape [N, C, H, W], got %s", tostring(self), util.shape_str(x)))
    end
    local a = self._args
    return ddp[op](x, a[1], a[2], a[3])
  end
  function cls:extra_repr()
    local k, s, p = self.kernel_size, self.stride, self.padding
    return string.format("kernel_size=(%d, %d), stride=(%d, %d), padding=(%d, %d)", k[1], k[2], s[1], s[2], p[1],
      p[2])
  end
  M[name] = cls
end

pool("MaxPool2d", "max_pool2d")
pool("AvgPool2d", "avg_pool2d")

return M
