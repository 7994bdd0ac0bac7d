-- Resampling, composed from the tensor ops (index_select, reshape, permute, resample_dim, plane_gather), so autograd
-- runs through the composition and no op loops over elements in Lua (only the index lists, one entry per output
-- position of one dim, are built in Lua):
--
--   F.interpolate(x, size, scale_factor, mode, align_corners, recompute_scale_factor, antialias) (PyTorch's order,
--     or an options table last): "nearest" for [N, C, L], [N, C, H, W] and [N, C, D, H, W], "linear" for [N, C, L],
--     "bilinear" for [N, C, H, W], "trilinear" for [N, C, D, H, W]. The source positions are PyTorch 1.13's CPU
--     kernels': nearest takes floor(dst * scale), linear the two neighbours of scale * (dst + 0.5) - 0.5 (clamped at
--     0; scale * dst with align_corners), with scale = 1 / scale_factor when a scale factor is given (and
--     recompute_scale_factor is not true), else in / out, computed in float32 for float32 inputs as PyTorch's
--     kernels do. Bilinear is two separable 1-d passes (W, then H) and trilinear three, each one
--     core.resample_dim (src/ops/index.c: the two neighbours times their weights, in one kernel); nearest of
--     [N, C, H, W] on the CPU in float32 / float64 is one core.plane_gather (both dims in one pass each way).
--   nn.Upsample(size, scale_factor, mode, align_corners, recompute_scale_factor), nn.UpsamplingNearest2d(size,
--     scale_factor), nn.UpsamplingBilinear2d(size, scale_factor) (align_corners=true, as PyTorch's).
--   F.pixel_shuffle(x, r), F.pixel_unshuffle(x, r), nn.PixelShuffle(r), nn.PixelUnshuffle(r): reshape and permute.
--   (F.pad and the padding modules: nn/padding.lua.)
--
-- Differences from PyTorch: nearest interpolation also takes integer tensors (PyTorch's kernels are
-- floating-point only); the modules check their settings when constructed (PyTorch, for
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

local shape_str, py_num, py_tuple, list_str = util.shape_str, util.py_num, util.py_tuple, util.list_str
local check_tensor, is_list = util.check_tensor, util.is_list

-- float32 rounding (PyTorch's CPU kernels compute indices and weights in float for float32/bfloat16 inputs, in double
-- for float64 ones)
local function f32(v) return (string.unpack("<f", string.pack("<f", v))) end
local function rounding(x) if x:dtype() == "float64" then return function(v) return v end end return f32 end

-- the [T, k] tensor of dtype dt on x's device holding T lists of k values (the taps of core.resample_dim)
local function taps(lists, dt, x) return ddp.tensor(lists, { dtype = dt, device = x:device() }) end
local resample_dim = ddp.core.resample_dim

-- ---- interpolate ---------------------------------------------------------------------------------------------

local MODES = { nearest = true, linear = true, bilinear = true, trilinear = true }
local UNSUPPORTED_MODES = { bicubic = true, area = true, ["nearest-exact"] = true }

-- Checks the settings that do not depend on the input; returns the mode.
local function check_resize_settings(who, size, scale_factor, mode, align_corners, recompute, antialias)
  mode = mode == nil and "nearest" or mode
  if type(mode) ~= "string" or not (MODES[mode] or UNSUPPORTED_MODES[mode]) then
    E.raise(string.format("%s: unknown mode %s (expected 'nearest', 'linear', 'bilinear' or 'trilinear')", who,
      type(mode) == "string" and ("'" .. mode .. "'") or tostring(mode)))
  end
  if UNSUPPORTED_MODES[mode] then
    E.raise(string.format("%s: mode '%s' is not supported yet (supported: 'nearest', 'linear', 'bilinear', " ..
      "'trilinear')", who, mode))
  end
  if align_corners ~= nil and type(align_corners) ~= "boolean" then
    E.raise(string.format("%s: align_corners must be a boolean or nil, got %s", who, tostring(align_corners)))
  end
  if mode == "nearest" and align_corners ~= nil then
    E.raise(string.format("%s: align_corners can only be set with the interpolating modes 'linear', " ..
      "'bilinear' and 'trilinear', not with mode 'nearest'", who))
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
  local ranks = mode == "nearest" and "a 3-D [N, C, L], 4-D [N, C, H, W] or 5-D [N, C, D, H, W]" or
      mode == "linear" and "a 3-D [N, C, L]" or mode == "bilinear" and "a 4-D [N, C, H, W]" or "a 5-D [N, C, D, H, W]"
  if (mode == "nearest" and (nd < 3 or nd > 5)) or (mode == "linear" and nd ~= 3) or
      (mode == "bilinear" and nd ~= 4) or (mode == "trilinear" and nd ~= 5) then
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
  util.check_output_alloc(who, x, out_size)
  local rnd = rounding(x)
  if mode == "nearest" and ns == 2 and x:device() == "cpu" and (x:dtype() == "float32" or x:dtype() == "float64") then
    -- both dims in one pass each way (core.plane_gather), as the paddings
    local ih = nearest_indices(x:size(3), out_size[1], scales[1], rnd)
    local iw = nearest_indices(x:size(4), out_size[2], scales[2], rnd)
    return ddp.core.plane_gather(x, ddp.tensor(ih, { dtype = "int64" }), ddp.tensor(iw, { dtype = "int64" }))
  end
  local y = x
  -- the last dim first: PyTorch's kernels sum the last dim's taps innermost, and the gather along it runs on the
  -- smaller tensor when upsampling
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

return M
