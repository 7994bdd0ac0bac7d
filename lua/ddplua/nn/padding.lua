-- Padding, composed from index maps so autograd runs through one kernel each way (F.pad's last two dims on the
-- CPU in float32 / float64: core.plane_gather, src/backends/cpu/cpu_plane_gather.c) or through narrow, cat and
-- index_select per dim elsewhere:
--
--   F.pad(x, pad, mode, value): pad = {left, right [, top, bottom [, front, back]]} (the last dim first, as
--     PyTorch's); "constant" (any rank; negative pads crop; an empty padded dim refused when some pad is positive,
--     as PyTorch 1.13), "reflect" and "replicate" (the last dim of a 2-D/3-D input, the last two of a 3-D/4-D
--     one or the last three of a 4-D/5-D one, as PyTorch 1.13), "circular" (the spatial dims of a batched
--     [N, C, ...] input, as PyTorch 1.13; negative pads crop first). Each padded dim becomes a map of source
--     positions, kept for the sizes seen last.
--   nn.ZeroPad2d, nn.ConstantPad1d/2d/3d(padding, value), nn.ReflectionPad1d/2d/3d, nn.ReplicationPad1d/2d/3d.
--
-- Differences from PyTorch: reflect and replicate padding also take integer tensors (PyTorch's kernels are
-- floating-point only); the modules check their settings when constructed.
local ddp = require "ddplua"
local Module = require "ddplua.nn.module"
local util = require "ddplua.nn.util"
local E = require "ddplua.errors"

local M = { modules = {}, F = {} }
local F = M.F
local shape_str, py_num, py_tuple, list_str = util.shape_str, util.py_num, util.py_tuple, util.list_str
local check_tensor, is_list = util.check_tensor, util.is_list

local PAD_MODES = { constant = true, reflect = true, replicate = true, circular = true }

-- Each padding mode as a map of dim d: an int64 tensor of the 1-based positions of x along d for the output's
-- positions, 0 where the fill value goes (constant), made in one pass by core._pad_positions (a Lua list of them
-- took ~0.1 s a million positions, the first call of every new size: a long 1-D signal paid it each time its
-- length changed); with `first` and `last`, the output range whose positions are not 0. nil when
-- the dim is unchanged. The maps drive one index_select per dim, or core.plane_gather for the last two dims at
-- once (src/backends/cpu/cpu_plane_gather.c: one pass each way).

