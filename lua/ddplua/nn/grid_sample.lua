-- Spatial transformers' sampling (PyTorch's Spatial Transformer Networks tutorial), composed from the tensor ops:
-- gather for the input's values (its gradient a scatter-add into the input) and arithmetic on the grid (its
-- gradient through the bilinear weights), so autograd runs through both.
--
--   F.affine_grid(theta, size, align_corners = false): theta [N, 2, 3], size {N, C, H, W} -> grid [N, H, W, 2],
--     the (x, y) in [-1, 1] that theta maps each output pixel's centre (align_corners: its corner) to.
--   F.grid_sample(input, grid, mode = "bilinear", padding_mode = "zeros", align_corners = false): input
--     [N, C, H, W], grid [N, Ho, Wo, 2] of (x, y) in [-1, 1] -> [N, C, Ho, Wo]; mode "bilinear" or "nearest" (ties
--     to even, as PyTorch's nearbyint); padding_mode "zeros" (outside reads 0), "border" (the edge) or
--     "reflection" (mirrored at the edges).
-- Differences from PyTorch: 4-D inputs only (no volumetric 5-D sampling), no "bicubic" mode; in "nearest" mode no
-- gradient reaches the grid (nil where PyTorch's is zeros).
-- Settings also by name: F.grid_sample(x, grid, {mode = "nearest", align_corners = true}).
local ddp = require "ddplua"
local util = require "ddplua.nn.util"
local E = require "ddplua.errors"

local M = { modules = {}, F = {} }
local F = M.F
local shape_str = util.shape_str

local function check_bool(who, what, v)
  if v ~= nil and type(v) ~= "boolean" then
    E.raise(string.format("%s: %s must be true or false, got %s", who, what, tostring(v)))
  end
  return v == true
end

--- F.affine_grid(theta, size [, align_corners = false])
function F.affine_grid(theta, size, ...)
  local who = "affine_grid"
  local o = util.args(who, { "align_corners" }, ...)
  local ac = check_bool(who, "align_corners", o.align_corners)
  if not ddp.is_tensor(theta) or not theta:is_floating_point() then
    E.raise(who .. ": theta must be a floating-point tensor [N, 2, 3], got " ..
      (ddp.is_tensor(theta) and theta:dtype() or type(theta)))
  end
  if type(size) ~= "table" or #size ~= 4 then
    E.raise(who .. ": size must be {N, C, H, W} (4-D: volumetric grids are not supported), got " ..
      (type(size) == "table" and util.list_str(size) or type(size)))
  end
  for i = 1, 4 do util.check_int(who, "size[" .. i .. "]", size[i], true) end
  local N, H, W = size[1], size[3], size[4]
  if theta:dim() ~= 3 or theta:size(1) ~= N or theta:size(2) ~= 2 or theta:size(3) ~= 3 then
    E.raise(string.format("%s: expected theta [%d, 2, 3] for the size %s, got %s", who, N, util.list_str(size),
      shape_str(theta)))
  end
  util.check_output_alloc(who, theta, { H, W, 3 })
  local opts = { dtype = theta:dtype(), device = theta:device() }
  -- a pixel's coordinate along a side of n: its centre (-1 + (2j + 1) / n), or with align_corners its corner
  local function coords(n)
    if n == 0 then return ddp.empty({ 0 }, opts) end
    if ac then return n == 1 and ddp.zeros({ 1 }, opts) or ddp.linspace(-1, 1, n, opts) end
    return (ddp.arange(0, n, 1, opts) * 2 + 1) / n - 1
  end
  local xs, ys = coords(W), coords(H)
  local base = ddp.stack({ xs:view(1, W):expand(H, W), ys:view(H, 1):expand(H, W), ddp.ones({ H, W }, opts) }, 3)
  return base:view(1, H * W, 3):matmul(theta:transpose(2, 3)):view(N, H, W, 2)
end

-- [-1, 1] to pixel positions (0-based, continuous) along a side of n
local function unnormalize(g, n, ac)
  if ac then return (g + 1) * ((n - 1) / 2) end
  return ((g + 1) * n - 1) / 2
end

-- PyTorch's reflect_coordinates: c mirrored into [lo2 / 2, hi2 / 2] (the doubled bounds), any number of times
local function reflect(c, lo2, hi2)
  if lo2 == hi2 then return c * 0 end
  local lo, span = lo2 / 2, (hi2 - lo2) / 2
  local a = (c - lo):abs()
  local extra = a:fmod(span)
  local flips = (a / span):floor()
  local even = flips:fmod(2):eq(0)
  return ddp.where(even, extra + lo, -extra + (span + lo))
end

-- c clamped into [0, n - 1], its gradient passed strictly inside only (PyTorch's clip_coordinates_set_grad: none
-- at the edges themselves, where an align_corners grid of +-1 lands)
local function clip(c, n)
  return ddp.where(c:gt(0):logical_and(c:lt(n - 1)), c, c:detach():clamp(0, n - 1))
end

-- the positions a padding mode reads: border clamps into the input, reflection mirrors then clamps
local function pad_coords(c, n, mode, ac)
  if mode == "border" then return clip(c, n) end
  if mode == "reflection" then return clip(ac and reflect(c, 0, 2 * (n - 1)) or reflect(c, -1, 2 * n - 1), n) end
  return c
end

--- F.grid_sample(input, grid [, mode = "bilinear", padding_mode = "zeros", align_corners = false])
function F.grid_sample(input, grid, ...)
  local who = "grid_sample"
  local o = util.args(who, { "mode", "padding_mode", "align_corners" }, ...)
  local mode, pmode = o.mode or "bilinear", o.padding_mode or "zeros"
  local ac = check_bool(who, "align_corners", o.align_corners)
  if mode ~= "bilinear" and mode ~= "nearest" then
    E.raise(string.format("%s: mode must be 'bilinear' or 'nearest', got %s", who, tostring(mode)))
  end
  if pmode ~= "zeros" and pmode ~= "border" and pmode ~= "reflection" then
    E.raise(string.format("%s: padding_mode must be 'zeros', 'border' or 'reflection', got %s", who, tostring(pmode)))
  end
  if not ddp.is_tensor(input) or input:dim() ~= 4 then
    E.raise(who .. ": expected a 4-D input [N, C, H, W] (volumetric 5-D sampling is not supported), got " ..
      (ddp.is_tensor(input) and shape_str(input) or type(input)))
  end
  if not ddp.is_tensor(grid) or grid:dim() ~= 4 or grid:size(4) ~= 2 or grid:size(1) ~= input:size(1) then
    E.raise(string.format("%s: expected a grid [%d, Ho, Wo, 2] for the input %s, got %s", who, input:size(1),
      shape_str(input), ddp.is_tensor(grid) and shape_str(grid) or type(grid)))
  end
  if not input:is_floating_point() or grid:dtype() ~= input:dtype() then
    E.raise(string.format("%s: input and grid must be floating point of one dtype, got %s and %s", who,
      input:dtype(), grid:dtype()))
  end
  local N, C, H, W = input:size(1), input:size(2), input:size(3), input:size(4)
  local Ho, Wo = grid:size(2), grid:size(3)
  if N * C * Ho * Wo == 0 or H * W == 0 then
    if H * W == 0 and N * Ho * Wo > 0 and C > 0 then
      E.raise(string.format("%s: the input %s has no pixels to sample", who, shape_str(input)))
    end
    return ddp.zeros({ N, C, Ho, Wo }, { dtype = input:dtype(), device = input:device() })
  end
  local g = grid:reshape(N, Ho * Wo, 2)
  local ix = pad_coords(unnormalize(g:select(3, 1), W, ac), W, pmode, ac)
  local iy = pad_coords(unnormalize(g:select(3, 2), H, ac), H, pmode, ac)
  local flat = input:reshape(N, C, H * W)
  -- the value at integer positions (x, y) [N, Ho * Wo], times w; 0 (and no gradient to the input) outside it
  local function corner(x, y, w)
    local inside = x:ge(0):logical_and(x:le(W - 1)):logical_and(y:ge(0)):logical_and(y:le(H - 1))
    local pos = (y:clamp(0, H - 1) * W + x:clamp(0, W - 1)):to("int64") + 1
    local v = flat:gather(3, pos:view(N, 1, Ho * Wo):expand(N, C, Ho * Wo))
    return v * (w * inside:to(w:dtype())):view(N, 1, Ho * Wo)
  end
  local out
  if mode == "nearest" then
    local x, y = ix:detach():round(), iy:detach():round()
    out = corner(x, y, ddp.ones_like(x))
  else
    local x0, y0 = ix:detach():floor(), iy:detach():floor()
    local wx1, wy1 = ix - x0, iy - y0
    local wx0, wy0 = -wx1 + 1, -wy1 + 1
    out = corner(x0, y0, wx0 * wy0) + corner(x0 + 1, y0, wx1 * wy0) + corner(x0, y0 + 1, wx0 * wy1)
      + corner(x0 + 1, y0 + 1, wx1 * wy1)
  end
  return out:view(N, C, Ho, Wo)
end

return M
