-- The 3-d pools, and the family of 3-d layers (volumes and video clips, [N, C, D, H, W] or unbatched [C, D, H, W]):
-- this file's pools beside nn/conv3d.lua's convolutions, which it brings into nn and nn.F.
--
--   nn.MaxPool3d(kernel_size [, stride [, padding [, dilation [, return_indices [, ceil_mode]]]]])
--   nn.AvgPool3d(kernel_size [, stride [, padding [, ceil_mode [, count_include_pad [, divisor_override]]]]])
--   nn.AdaptiveAvgPool3d(output_size), nn.AdaptiveMaxPool3d(output_size)
--   (PyTorch's positional order, or the settings after kernel_size as one options table)
--   F.max_pool3d(x, k [, stride = k [, padding [, dilation = 1 [, ceil_mode [, return_indices = false]]]]])
--   F.avg_pool3d(x, k [, stride = k [, padding [, ceil_mode [, count_include_pad = true [, divisor_override]]]]])
--   F.adaptive_avg_pool3d(x, output_size), F.adaptive_max_pool3d(x, output_size [, return_indices = false])
--
-- Sizes are integers or {d, h, w}; an adaptive output_size is n or {d, h, w}, where nil keeps that dim's size.
-- nn.BatchNorm3d (nn/batchnorm.lua), nn.InstanceNorm3d (nn/norm_more.lua), nn.Dropout3d (nn/dropout2d.lua) and
-- nn.ConstantPad3d / ReflectionPad3d / ReplicationPad3d (nn/padding.lua) live beside their 1-d and 2-d kin.
--
-- How: every 3-d window here is a box, and a max or a sum over a box is one over its height and width, then over
-- its depth; so each pool is the 2-d op over [N, C * D, H, W] (each depth slice a plane), then over [N, C, D,
-- Ho * Wo] with a {kd, 1} window. Each axis's window bounds, ceil_mode and padding are PyTorch's per axis, and its
-- divisors are products of per-axis counts (count_include_pad either way), so the two passes divide as PyTorch
-- does; with divisor_override the first pass sums and the second divides. Gradients are the 2-d ops' own; among
-- equal values in a max window the gradient goes to the first in depth, then height, then width order, as PyTorch.
-- Averages round twice (the two passes) where PyTorch's round once: within float32's rounding of the same sum.
-- Differences from PyTorch: return_indices and dilation other than 1 are errors saying so.
local ddp = require "ddplua"
local Module = require "ddplua.nn.module"
local util = require "ddplua.nn.util"
local E = require "ddplua.errors"
local conv3d = require "ddplua.nn.conv3d"
local adaptive_more = require "ddplua.nn.adaptive_more"

local M = { modules = {}, F = {} }
local F = M.F
for k, v in pairs(conv3d.modules) do M.modules[k] = v end
for k, v in pairs(conv3d.F) do F[k] = v end
local triple = conv3d.triple

local function check_input(who, x)
  if not ddp.is_tensor(x) or (x:dim() ~= 4 and x:dim() ~= 5) then
    E.raise(string.format("%s: expected an input of shape [N, C, D, H, W] or [C, D, H, W], got %s", who,
      ddp.is_tensor(x) and util.shape_str(x) or type(x)))
  end
  for d = x:dim() - 2, x:dim() do
    if x:size(d) < 1 then
      E.raise(string.format("%s: expected a non-empty input in its depth, height and width, got shape %s", who,
        util.shape_str(x)))
    end
  end
end

local function check_flag(who, what, v)
  if v ~= nil and type(v) ~= "boolean" then
    E.raise(string.format("%s: %s must be a boolean, got %s", who, what, tostring(v)))
  end
  return v
end

-- the settings of a 3-d pool, checked: kernel, stride and padding as lists of 3
local function geometry(who, k, stride, padding, dilation, return_indices)
  k = triple(who, "kernel_size", k)
  stride = triple(who, "stride", stride == nil and k or stride)
  padding = triple(who, "padding", padding or 0, true)
  if dilation ~= nil then
    local d = triple(who, "dilation", dilation)
    if d[1] ~= 1 or d[2] ~= 1 or d[3] ~= 1 then
      E.raise(who .. ": dilation=" .. util.value_str(dilation) .. " is not supported yet; leave it at 1")
    end
  end
  util.unsupported(who, "return_indices", return_indices, false, "the pool returns its values only")
  for i = 1, 3 do
    if padding[i] * 2 > k[i] then
      E.raise(string.format("%s: padding %s must be at most half the kernel size %s", who, util.py_tuple(padding),
        util.py_tuple(k)))
    end
  end
  return k, stride, padding
end

local function check_fits(who, x, k, padding)
  local names = { "depth", "height", "width" }
  for i = 1, 3 do
    local size = x:size(x:dim() - 3 + i)
    if size + 2 * padding[i] < k[i] then
      E.raise(string.format("%s: kernel size %d does not fit the input %s %d padded by %d (input shape %s)", who,
        k[i], names[i], size, padding[i], util.shape_str(x)))
    end
  end
end

-- the two passes: plane(x as [N, C * D, H, W]) -> [N, C * D, Ho, Wo]; depth(that as [N, C, D, Ho * Wo]) ->
-- [N, C, Do, Ho * Wo]; the result [N, C, Do, Ho, Wo] (unbatched in, unbatched out)
local function two_passes(x, plane, depth)
  local xb = x:dim() == 4 and x:unsqueeze(1) or x
  local N, C, D = xb:size(1), xb:size(2), xb:size(3)
  local y = plane(xb:reshape(N, C * D, xb:size(4), xb:size(5)))
  local Ho, Wo = y:size(3), y:size(4)
  y = depth(y:view(N, C, D, Ho * Wo))
  y = y:view(N, C, y:size(3), Ho, Wo)
  return x:dim() == 4 and y:squeeze(1) or y
end

local function max_pool3d(who, x, k, s, p, ceil_mode)
  check_input(who, x)
  check_fits(who, x, k, p)
  return two_passes(x,
    function(t) return ddp.max_pool2d(t, { k[2], k[3] }, { s[2], s[3] }, { p[2], p[3] }, 1, ceil_mode) end,
    function(t) return ddp.max_pool2d(t, { k[1], 1 }, { s[1], 1 }, { p[1], 0 }, 1, ceil_mode) end)
end

local function avg_pool3d(who, x, k, s, p, ceil_mode, count_include_pad, divisor_override)
  check_input(who, x)
  check_fits(who, x, k, p)
  return two_passes(x,
    function(t)
      return ddp.avg_pool2d(t, { k[2], k[3] }, { s[2], s[3] }, { p[2], p[3] }, ceil_mode, count_include_pad,
        divisor_override and 1 or nil)
    end,
    function(t)
      return ddp.avg_pool2d(t, { k[1], 1 }, { s[1], 1 }, { p[1], 0 }, ceil_mode, count_include_pad, divisor_override)
    end)
end

local function check_divisor(who, d)
  if d ~= nil and (math.type(d) ~= "integer" or d < 1) then
    E.raise(string.format("%s: divisor_override must be a positive integer, got %s", who, tostring(d)))
  end
  return d
end

--- F.max_pool3d(x, k [, stride = k [, padding = 0 [, dilation = 1 [, ceil_mode = false [, return_indices]]]]])
function F.max_pool3d(x, k, stride, padding, dilation, ceil_mode, return_indices)
  local who = "max_pool3d"
  local kk, s, p = geometry(who, k, stride, padding, dilation, return_indices)
  return max_pool3d(who, x, kk, s, p, check_flag(who, "ceil_mode", ceil_mode) or false)
end

--- F.avg_pool3d(x, k [, stride = k [, padding = 0 [, ceil_mode = false [, count_include_pad = true [,
--- divisor_override]]]]])
function F.avg_pool3d(x, k, stride, padding, ceil_mode, count_include_pad, divisor_override)
  local who = "avg_pool3d"
  local kk, s, p = geometry(who, k, stride, padding)
  return avg_pool3d(who, x, kk, s, p, check_flag(who, "ceil_mode", ceil_mode) or false,
    check_flag(who, "count_include_pad", count_include_pad) ~= false, check_divisor(who, divisor_override))
end

-- output_size n or {d, h, w} (nil keeps the input's size) -> the list of 3
local function adaptive_sizes(who, output_size, x)
  local s = {}
  if type(output_size) == "table" and getmetatable(output_size) == nil then
    for i = 1, 3 do
      local v = output_size[i]
      s[i] = v == nil and x:size(x:dim() - 3 + i) or util.check_int(who, "output_size", v)
    end
    for key in pairs(output_size) do
      if math.type(key) ~= "integer" or key < 1 or key > 3 then
        E.raise(string.format("%s: output_size must be an integer or {d, h, w}, got a table with key %s", who,
          tostring(key)))
      end
    end
  else
    local v = util.check_int(who, "output_size", output_size)
    s = { v, v, v }
  end
  util.check_output_alloc(who, x, s)
  return s
end

--- F.adaptive_avg_pool3d(x, output_size)
function F.adaptive_avg_pool3d(x, output_size)
  local who = "adaptive_avg_pool3d"
  check_input(who, x)
  local s = adaptive_sizes(who, output_size, x)
  return two_passes(x, function(t) return ddp.core.adaptive_avg_pool2d(t, { s[2], s[3] }) end,
    function(t) return ddp.core.adaptive_avg_pool2d(t, { s[1], t:size(4) }) end)
end

--- F.adaptive_max_pool3d(x, output_size [, return_indices = false])
function F.adaptive_max_pool3d(x, output_size, return_indices)
  local who = "adaptive_max_pool3d"
  util.unsupported(who, "return_indices", return_indices, false, "the pool returns its values only")
  check_input(who, x)
  local s = adaptive_sizes(who, output_size, x)
  local amp = adaptive_more.F.adaptive_max_pool2d
  return two_passes(x, function(t) return amp(t, { s[2], s[3] }) end,
    function(t) return amp(t, { s[1], t:size(4) }) end)
end

-- ---- modules ----------------------------------------------------------------------------------------------------

-- a size as PyTorch prints it: 2, or (1, 2, 2)
local function size_repr(v)
  if type(v) == "table" then return util.py_tuple(v) end
  return tostring(v)
end

local MaxPool3d = Module:extend("MaxPool3d")
M.modules.MaxPool3d = MaxPool3d

function MaxPool3d:__init(kernel_size, ...)
  local who = "MaxPool3d"
  local o = util.args(who, { "stride", "padding", "dilation", "return_indices", "ceil_mode" }, ...)
  self._k, self._s, self._p = geometry(who, kernel_size, o.stride, o.padding, o.dilation, o.return_indices)
  self.kernel_size, self.stride, self.padding = kernel_size, o.stride == nil and kernel_size or o.stride,
    o.padding or 0
  self.dilation, self.return_indices = o.dilation or 1, false
  self.ceil_mode = check_flag(who, "ceil_mode", o.ceil_mode) or false
end

function MaxPool3d:forward(x)
  return max_pool3d(tostring(self), x, self._k, self._s, self._p, self.ceil_mode)
end

function MaxPool3d:extra_repr()
  return string.format("kernel_size=%s, stride=%s, padding=%s, dilation=%s, ceil_mode=%s", size_repr(self.kernel_size),
    size_repr(self.stride), size_repr(self.padding), size_repr(self.dilation), self.ceil_mode and "True" or "False")
end

local AvgPool3d = Module:extend("AvgPool3d")
M.modules.AvgPool3d = AvgPool3d

function AvgPool3d:__init(kernel_size, ...)
  local who = "AvgPool3d"
  local o = util.args(who, { "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override" }, ...)
  self._k, self._s, self._p = geometry(who, kernel_size, o.stride, o.padding)
  self.kernel_size, self.stride, self.padding = kernel_size, o.stride == nil and kernel_size or o.stride,
    o.padding or 0
  self.ceil_mode = check_flag(who, "ceil_mode", o.ceil_mode) or false
  self.count_include_pad = check_flag(who, "count_include_pad", o.count_include_pad) ~= false
  self.divisor_override = check_divisor(who, o.divisor_override)
end

function AvgPool3d:forward(x)
  return avg_pool3d(tostring(self), x, self._k, self._s, self._p, self.ceil_mode, self.count_include_pad,
    self.divisor_override)
end

-- PyTorch's AvgPool3d shows its sizes only
function AvgPool3d:extra_repr()
  return string.format("kernel_size=%s, stride=%s, padding=%s", size_repr(self.kernel_size), size_repr(self.stride),
    size_repr(self.padding))
end

local function adaptive_module(name, fn, settings)
  local cls = Module:extend(name)
  function cls:__init(output_size, ...)
    local o = util.args(name, settings, ...)
    util.unsupported(name, "return_indices", o.return_indices, false, "the pool returns its values only")
    if type(output_size) == "table" then
      for i = 1, 3 do
        if output_size[i] ~= nil then util.check_int(name, "output_size", output_size[i]) end
      end
      self.output_size = { output_size[1], output_size[2], output_size[3] }
    else
      self.output_size = util.check_int(name, "output_size", output_size)
    end
  end
  function cls:forward(x) return fn(x, self.output_size) end
  function cls:extra_repr()
    local s = self.output_size
    if type(s) == "table" then
      return string.format("output_size=(%s, %s, %s)", tostring(s[1] or "None"), tostring(s[2] or "None"),
        tostring(s[3] or "None"))
    end
    return "output_size=" .. s
  end
  M.modules[name] = cls
end

adaptive_module("AdaptiveAvgPool3d", F.adaptive_avg_pool3d, {})
adaptive_module("AdaptiveMaxPool3d", F.adaptive_max_pool3d, { "return_indices" })

return M
