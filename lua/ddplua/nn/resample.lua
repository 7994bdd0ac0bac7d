-- Resampling and padding, composed from the tensor ops (index_select, narrow, cat, reshape, permute), so autograd
-- runs through the composition and no op loops over elements in Lua (only the index lists, one entry per output
-- position of one dim, are built in Lua):
--
--   F.interpolate(x, size, scale_factor, mode, align_corners, recompute_scale_factor, antialias) (PyTorch's order,
--     or an options table last): "nearest" for [N, C, L] and [N, C, H, W], "linear" for [N, C, L], "bilinear" for
--     [N, C, H, W]. The source positions are PyTorch 1.13's CPU kernels': nearest takes floor(dst * scale), linear
--     the two neighbours of scale * (dst + 0.5) - 0.5 (clamped at 0; scale * dst with align_corners), with scale =
--     1 / scale_factor when a scale factor is given (and recompute_scale_factor is not true), else in / out, computed
--     in float32 for float32 inputs as PyTorch's kernels do. Bilinear is two separable 1-d passes (W, then H), each
--     one core.resample_dim (src/ops/index.c: the two neighbours times their weights, in one kernel); nearest of
--     [N, C, H, W] on the CPU in float32 / float64 is one core.plane_gather (both dims in one pass each way).
--   nn.Upsample(size, scale_factor, mode, align_corners, recompute_scale_factor), nn.UpsamplingNearest2d(size,
--     scale_factor), nn.UpsamplingBilinear2d(size, scale_factor) (align_corners=true, as PyTorch's).
--   F.pixel_shuffle(x, r), F.pixel_unshuffle(x, r), nn.PixelShuffle(r), nn.PixelUnshuffle(r): reshape and permute.
--   F.pad(x, pad, mode, value): pad = {left, right [, top, bottom [, front, back]]} (the last dim first, as
--     PyTorch's); "constant" (any rank; negative pads crop), "reflect" and "replicate" (the last dim of a 2-D/3-D
--     input, or the last two of a 3-D/4-D one, as PyTorch 1.13), "circular" (the spatial dims of a batched [N, C,
--     ...] input, as PyTorch 1.13; negative pads crop first). Each padded dim becomes a map of source positions;
--     the last two dims go through one core.plane_gather on the CPU in float32 / float64 (one pass each way), other
--     cases through narrow and cat (constant) or index_select (the rest) per dim.
--     nn.ZeroPad2d, nn.ConstantPad1d/2d(padding, value), nn.ReflectionPad1d/2d, nn.ReplicationPad1d/2d.
--
-- Differences from PyTorch: nearest interpolation, reflect and replicate padding also take integer tensors
-- (PyTorch's kernels are floating-point only); the modules check their settings when constructed (PyTorch, for
-- Upsample, when called); nearest's gradient follows the forward's own indices (PyTorch 1.13's CPU backward takes
-- its indices in float32 with out == in and out == 2 * in special-cased, which disagrees with its own forward when
-- a scale factor gives such a size, 5 * 1.1 -> 5, and for float64 inputs where float32 moves an index, 26 -> 22).
local ddp = require "ddplua"
local Module = require "ddplua.nn.module"
local util = require "ddplua.nn.util"
local E = require "ddplua.errors"

local M = { modules = {}, F = {} }
local F = M.F

-- ---- small helpers -------------------------------------------------------------------------------------------

local function shape_str(x) return util.shape_str(x) end

--- Python's repr of a number: integers as they are, floats shortest round-trip with ".0" when integral.
local function py_num(v)
  if math.type(v) == "integer" then return tostring(v) end
  if v ~= v then return "nan" end
  if v == math.huge then return "inf" elseif v == -math.huge then return "-inf" end
  local s
  for p = 1, 17 do
    s = string.format("%." .. p .. "g", v)
    if tonumber(s) == v then break end
  end
  local mant, ex = s:match("^(-?[%d.]+)e([-+]%d+)$")
  if mant then
    local e = tonumber(ex)
    if e >= -4 and e < 16 then -- Python writes these positionally
      local digits = #mant:gsub("[-.]", "") - 1
      s = string.format("%." .. math.max(0, digits - e) .. "f", v)
    else
      return mant .. "e" .. (ex:sub(1, 1) == "-" and "-" or "+") .. string.format("%02d", math.abs(e))
    end
  end
  if not s:find("[.e]") then s = s .. ".0" end
  return s
end

--- Python's repr of a tuple of numbers: (1, 2), (5,).
local function py_tuple(list)
  local parts = {}
  for i, v in ipairs(list) do parts[i] = py_num(v) end
  if #parts == 1 then return "(" .. parts[1] .. ",)" end
  return "(" .. table.concat(parts, ", ") .. ")"
end

local function list_str(list)
  local parts = {}
  for i, v in ipairs(list) do parts[i] = tostring(v) end
  return "[" .. table.concat(parts, ", ") .. "]"
end

local function check_tensor(who, x)
  if not ddp.is_tensor(x) then E.raise(string.format("%s: expected a tensor input, got %s", who, type(x))) end
end

local function is_list(v) return type(v) == "table" and getmetatable(v) == nil end

-- float32 rounding (PyTorch's CPU kernels compute indices and weights in float for float32/bfloat16 inputs, in double
-- for float64 ones)
local function f32(v) return (string.unpack("<f", string.pack("<f", v))) end
local function rounding(x) if x:dtype() == "float64" then return function(v) return v end end return f32 end

-- the [T, k] tensor of dtype dt on x's device holding T lists of k values (the taps of core.resample_dim)
local function taps(lists, dt, x) return ddp.tensor(lists, { dtype = dt, device = x:device() }) end
local resample_dim = ddp.core.resample_dim

-- ---- interpolate ---------------------------------------------------------------------------------------------

local MODES = { nearest = true, linear = true, bilinear = true }
local UNSUPPORTED_MODES = { bicubic = true, trilinear = true, area = true, ["nearest-exact"] = true }

-- Checks the settings that do not depend on the input; returns the mode.
local function check_resize_settings(who, size, scale_factor, mode, align_corners, recompute, antialias)
  mode = mode == nil and "nearest" or mode
  if type(mode) ~= "string" or not (MODES[mode] or UNSUPPORTED_MODES[mode]) then
    E.raise(string.format("%s: unknown mode %s (expected 'nearest', 'linear' or 'bilinear')", who,
      type(mode) == "string" and ("'" .. mode .. "'") or tostring(mode)))
  end
  if UNSUPPORTED_MODES[mode] then
    E.raise(string.format("%s: mode '%s' is not supported yet (supported: 'nearest', 'linear', 'bilinear')", who, mode))
  end
  if align_corners ~= nil and type(align_corners) ~= "boolean" then
    E.raise(string.format("%s: align_corners must be a boolean or nil, got %s", who, tostring(align_corners)))
  end
  if mode == "nearest" and align_corners ~= nil then
    E.raise(string.format("%s: align_corners can only be set with the interpolating modes 'linear' and " ..
      "'bilinear', not with mode 'nearest'", who))
  end
  if recompute ~= nil and type(recompute) ~= "boolean" then
    E.raise(string.format("%s: recompute_scale_factor must be a boolean or nil, got %s", who, tostring(recompute)))
  end
  util.unsupported(who, "antialias", antialias, false, "no anti-aliasing filter")
  if size ~= nil and scale_factor ~= nil then
    E.raise(string.format("%s: give either size or scale_factor, not both", who))
  end
  if size == nil and scale_factor == nil then
    E.raise(string.format("%s: either size or scale_factor must be given", who))
  end
  if recompute and size ~= nil then
    E.raise(string.format("%s: recompute_scale_factor is not meaningful with an explicit size", who))
  end
  local function check_each(what, v, ok, expected)
    local list = is_list(v) and v or { v }
    if is_list(v) and #v == 0 then E.raise(string.format("%s: %s must not be empty", who, what)) end
    for _, e in ipairs(list) do
      if not ok(e) then
        E.raise(string.format("%s: %s must be %s or a list of them, got %s", who, what, expected,
          is_list(v) and list_str(v) or tostring(v)))
      end
    end
  end
  if size ~= nil then
    check_each("size", size, function(e) return math.type(e) == "integer" and e > 0 end, "a positive integer")
  else
    check_each("scale_factor", scale_factor, function(e)
      return type(e) == "number" and e > 0 and e < math.huge
    end, "a positive number")
  end
  return mode
end

-- 1-based source positions of nearest interpolation along one dim (PyTorch 1.13's CPU forward:
-- min(floor(dst * scale), in - 1), scale in the input's precision, the product rounded to float by floorf)
local function nearest_indices(n_in, n_out, sf, rnd)
  local scale = rnd(sf and 1.0 / sf or n_in / n_out)
  local idx, identity = {}, n_in == n_out
  for j = 0, n_out - 1 do
    local i = math.min(math.floor(f32(rnd(scale * j))), n_in - 1)
    idx[j + 1] = i + 1
    identity = identity and i == j
  end
  return idx, identity
end

-- The two neighbours (1-based) and their weights of linear interpolation along one dim (PyTorch 1.13's
-- compute_source_index_and_lambda); nil when the dim keeps its size (PyTorch copies it).
local function linear_weights(n_in, n_out, align_corners, sf, rnd)
  if n_in == n_out then return nil end
  local scale
  if align_corners then
    scale = n_out > 1 and rnd((n_in - 1) / (n_out - 1)) or 0
  else
    scale = rnd(sf and 1.0 / sf or n_in / n_out)
  end
  local i0, i1, w0, w1 = {}, {}, {}, {}
  for j = 0, n_out - 1 do
    local src
    if align_corners then
      src = rnd(scale * j)
    else
      src = rnd(scale * (j + 0.5) - 0.5)
      if src < 0 then src = 0 end
    end
    local k = math.min(math.floor(f32(src)), n_in - 1)
    local l1 = math.min(math.max(rnd(src - k), 0), 1)
    i0[j + 1], i1[j + 1] = k + 1, (k < n_in - 1 and k + 1 or k) + 1
    w0[j + 1], w1[j + 1] = rnd(1 - l1), l1
  end
  return i0, i1, w0, w1
end

local function interpolate(who, x, size, scale_factor, mode, align_corners, recompute, antialias)
  check_tensor(who, x)
  mode = check_resize_settings(who, size, scale_factor, mode, align_corners, recompute, antialias)
  local nd = x:dim()
  local ranks = mode == "nearest" and "a 3-D [N, C, L] or 4-D [N, C, H, W]" or
      mode == "linear" and "a 3-D [N, C, L]" or "a 4-D [N, C, H, W]"
  if (mode == "nearest" and nd ~= 3 and nd ~= 4) or (mode == "linear" and nd ~= 3) or
      (mode == "bilinear" and nd ~= 4) then
    E.raise(string.format("%s: mode '%s' expects %s input, got a %d-D input %s", who, mode, ranks, nd, shape_str(x)))
  end
  if mode ~= "nearest" and not x:is_floating_point() then
    E.raise(string.format("%s: mode '%s' needs a floating-point input, got %s", who, mode, x:dtype()))
  end
  local ns = nd - 2
  local function per_dim(what, v)
    if not is_list(v) then
      local t = {}
      for i = 1, ns do t[i] = v end
      return t
    end
    if #v ~= ns then
      E.raise(string.format("%s: %s has %d values but the input %s has %d spatial dimension%s", who, what, #v,
        shape_str(x), ns, ns == 1 and "" or "s"))
    end
    return v
  end
  local out_size, scales = {}, {}
  local sizes = size ~= nil and per_dim("size", size) or nil
  local sfs = scale_factor ~= nil and per_dim("scale_factor", scale_factor) or nil
  for i = 1, ns do
    local n_in = x:size(i + 2)
    if sizes then
      out_size[i] = sizes[i]
    else
      out_size[i] = math.floor(n_in * sfs[i])
      if not recompute then scales[i] = sfs[i] end
    end
  end
  for i = 1, ns do
    if out_size[i] < 1 or x:size(i + 2) < 1 then
      local ins = {}
      for k = 1, ns do ins[k] = x:size(k + 2) end
      E.raise(string.format("%s: input and output sizes must be positive, got input %s and output %s", who,
        list_str(ins), list_str(out_size)))
    end
  end
  local rnd = rounding(x)
  local y = x
  -- the last dim first: PyTorch's kernels sum the last dim's taps innermost, and the gather along it runs on the
  -- smaller tensor when upsampling
  if mode == "nearest" and ns == 2 and x:device() == "cpu" and (x:dtype() == "float32" or x:dtype() == "float64") then
    -- both dims in one pass each way (core.plane_gather), as the paddings
    local ih = nearest_indices(x:size(3), out_size[1], scales[1], rnd)
    local iw = nearest_indices(x:size(4), out_size[2], scales[2], rnd)
    return ddp.core.plane_gather(x, ddp.tensor(ih, { dtype = "int64" }), ddp.tensor(iw, { dtype = "int64" }))
  end
  for i = ns, 1, -1 do
    local d, n_in, n_out = i + 2, x:size(i + 2), out_size[i]
    if mode == "nearest" then
      local idx, identity = nearest_indices(n_in, n_out, scales[i], rnd)
      if not identity then y = y:index_select(d, idx) end
    else
      local i0, i1, w0, w1 = linear_weights(n_in, n_out, align_corners or false, scales[i], rnd)
      if i0 then y = resample_dim(y, d, taps({ i0, i1 }, "int64", x), taps({ w0, w1 }, x:dtype(), x)) end
    end
  end
  if y == x then y = x:clone() end -- PyTorch returns a new tensor even when nothing changes
  return y
end

--- F.interpolate(x, size, scale_factor, mode = "nearest", align_corners, recompute_scale_factor, antialias), or
--- F.interpolate(x, {size =, scale_factor =, mode =, align_corners =, recompute_scale_factor =}) (after any
--- positional ones). size: an integer or one per spatial dim; scale_factor: a number or one per spatial dim.
function F.interpolate(x, ...)
  local o = util.args("F.interpolate", { "size", "scale_factor", "mode", "align_corners", "recompute_scale_factor",
    "antialias" }, ...)
  return interpolate("F.interpolate", x, o.size, o.scale_factor, o.mode, o.align_corners, o.recompute_scale_factor,
    o.antialias)
end

local UPSAMPLE_SETTINGS = { "size", "scale_factor", "mode", "align_corners", "recompute_scale_factor" }

local Upsample = Module:extend("Upsample")

function Upsample:_setup(who, o)
  self.mode = check_resize_settings(who, o.size, o.scale_factor, o.mode, o.align_corners, o.recompute_scale_factor)
  local function copy(v, conv)
    if not is_list(v) then return v ~= nil and conv(v) or nil end
    local t = {}
    for i, e in ipairs(v) do t[i] = conv(e) end
    return t
  end
  self.size = copy(o.size, function(e) return e end)
  self.scale_factor = copy(o.scale_factor, function(e) return e + 0.0 end) -- PyTorch keeps float(scale_factor)
  self.align_corners, self.recompute_scale_factor = o.align_corners, o.recompute_scale_factor
end

--- nn.Upsample(size, scale_factor, mode = "nearest", align_corners, recompute_scale_factor) or
--- nn.Upsample({size =, scale_factor =, mode =, align_corners =, recompute_scale_factor =}).
function Upsample:__init(...) self:_setup("Upsample", util.args("Upsample", UPSAMPLE_SETTINGS, ...)) end

function Upsample:forward(x)
  return interpolate(self:_class_name(), x, self.size, self.scale_factor, self.mode, self.align_corners,
    self.recompute_scale_factor)
end

function Upsample:extra_repr()
  local info
  if self.scale_factor ~= nil then
    info = "scale_factor=" .. (is_list(self.scale_factor) and py_tuple(self.scale_factor) or py_num(self.scale_factor))
  else
    info = "size=" .. (is_list(self.size) and py_tuple(self.size) or py_num(self.size))
  end
  return info .. ", mode=" .. self.mode
end

M.modules.Upsample = Upsample

--- nn.UpsamplingNearest2d(size, scale_factor): Upsample with mode "nearest".
local UpsamplingNearest2d = Upsample:extend("UpsamplingNearest2d")
function UpsamplingNearest2d:__init(...)
  local o = util.args("UpsamplingNearest2d", { "size", "scale_factor" }, ...)
  o.mode = "nearest"
  self:_setup("UpsamplingNearest2d", o)
end
M.modules.UpsamplingNearest2d = UpsamplingNearest2d

--- nn.UpsamplingBilinear2d(size, scale_factor): Upsample with mode "bilinear" and align_corners=true (as PyTorch's).
local UpsamplingBilinear2d = Upsample:extend("UpsamplingBilinear2d")
function UpsamplingBilinear2d:__init(...)
  local o = util.args("UpsamplingBilinear2d", { "size", "scale_factor" }, ...)
  o.mode, o.align_corners = "bilinear", true
  self:_setup("UpsamplingBilinear2d", o)
end
M.modules.UpsamplingBilinear2d = UpsamplingBilinear2d

-- ---- pixel shuffle -------------------------------------------------------------------------------------------

local function check_factor(who, what, r)
  if math.type(r) ~= "integer" or r < 1 then
    E.raise(string.format("%s: %s must be a positive integer, got %s", who, what, tostring(r)))
  end
end

-- x's batch dims (all but the last three) and their product
local function batch_dims(x)
  local s, batch, n = x:size(), {}, 1
  for i = 1, #s - 3 do
    batch[i] = s[i]
    n = n * s[i]
  end
  return batch, n
end

local function with_batch(batch, ...)
  local shape = {}
  for i, v in ipairs(batch) do shape[i] = v end
  for _, v in ipairs({ ... }) do shape[#shape + 1] = v end
  return shape
end

local function pixel_shuffle(who, x, r)
  check_tensor(who, x)
  check_factor(who, "upscale_factor", r)
  if x:dim() < 3 then
    E.raise(string.format("%s: expected an input of at least 3 dimensions [*, C * r^2, H, W], got %s", who,
      shape_str(x)))
  end
  local c, h, w = x:size(-3), x:size(-2), x:size(-1)
  if c % (r * r) ~= 0 then
    E.raise(string.format("%s: the channel dimension (size %d of input %s) must be divisible by upscale_factor^2 = %d",
      who, c, shape_str(x), r * r))
  end
  local batch, n = batch_dims(x)
  local oc = c // (r * r)
  return x:reshape({ n, oc, r, r, h, w }):permute(1, 2, 5, 3, 6, 4):reshape(with_batch(batch, oc, h * r, w * r))
end

local function pixel_unshuffle(who, x, r)
  check_tensor(who, x)
  check_factor(who, "downscale_factor", r)
  if x:dim() < 3 then
    E.raise(string.format("%s: expected an input of at least 3 dimensions [*, C, H * r, W * r], got %s", who,
      shape_str(x)))
  end
  local c, h, w = x:size(-3), x:size(-2), x:size(-1)
  if h % r ~= 0 then
    E.raise(string.format("%s: the height (size %d of input %s) must be divisible by downscale_factor %d", who, h,
      shape_str(x), r))
  end
  if w % r ~= 0 then
    E.raise(string.format("%s: the width (size %d of input %s) must be divisible by downscale_factor %d", who, w,
      shape_str(x), r))
  end
  local batch, n = batch_dims(x)
  local oh, ow = h // r, w // r
  return x:reshape({ n, c, oh, r, ow, r }):permute(1, 2, 4, 6, 3, 5):reshape(with_batch(batch, c * r * r, oh, ow))
end

--- F.pixel_shuffle(x, upscale_factor): [*, C * r^2, H, W] -> [*, C, H * r, W * r].
function F.pixel_shuffle(x, upscale_factor) return pixel_shuffle("F.pixel_shuffle", x, upscale_factor) end
--- F.pixel_unshuffle(x, downscale_factor): [*, C, H * r, W * r] -> [*, C * r^2, H, W].
function F.pixel_unshuffle(x, downscale_factor) return pixel_unshuffle("F.pixel_unshuffle", x, downscale_factor) end

local PixelShuffle = Module:extend("PixelShuffle")
function PixelShuffle:__init(upscale_factor)
  check_factor("PixelShuffle", "upscale_factor", upscale_factor)
  self.upscale_factor = upscale_factor
end
function PixelShuffle:forward(x) return pixel_shuffle("PixelShuffle", x, self.upscale_factor) end
function PixelShuffle:extra_repr() return "upscale_factor=" .. self.upscale_factor end
M.modules.PixelShuffle = PixelShuffle

local PixelUnshuffle = Module:extend("PixelUnshuffle")
function PixelUnshuffle:__init(downscale_factor)
  check_factor("PixelUnshuffle", "downscale_factor", downscale_factor)
  self.downscale_factor = downscale_factor
end
function PixelUnshuffle:forward(x) return pixel_unshuffle("PixelUnshuffle", x, self.downscale_factor) end
function PixelUnshuffle:extra_repr() return "downscale_factor=" .. self.downscale_factor end
M.modules.PixelUnshuffle = PixelUnshuffle

-- ---- pad -----------------------------------------------------------------------------------------------------

local PAD_MODES = { constant = true, reflect = true, replicate = true, circular = true }

-- Each padding mode as a map of dim d: the list of 1-based positions of x along d for the output's positions, 0
-- where the fill value goes (constant); nil when the dim is unchanged. The maps drive one index_select per dim, or
-- core.plane_gather for the last two dims at once (src/backends/cpu/cpu_plane_gather.c: one pass each way).

-- The maps of the settings seen last (a model pads the same sizes every step), each built once: at most 256, then
-- the cache starts over. A map is never changed once built; its int64 tensor is kept beside it.
local MAPS, n_maps = {}, 0
local function memo_map(key, build)
  local m = MAPS[key]
  if not m then
    if n_maps >= 256 then MAPS, n_maps = {}, 0 end
    m = build()
    MAPS[key], n_maps = m, n_maps + 1
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
  return memo_map(string.format("%s %d %d %d", mode, n, l, r), function()
    local idx = {}
    for j = 0, out - 1 do
      local p = j - l
      if mode == "reflect" then
        if p < 0 then p = -p elseif p >= n then p = 2 * (n - 1) - p end
      else
        p = math.min(math.max(p, 0), n - 1)
      end
      idx[j + 1] = p + 1
    end
    return idx
  end)
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
  return memo_map(string.format("circular %d %d %d %d", start, n, l, r), function()
    local idx = {}
    for j = 0, n + l + r - 1 do idx[j + 1] = start + (j - l) % n + 1 end
    return idx
  end)
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
  return memo_map(string.format("constant %d %d %d", n, l, r), function()
    local idx = {}
    for j = 0, n + l + r - 1 do
      local p = j - l
      idx[j + 1] = (p >= 0 and p < n) and p + 1 or 0
    end
    return idx
  end)
end

-- a map applied along dim d without plane_gather: index_select, or for a constant map the kept range and the
-- fill blocks around it joined by cat
local function apply_map(x, d, idx, value)
  local first, last = nil, nil
  for j, p in ipairs(idx) do
    if p ~= 0 then
      first = first or j
      last = j
    end
  end
  if value == nil or (first and idx[1] ~= 0 and idx[#idx] ~= 0) then return x:index_select(d, idx) end
  local parts = {}
  local function block(k)
    local s = x:size()
    s[d] = k
    parts[#parts + 1] = ddp.full(s, value, { dtype = x:dtype(), device = x:device() })
  end
  if not first then
    block(#idx)
    return #idx > 0 and ddp.cat(parts, d) or x:narrow(d, 1, 0)
  end
  if first > 1 then block(first - 1) end
  parts[#parts + 1] = x:narrow(d, idx[first], last - first + 1)
  if last < #idx then block(#idx - last) end
  return ddp.cat(parts, d)
end

local plane_gather = ddp.core.plane_gather
local TENSORS = setmetatable({}, { __mode = "k" }) -- a map's int64 tensor, as long as the map is cached
-- the int64 tensor of a map (nil: the identity of n positions)
local function positions(list, n)
  if not list then
    list = memo_map("identity " .. n, function()
      local id = {}
      for j = 1, n do id[j] = j end
      return id
    end)
  end
  local t = TENSORS[list]
  if not t then
    t = ddp.tensor(list, { dtype = "int64" })
    TENSORS[list] = t
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
  if not ((np == 2 and (nd == 2 or nd == 3)) or (np == 4 and (nd == 3 or nd == 4))) then
    E.raise(string.format("%s: mode '%s' pads the last dimension of a 2-D or 3-D input (2 pad values) or the " ..
      "last two of a 3-D or 4-D input (4 pad values); got %d pad values for the input %s", who, mode, np,
      shape_str(x)))
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
--- nn.ReplicationPad2d(padding): padding an integer or {left, right} (1d) / {left, right, top, bottom} (2d).
pad_module("ZeroPad2d", 4, "constant", { zero = true })
pad_module("ConstantPad1d", 2, "constant", {})
pad_module("ConstantPad2d", 4, "constant", {})
pad_module("ReflectionPad1d", 2, "reflect", {})
pad_module("ReflectionPad2d", 4, "reflect", {})
pad_module("ReplicationPad1d", 2, "replicate", {})
pad_module("ReplicationPad2d", 4, "replicate", {})

return M
