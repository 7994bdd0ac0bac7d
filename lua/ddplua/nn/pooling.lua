-- nn.MaxPool2d(kernel_size [, stride [, padding]]) and nn.AvgPool2d(...),
-- also written (k, {stride=, padding=}). stride defaults to kernel_size;
-- each is an integer or {h, w}.
local ddp = require "ddplua"
local Module = require "ddplua.nn.module"
local util = require "ddplua.nn.util"

local M = {}

local function pool(name, op)
  local cls = Module:extend(name)
  function cls:__init(kernel_size, stride, padding)
    if type(stride) == "table" and stride[1] == nil then -- an options table, not a {h, w} pair
      local opts = util.check_opts(name, stride, { "stride", "padding" })
      stride, padding = opts.stride, opts.padding
    end
    local kh, kw = util.check_pair(name, "kernel_size", kernel_size)
    local sh, sw = util.check_pair(name, "stride", stride == nil and kernel_size or stride)
    local ph, pw = util.check_pair(name, "padding", padding or 0, true)
    if ph * 2 > kh or pw * 2 > kw then
      error(string.format("%s: padding (%d, %d) must be at most half the kernel size (%d, %d)", name, ph, pw, kh, kw),
        3)
    end
    self.kernel_size, self.stride, self.padding = { kh, kw }, { sh, sw }, { ph, pw }
    self._args = { util.pair_arg(kh, kw), util.pair_arg(sh, sw), util.pair_arg(ph, pw) }
  end
  function cls:forward(x)
    if x:dim() ~= 4 then
      error(string.format("%s: expected input of shape [N, C, H, W], got %s", tostring(self), util.shape_str(x)), 2)
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