-- The maps of the settings seen last (a model pads the same sizes every step), each built once: at most 256 maps or
-- 64 MiB of them (a long signal's map is 8 bytes a position), then the cache starts over. A map is never changed
-- once built.
local MAPS, n_maps, map_bytes = {}, 0, 0
local pad_positions = ddp.core._pad_positions
local function memo_map(mode, n, l, r, start)
  local key = string.format("%s %d %d %d %d", mode, n, l, r, start or 0)
  local m = MAPS[key]
  if not m then
    local t, first, last = pad_positions(mode, n, l, r, start)
    if n_maps >= 256 or map_bytes + 8 * t:numel() > 64 * 1024 * 1024 then MAPS, n_maps, map_bytes = {}, 0, 0 end
    m = { t = t, first = first, last = last }
    MAPS[key], n_maps, map_bytes = m, n_maps + 1, map_bytes + 8 * t:numel()
  end
  return m
end

-- reflect / replicate padding of dim d by (l, r)
local function index_pad_map(who, x, d, l, r, mode)
  local n = x:size(d)
  local out = n + l + r
  if mode == "reflect" and (l >= n or r >= n) then
    E.raise(string.format("%s: reflect padding (%d, %d) must be less than the input size %d in dimension %d of the " ..
      "input %s (Padding size should be less than the corresponding input dimension)", who, l, r, n, d, shape_str(x)))
  end
  if out < 1 then
    E.raise(string.format("%s: the input size %d in dimension %d of the input %s is too small for the padding " ..
      "(%d, %d): the output size would be %d", who, n, d, shape_str(x), l, r, out))
  end
  if l == 0 and r == 0 then return nil end
  return memo_map(mode, n, l, r)
end

-- circular padding of dim d by (l, r): negative amounts crop first, then each side wraps around the rest once at
-- most (PyTorch 1.13's order: [0 1 2 3 4] by (-1, 2) is [1 2 3 4 1 2])
local function circular_map(who, x, d, l, r)
  local n, start = x:size(d), 0
  if l < 0 or r < 0 then
    local keep = n - math.max(0, -l) - math.max(0, -r)
    if keep < 1 then
      E.raise(string.format("%s: the padding (%d, %d) crops all of dimension %d of the input %s", who, l, r, d,
        shape_str(x)))
    end
    start, n = math.max(0, -l), keep
    l, r = math.max(l, 0), math.max(r, 0)
  end
  if l > n or r > n then
    E.raise(string.format("%s: circular padding (%d, %d) wraps around more than once: at most the size %d of " ..
      "dimension %d of the input %s", who, l, r, n, d, shape_str(x)))
  end
  if l == 0 and r == 0 and start == 0 and n == x:size(d) then return nil end
  return memo_map("circular", n, l, r, start)
end

-- constant padding of dim d by (l, r); negative amounts crop. grows: some pad of the call is positive, where
-- PyTorch 1.13 refuses any padded dim whose result is empty (a crop alone may empty one)
local function constant_map(who, x, d, l, r, grows)
  local n = x:size(d)
  local keep = n - math.max(0, -l) - math.max(0, -r)
  if n + l + r < 0 or keep < 0 or (grows and n + l + r == 0) then
    E.raise(string.format("%s: the input size %d plus the padding %d and %d gives a%s output size in " ..
      "dimension %d of the input %s", who, n, l, r, n + l + r < 0 and " negative" or "n empty", d, shape_str(x)) ..
      (n + l + r == 0 and " (an empty result only where no pad is positive, as PyTorch 1.13)" or ""))
  end
  if l == 0 and r == 0 then return nil end
  return memo_map("constant", n, l, r)
end

-- a map applied along dim d without plane_gather: index_select, or for a constant map the kept range and the
-- fill blocks around it joined by cat
local function apply_map(x, d, map, value)
  local first, last, len = map.first, map.last, map.t:numel()
  if value == nil or (first == 1 and last == len) then return x:index_select(d, map.t) end
  local parts = {}
  local function block(k)
    local s = x:size()
    s[d] = k
    parts[#parts + 1] = ddp.full(s, value, { dtype = x:dtype(), device = x:device() })
  end
  if not first then
    block(len)
    return len > 0 and ddp.cat(parts, d) or x:narrow(d, 1, 0)
  end
  if first > 1 then block(first - 1) end
  parts[#parts + 1] = x:narrow(d, map.t[first]:item(), last - first + 1)
  if last < len then block(len - last) end
  return ddp.cat(parts, d)
end

local plane_gather = ddp.core.plane_gather
local IDENTITY = setmetatable({}, { __mode = "v" }) -- n -> the int64 positions 1 .. n, while in use
-- the int64 tensor of a map (nil: the identity of n positions)
local function positions(map, n)
  if map then return map.t end
  local t = IDENTITY[n]
  if not t then
    t = ddp.arange(1, n + 1, 1, { dtype = "int64" })
    IDENTITY[n] = t
  end
  return t
end

-- x with the maps of its last dims applied (maps[k] for dim nd - k + 1; value: the constant fill, nil for the
-- index modes): one core.plane_gather for the last two on the CPU in float32 / float64, else one op per dim
local function apply_maps(x, maps, k_dims, value)
  local nd, dt = x:dim(), x:dtype()
  if k_dims <= 2 and nd >= 2 and x:device() == "cpu" and (dt == "float32" or dt == "float64") then
    if not maps[1] and not maps[2] then return x:clone() end
    return plane_gather(x, positions(maps[2], x:size(nd - 1)), positions(maps[1], x:size(nd)), value or 0)
  end
  local y = x
  for k = 1, k_dims do
    if maps[k] then y = apply_map(y, nd - k + 1, maps[k], value) end
  end
  if y == x then y = x:clone() end -- PyTorch returns a new tensor even when nothing changes
  return y
end

local function pad(who, x, p, mode, value)
  check_tensor(who, x)
  mode = mode == nil and "constant" or mode
  if not PAD_MODES[mode] then
    E.raise(string.format("%s: unknown padding mode %s (expected 'constant', 'reflect', 'replicate' or " ..
      "'circular')", who, type(mode) == "string" and ("'" .. mode .. "'") or tostring(mode)))
  end
  if not is_list(p) then
    E.raise(string.format("%s: pad must be a list {left, right [, top, bottom [, front, back]]}, got %s", who,
      type(p)))
  end
  for i = 1, #p do
    if math.type(p[i]) ~= "integer" then
      E.raise(string.format("%s: pad must hold integers, got %s at position %d", who, tostring(p[i]), i))
    end
  end
  local nd, np = x:dim(), #p
  if np % 2 ~= 0 then
    E.raise(string.format("%s: the pad list must have an even length (a pair per dimension), got %d values", who, np))
  end
  if np > 2 * nd then
    E.raise(string.format("%s: %d pad values pad %d dimensions, but the input %s has %d", who, np, np // 2,
      shape_str(x), nd))
  end
  if value ~= nil and type(value) ~= "number" then
    E.raise(string.format("%s: value must be a number, got %s", who, tostring(value)))
  end
  local maps, k_dims = {}, np // 2
  -- the padded sizes before any map is built: a map holds a Lua entry per output position, so a pad of 2^40 looped
  -- until killed, and one of math.maxinteger on each side wrapped the size around to a small, wrong one
  local sizes = {}
  for k = 1, k_dims do
    local n, l, r = x:size(nd - k + 1), p[2 * k - 1], p[2 * k]
    local f = n + (l + 0.0) + r
    if f > 2 ^ 59 or f < -2 ^ 59 then
      E.raise(string.format("%s: the input size %d plus the padding %d and %d gives a%s output size in dimension %d " ..
        "of the input %s%s", who, n, l, r, f > 0 and "n" or " negative", nd - k + 1, shape_str(x),
        f > 0 and " (more than 2^59)" or ""))
    end
    sizes[k_dims - k + 1] = math.max(n + l + r, 0) -- exact: the sum fits an integer (an overflow of l + r wraps back)
  end
  util.check_output_alloc(who, x, sizes)
  if mode == "constant" then
    local grows = false
    for i = 1, np do grows = grows or p[i] > 0 end
    for k = 1, k_dims do maps[k] = constant_map(who, x, nd - k + 1, p[2 * k - 1], p[2 * k], grows) end
    return apply_maps(x, maps, k_dims, value or 0)
  end
  if value ~= nil and value ~= 0 then
    E.raise(string.format("%s: padding mode '%s' does not take a value", who, mode))
  end
  if mode == "circular" then
    if np ~= 2 * (nd - 2) or np == 0 then
      E.raise(string.format("%s: mode 'circular' pads the spatial dimensions of a batched input: 2 pad values for " ..
        "[N, C, L], 4 for [N, C, H, W], 6 for [N, C, D, H, W]; got %d pad values for the input %s", who, np,
        shape_str(x)))
    end
    for k = 1, k_dims do maps[k] = circular_map(who, x, nd - k + 1, p[2 * k - 1], p[2 * k]) end
    return apply_maps(x, maps, k_dims)
  end
  if not ((np == 2 and (nd == 2 or nd == 3)) or (np == 4 and (nd == 3 or nd == 4)) or
      (np == 6 and (nd == 4 or nd == 5))) then
    E.raise(string.format("%s: mode '%s' pads the last dimension of a 2-D or 3-D input (2 pad values), the last " ..
      "two of a 3-D or 4-D input (4 pad values) or the last three of a 4-D or 5-D input (6 pad values); got %d pad " ..
      "values for the input %s", who, mode, np, shape_str(x)))
  end
  for k = 1, k_dims do maps[k] = index_pad_map(who, x, nd - k + 1, p[2 * k - 1], p[2 * k], mode) end
  return apply_maps(x, maps, k_dims)
end

--- F.pad(x, pad, mode = "constant", value = 0), or F.pad(x, pad, {mode =, value =}).
function F.pad(x, p, ...)
  local o = util.args("F.pad", { "mode", "value" }, ...)
  return pad("F.pad", x, p, o.mode, o.value)
end

-- padding: an integer (every side) or a list of n integers -> a list of n
local function check_padding(who, padding, n)
  if math.type(padding) == "integer" then
    local t = {}
    for i = 1, n do t[i] = padding end
    return t
  end
  if not is_list(padding) or #padding ~= n then
    E.raise(string.format("%s: padding must be an integer or a list of %d integers, got %s", who, n,
      is_list(padding) and list_str(padding) or tostring(padding)))
  end
  local t = {}
  for i = 1, n do
    if math.type(padding[i]) ~= "integer" then
      E.raise(string.format("%s: padding must be an integer or a list of %d integers, got %s", who, n,
        list_str(padding)))
    end
    t[i] = padding[i]
  end
  return t
end

local function pad_module(name, n, mode, opts)
  local cls = Module:extend(name)
  function cls:__init(padding, ...)
    self.padding = check_padding(name, padding, n)
    if mode == "constant" then
      if opts.zero then
        util.args(name, {}, ...)
        self.value = 0.0
      else
        local o = util.args(name, { "value" }, ...)
        if type(o.value) ~= "number" then
          E.raise(string.format("%s: value must be a number, got %s", name, tostring(o.value)))
        end
        self.value = o.value
      end
    else
      util.args(name, {}, ...)
    end
  end
  function cls:forward(x)
    return pad(tostring(self), x, self.padding, mode, mode == "constant" and self.value or nil)
  end
  function cls:extra_repr()
    if mode == "constant" and not opts.zero then
      return "padding=" .. py_tuple(self.padding) .. ", value=" .. py_num(self.value)
    end
    return py_tuple(self.padding)
  end
  M.modules[name] = cls
end

--- nn.ZeroPad2d(padding), nn.ConstantPad1d(padding, value), nn.ConstantPad2d(padding, value),
--- nn.ReflectionPad1d(padding), nn.ReflectionPad2d(padding), nn.ReplicationPad1d(padding),
--- nn.ReplicationPad2d(padding), and the 3d forms: padding an integer or {left, right} (1d) / {left, right, top,
--- bottom} (2d) / {left, right, top, bottom, front, back} (3d).
pad_module("ZeroPad2d", 4, "constant", { zero = true })
pad_module("ConstantPad1d", 2, "constant", {})
pad_module("ConstantPad2d", 4, "constant", {})
pad_module("ReflectionPad1d", 2, "reflect", {})
pad_module("ReflectionPad2d", 4, "reflect", {})
pad_module("ReplicationPad1d", 2, "replicate", {})
pad_module("ReplicationPad2d", 4, "replicate", {})
pad_module("ConstantPad3d", 6, "constant", {})
pad_module("ReflectionPad3d", 6, "reflect", {})
pad_module("ReplicationPad3d", 6, "replicate", {})

return M
