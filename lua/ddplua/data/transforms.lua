-- data.transforms: torchvision-style image transforms. Each constructor
-- returns a description ({op = ...}) that CSVImageDataset compiles into its
-- C pipeline, so no Lua runs per pixel or per image:
--
--   local T = data.transforms
--   local tf = T.Compose{ T.Resize{28, 28}, T.RandomRotation(10), T.RandomHorizontalFlip(),
--                         T.ToTensor(), T.Normalize{mean = {0.5}, std = {0.5}} }
--   data.CSVImageDataset{csv = "labels.csv", transform = tf}   -- or the plain list
--
-- A transform (or a Compose) can also be called on one uint8 [H, W, C]
-- image tensor: tf(img) returns float32 [C, H, W]; its randomness comes from
-- the global generator (ddp.manual_seed), or from opts {seed=, epoch=,
-- draw=, item=} when given: tf(img, {seed = 1}).
local core = require "ddplua.core"
local E = require "ddplua.errors"

local M = {}

local Transform = { __name = "ddplua.transforms.Transform" }
Transform.__index = Transform

local function is_transform(t) return getmetatable(t) == Transform end

local function make(op, fields, name)
  fields.op = op
  fields.name = name
  return setmetatable(fields, Transform)
end

function Transform.__call(self, img, opts) return core.image.apply({ self }, img, opts) end

function Transform.__tostring(self)
  if self.op == "resize" then
    if self.width == 0 then return string.format("Resize(%d)", self.height) end
    return string.format("Resize{%d, %d}", self.height, self.width)
  elseif self.op == "rotation" then
    return string.format("RandomRotation{%g, %g}", self.min, self.max)
  elseif self.op == "hflip" then
    return string.format("RandomHorizontalFlip(%g)", self.p)
  elseif self.op == "normalize" then
    return string.format("Normalize{mean = {%s}, std = {%s}}", table.concat(self.mean, ", "),
      table.concat(self.std, ", "))
  end
  return self.name .. "()"
end

local function check_size_value(v, what)
  if math.type(v) ~= "integer" or v < 1 then
    E.raise(string.format("Resize: %s must be a positive integer, got %s", what, tostring(v)))
  end
  return v
end

--- Resize{h, w}: bilinear to h x w. Resize(n) (or Resize{n}): the smaller
--- edge becomes n and the other keeps the aspect ratio (torchvision's rule).
function M.Resize(size)
  if type(size) == "number" then
    return make("resize", { height = check_size_value(size, "size"), width = 0 }, "Resize")
  end
  if type(size) ~= "table" or (#size ~= 1 and #size ~= 2) then
    E.raise("Resize: expected {height, width} or one size for the smaller edge, got " .. tostring(size))
  end
  if #size == 1 then return make("resize", { height = check_size_value(size[1], "size"), width = 0 }, "Resize") end
  return make("resize", { height = check_size_value(size[1], "height"), width = check_size_value(size[2], "width") },
    "Resize")
end

--- RandomRotation(d): an angle uniform in [-d, d] degrees (counter-clockwise
--- when positive), bilinear, zero fill. RandomRotation{min, max} for a range.
function M.RandomRotation(degrees)
  local lo, hi
  if type(degrees) == "number" then
    if degrees < 0 then E.raise("RandomRotation: degrees must be >= 0 when one number is given, got " .. degrees) end
    lo, hi = -degrees, degrees
  elseif type(degrees) == "table" and #degrees == 2 and type(degrees[1]) == "number"
      and type(degrees[2]) == "number" then
    lo, hi = degrees[1], degrees[2]
    if lo > hi then E.raise(string.format("RandomRotation: range {%g, %g} has min > max", lo, hi)) end
  else
    E.raise("RandomRotation: expected degrees (a number) or {min, max}, got " .. tostring(degrees))
  end
  return make("rotation", { min = lo, max = hi }, "RandomRotation")
end

--- RandomHorizontalFlip(p = 0.5)
function M.RandomHorizontalFlip(p)
  p = p == nil and 0.5 or p
  if type(p) ~= "number" or p < 0 or p > 1 then
    E.raise("RandomHorizontalFlip: p must be a number in [0, 1], got " .. tostring(p))
  end
  return make("hflip", { p = p }, "RandomHorizontalFlip")
end

--- ToTensor(): 0..255 pixels become float32 values in [0, 1].
function M.ToTensor() return make("to_tensor", {}, "ToTensor") end

local function number_list(v, what)
  if type(v) == "number" then return { v } end
  if type(v) ~= "table" or #v < 1 or #v > 4 then
    E.raise(string.format("Normalize: %s must be a number or a list of 1 to 4 numbers, got %s", what, tostring(v)))
  end
  local out = {}
  for i, x in ipairs(v) do
    if type(x) ~= "number" then E.raise(string.format("Normalize: %s[%d] must be a number", what, i)) end
    out[i] = x
  end
  return out
end

--- Normalize{mean = {...}, std = {...}} or Normalize(mean, std): per
--- channel (x - mean) / std; one entry applies to every channel.
function M.Normalize(mean, std)
  if type(mean) == "table" and std == nil and (mean.mean ~= nil or mean.std ~= nil) then
    mean, std = mean.mean, mean.std
  end
  local m, s = number_list(mean, "mean"), number_list(std, "std")
  if #m ~= #s then E.raise(string.format("Normalize: mean has %d entries but std has %d", #m, #s)) end
  for i, x in ipairs(s) do
    if x == 0 then E.raise(string.format("Normalize: std[%d] is 0", i)) end
  end
  return make("normalize", { mean = m, std = s }, "Normalize")
end

local Compose = { __name = "ddplua.transforms.Compose" }
Compose.__index = Compose

--- Compose{t1, t2, ...}: the transforms in order.
function M.Compose(list)
  return setmetatable({ transforms = M.list(list, "Compose") }, Compose)
end

function Compose.__call(self, img, opts) return core.image.apply(self.transforms, img, opts) end
function Compose.__len(self) return #self.transforms end
function Compose.__tostring(self)
  local parts = {}
  for i, t in ipairs(self.transforms) do parts[i] = tostring(t) end
  return "Compose{" .. table.concat(parts, ", ") .. "}"
end

--- The plain list of transform descriptions in a Compose, a list, or one
--- transform; errors name the entry that is not a transform.
function M.list(v, who)
  who = who or "transform"
  if getmetatable(v) == Compose then return v.transforms end
  if is_transform(v) then return { v } end
  if type(v) ~= "table" then
    E.raise(string.format("%s: expected a list of data.transforms, got %s", who, type(v)))
  end
  local out = {}
  for i = 1, #v do
    local t = v[i]
    if getmetatable(t) == Compose then
      for _, u in ipairs(t.transforms) do out[#out + 1] = u end
    elseif is_transform(t) then
      out[#out + 1] = t
    else
      E.raise(string.format("%s: entry %d is a %s, not a data.transforms object (the list is compiled to C, so " ..
        "a Lua function cannot be an entry)", who, i, type(t)))
    end
  end
  return out
end

M.is_transform = is_transform
return M
