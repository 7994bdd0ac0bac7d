-- nn.MaxPool2d(kernel_size [, stride [, padding [, dilation [, return_indices [, ceil_mode]]]]]) and
-- nn.AvgPool2d(kernel_size [, stride [, padding [, ceil_mode [, count_include_pad]]]]) in PyTorch's positional
-- order, also written (k, {stride=, padding=, ceil_mode=}). stride defaults to kernel_size; each size is an
-- integer or {h, w}. What is not implemented (dilation other than 1, return_indices, count_include_pad=false) is
-- an error naming it.
local ddp = require "ddplua"
local Module = require "ddplua.nn.module"
local util = require "ddplua.nn.util"

local M = {}

local POSITIONAL = {
  MaxPool2d = { "stride", "padding", "dilation", "return_indices", "ceil_mode" },
  AvgPool2d = { "stride", "padding", "ceil_mode", "count_include_pad" },
}

local function pool(name, op)
  local cls = Module:extend(name)
  function cls:__init(kernel_size, stride, ...)
    local opts
    if type(stride) == "table" and stride[1] == nil then -- an options table, not a {h, w} pair
      opts = util.check_opts(name, stride, { "stride", "padding", "ceil_mode" })
    else
      opts = {}
      local args = { stride, ... }
      for i, key in ipairs(POSITIONAL[name]) do opts[key] = args[i] end
    end
    local function unsupported(key, ok)
      if not ok then error(string.format("%s: %s=%s is not supported", name, key, tostring(opts[key])), 3) end
    end
    unsupported("dilation", opts.dilation == nil or opts.dilation == 1)
    unsupported("return_indices", not opts.return_indices)
    unsupported("count_include_pad", opts.count_include_pad == nil or opts.count_include_pad == true)
    local kh, kw = util.check_pair(name, "kernel_size", kernel_size)
    local sh, sw = util.check_pair(name, "stride", opts.stride == nil and kernel_size or opts.stride)
    local ph, pw = util.check_pair(name, "padding", opts.padding or 0, true)
    if ph * 2 > kh or pw * 2 > kw then
      error(string.format("%s: padding (%d, %d) must be at most half the kernel size (%d, %d)", name, ph, pw, kh, kw),
        3)
    end
    if opts.ceil_mode ~= nil and type(opts.ceil_mode) ~= "boolean" then
      error(string.format("%s: ceil_mode must be a boolean, got %s", name, tostring(opts.ceil_mode)), 3)
    end
    self.kernel_size, self.stride, self.padding = { kh, kw }, { sh, sw }, { ph, pw }
    self.ceil_mode = opts.ceil_mode or false
    self._args = { util.pair_arg(kh, kw), util.pair_arg(sh, sw), util.pair_arg(ph, pw) }
  end
  function cls:forward(x)
    if x:dim() ~= 4 and x:dim() ~= 3 then
      error(string.format("%s: expected input of shape [N, C, H, W] or [C, H, W], got %s", tostring(self),
        util.shape_str(x)), 2)
    end
    local a = self._args
    if op == "max_pool2d" then return ddp.max_pool2d(x, a[1], a[2], a[3], 1, self.ceil_mode) end
    return ddp.avg_pool2d(x, a[1], a[2], a[3], self.ceil_mode)
  end
  function cls:extra_repr()
    local k, s, p = self.kernel_size, self.stride, self.padding
    local r = string.format("kernel_size=(%d, %d), stride=(%d, %d), padding=(%d, %d)", k[1], k[2], s[1], s[2], p[1],
      p[2])
    if self.ceil_mode then r = r .. ", ceil_mode=True" end
    return r
  end
  M[name] = cls
end

pool("MaxPool2d", "max_pool2d")
pool("AvgPool2d", "avg_pool2d")

return M
