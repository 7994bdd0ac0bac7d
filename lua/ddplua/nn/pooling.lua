-- nn.MaxPool2d(kernel_size [, stride [, padding [, dilation [,
-- return_indices [, ceil_mode]]]]]) and nn.AvgPool2d(kernel_size [, stride
-- [, padding [, ceil_mode [, count_include_pad [, divisor_override]]]]]),
-- PyTorch's positional order, or (k, {stride=, padding=, ceil_mode=, ...}).
-- stride defaults to kernel_size; each is an integer or {h, w}. Max pooling
-- has no dilation or return_indices yet (errors when set); average pooling
-- divides by the window within the padded input (count_include_pad=true,
-- the default), by its positions inside the input (false), or by
-- divisor_override.
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
  if o.count_include_pad ~= nil and type(o.count_include_pad) ~= "boolean" then
    E.raise(string.format("%s: count_include_pad must be a boolean, got %s", name, tostring(o.count_include_pad)))
  end
  local d = o.divisor_override
  if d ~= nil and (math.type(d) ~= "integer" or d < 1) then
    E.raise(string.format("%s: divisor_override must be a positive integer, got %s", name, tostring(d)))
  end
end

local function pool(name, op)
  local cls = Module:extend(name)
  function cls:__init(kernel_size, ...)
    local o = util.args(name, SETTINGS[name], ...)
    check_unsupported(name, o)
    local kh, kw = util.check_pair(name, "kernel_size", kernel_size)
    local sh, sw = util.check_pair(name, "stride", o.stride == nil and kernel_size or o.stride)
    local ph, pw = util.check_pair(name, "padding", o.padding or 0, true)
    if ph * 2 > kh or pw * 2 > kw then
      E.raise(string.format("%s: padding (%d, %d) must be at most half the kernel size (%d, %d)", name, ph, pw, kh, kw))
    end
    if o.ceil_mode ~= nil and type(o.ceil_mode) ~= "boolean" then
      E.raise(string.format("%s: ceil_mode must be a boolean, got %s", name, tostring(o.ceil_mode)))
    end
    self.kernel_size, self.stride, self.padding = { kh, kw }, { sh, sw }, { ph, pw }
    self.ceil_mode = o.ceil_mode or false
    if name == "AvgPool2d" then
      self.count_include_pad = o.count_include_pad ~= false
      self.divisor_override = o.divisor_override
    end
    self._args = { util.pair_arg(kh, kw), util.pair_arg(sh, sw), util.pair_arg(ph, pw) }
  end
  function cls:forward(x)
    if x:dim() ~= 4 and x:dim() ~= 3 then
      E.raise(string.format("%s: expected input of shape [N, C, H, W] or [C, H, W], got %s", tostring(self),
        util.shape_str(x)))
    end
    local a = self._args
    if op == "max_pool2d" then return ddp.max_pool2d(x, a[1], a[2], a[3], 1, self.ceil_mode) end
    return ddp.avg_pool2d(x, a[1], a[2], a[3], self.ceil_mode, self.count_include_pad, self.divisor_override)
  end
  function cls:extra_repr()
    local k, s, p = self.kernel_size, self.stride, self.padding
    local r = string.format("kernel_size=(%d, %d), stride=(%d, %d), padding=(%d, %d)", k[1], k[2], s[1], s[2], p[1],
      p[2])
    if self.ceil_mode then r = r .. ", ceil_mode=True" end
    if self.count_include_pad == false then r = r .. ", count_include_pad=False" end
    if self.divisor_override then r = r .. ", divisor_override=" .. self.divisor_override end
    return r
  end
  M[name] = cls
end

pool("MaxPool2d", "max_pool2d")
pool("AvgPool2d", "avg_pool2d")

return M
