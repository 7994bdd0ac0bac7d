-- F.unfold, F.fold, nn.Unfold, nn.Fold: an image's sliding blocks as columns and back (PyTorch's im2col and
-- col2im; the convolutions' own kernels, core.unfold2d and core.fold2d, each the other's gradient).
--
--   F.unfold(x, kernel_size [, dilation = 1 [, padding = 0 [, stride = 1]]])
--       x [N, C, H, W] or [C, H, W] -> [N, C * kh * kw, L] or [C * kh * kw, L], L = the blocks, row by row
--   F.fold(cols, output_size, kernel_size [, dilation = 1 [, padding = 0 [, stride = 1]]])
--       [N, C * kh * kw, L] or [C * kh * kw, L] -> [N, C, H, W] or [C, H, W], overlapping blocks summed
--   nn.Unfold(kernel_size, ...), nn.Fold(output_size, kernel_size, ...): the same settings
-- Each setting is an integer or {h, w}; after the positional ones an options table may name the rest:
-- F.unfold(x, 3, {padding = 1, stride = 2}). Blocks are counted as PyTorch counts them (1-based positions
-- play no part: the output is a layout).
local ddp = require "ddplua"
local Module = require "ddplua.nn.module"
local util = require "ddplua.nn.util"

local M = { modules = {}, F = {} }
local F = M.F
local SETTINGS = { "dilation", "padding", "stride" }

-- a setting checked as PyTorch's int-or-pair (padding may be 0), in the form core takes
local function setting(who, what, v, allow_zero)
  local h, w = util.check_pair(who, what, v, allow_zero)
  return util.pair_arg(h, w)
end

local function settings(who, o)
  return setting(who, "dilation", o.dilation or 1), setting(who, "padding", o.padding or 0, true),
    setting(who, "stride", o.stride or 1)
end

function F.unfold(x, kernel_size, ...)
  util.check_tensor("F.unfold", x)
  local d, p, s = settings("F.unfold", util.args("F.unfold", SETTINGS, ...))
  return ddp.core.unfold2d(x, setting("F.unfold", "kernel_size", kernel_size), d, p, s)
end

function F.fold(cols, output_size, kernel_size, ...)
  util.check_tensor("F.fold", cols)
  local d, p, s = settings("F.fold", util.args("F.fold", SETTINGS, ...))
  return ddp.core.fold2d(cols, setting("F.fold", "output_size", output_size), setting("F.fold", "kernel_size",
    kernel_size), d, p, s)
end

local function repr_value(v) return type(v) == "table" and util.py_tuple(v) or tostring(v) end

local Unfold = Module:extend("Unfold")
function Unfold:__init(kernel_size, ...)
  local o = util.args("Unfold", SETTINGS, ...)
  self.kernel_size, self.dilation, self.padding, self.stride = kernel_size, o.dilation or 1, o.padding or 0,
    o.stride or 1
  self._k = setting("Unfold", "kernel_size", kernel_size)
  self._d, self._p, self._s = settings("Unfold", o)
end
function Unfold:forward(x) return ddp.core.unfold2d(x, self._k, self._d, self._p, self._s) end
function Unfold:extra_repr()
  return string.format("kernel_size=%s, dilation=%s, padding=%s, stride=%s", repr_value(self.kernel_size),
    repr_value(self.dilation), repr_value(self.padding), repr_value(self.stride))
end
M.modules.Unfold = Unfold

local Fold = Module:extend("Fold")
function Fold:__init(output_size, kernel_size, ...)
  local o = util.args("Fold", SETTINGS, ...)
  self.output_size, self.kernel_size = output_size, kernel_size
  self.dilation, self.padding, self.stride = o.dilation or 1, o.padding or 0, o.stride or 1
  self._out = setting("Fold", "output_size", output_size)
  self._k = setting("Fold", "kernel_size", kernel_size)
  self._d, self._p, self._s = settings("Fold", o)
end
function Fold:forward(x) return ddp.core.fold2d(x, self._out, self._k, self._d, self._p, self._s) end
function Fold:extra_repr()
  return string.format("output_size=%s, kernel_size=%s, dilation=%s, padding=%s, stride=%s",
    repr_value(self.output_size), repr_value(self.kernel_size), repr_value(self.dilation), repr_value(self.padding),
    repr_value(self.stride))
end
M.modules.Fold = Fold

return M
