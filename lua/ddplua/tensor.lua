-- Tensor methods written in Lua (the C ones live in src/lua/l_tensor*.c).
local core = require "ddplua.core"
local T = core.Tensor

--- t:type_as(u): t converted to u's dtype.
function T.type_as(t, u) return t:to(u:dtype()) end

--- t:is_floating_point()
function T.is_floating_point(t)
  local d = t:dtype()
  return d == "float32" or d == "float64" or d == "bfloat16" or d == "float16"
end

-- the dtype and device of a new tensor made like t: t's unless opts say otherwise
local function like(t, opts)
  return { dtype = opts and opts.dtype or t:dtype(), device = opts and opts.device or t:device() }
end

-- new_zeros / new_ones' size: a table, or the sizes as arguments (PyTorch's *size; a number was taken as the
-- options table, "attempt to index a number value"), then the options
local function size_and_opts(size, ...)
  if math.type(size) ~= "integer" then return size, ... end
  local s, rest, i = { size }, { ... }, 1
  while rest[i] ~= nil and type(rest[i]) ~= "table" do
    s[#s + 1], i = rest[i], i + 1
  end
  return s, rest[i]
end

--- t:new_zeros(size), t:new_ones(size) (size a table or the sizes), t:new_full(size, v): t's dtype and device
--- unless opts say otherwise
function T.new_zeros(t, ...)
  local size, opts = size_and_opts(...)
  return core.zeros(size, like(t, opts))
end
function T.new_ones(t, ...)
  local size, opts = size_and_opts(...)
  return core.ones(size, like(t, opts))
end
function T.new_full(t, size, v, opts) return core.full(size, v, like(t, opts)) end

--- t:clamp_min(v), t:clamp_max(v): clamp with one bound (a number)
local function bound(who, v)
  if type(v) ~= "number" then error(who .. ": expected a number as the bound, got " .. type(v), 3) end
  return v
end
function T.clamp_min(t, v) return t:clamp(bound("clamp_min", v), math.huge) end
function T.clamp_max(t, v) return t:clamp(-math.huge, bound("clamp_max", v)) end

--- ones_like / zeros_like / full_like / randn_like
local M = package.loaded["ddplua"]
function M.zeros_like(t, opts) return core.zeros(t:size(), like(t, opts)) end
function M.ones_like(t, opts) return core.ones(t:size(), like(t, opts)) end
function M.full_like(t, v, opts) return core.full(t:size(), v, like(t, opts)) end
function M.randn_like(t) return core.randn(t:size(), like(t)) end
function M.rand_like(t) return core.rand(t:size(), like(t)) end
M.clamp_min, M.clamp_max = T.clamp_min, T.clamp_max

--- A random-number generator independent of the global one (Philox seed +
--- counter offset), for reproducible shuffles: ddp.randperm(n, {generator=g}).
local Generator = {}
Generator.__index = Generator
function Generator:manual_seed(seed)
  if math.type(seed) ~= "integer" then error("Generator:manual_seed expects an integer, got " .. tostring(seed), 2) end
  self.seed, self.offset = seed, 0
  return self
end
function Generator:initial_seed() return self.seed end
function M.Generator(seed)
  return setmetatable({ seed = seed or 0, offset = 0 }, Generator)
end

return T
