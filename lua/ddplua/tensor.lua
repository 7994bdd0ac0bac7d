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

--- t:new_zeros(size), t:new_ones(size), t:new_full(size, v): t's dtype and device unless opts say otherwise
function T.new_zeros(t, size, opts)
  return core.zeros(size, { dtype = opts and opts.dtype or t:dtype(), device = opts and opts.device or t:device() })
end
function T.new_ones(t, size, opts)
  return core.ones(size, { dtype = opts and opts.dtype or t:dtype(), device = opts and opts.device or t:device() })
end
function T.new_full(t, size, v, opts)
  return core.full(size, v, { dtype = opts and opts.dtype or t:dtype(), device = opts and opts.device or t:device() })
end

--- t:clamp_min(v), t:clamp_max(v): clamp with one bound (a number)
function T.clamp_min(t, v) return t:clamp(v, math.huge) end
function T.clamp_max(t, v) return t:clamp(-math.huge, v) end

--- ones_like / zeros_like / full_like / randn_like
local M = package.loaded["ddplua"]
function M.zeros_like(t, opts)
  return core.zeros(t:size(), { dtype = opts and opts.dtype or t:dtype(), device = opts and opts.device or t:device() })
end
function M.ones_like(t, opts)
  return core.ones(t:size(), { dtype = opts and opts.dtype or t:dtype(), device = opts and opts.device or t:device() })
end
function M.full_like(t, v, opts)
  return core.full(t:size(), v, { dtype = opts and opts.dtype or t:dtype(), device = opts and opts.device or t:device() })
end
function M.randn_like(t) return core.randn(t:size(), { dtype = t:dtype(), device = t:device() }) end
function M.rand_like(t) return core.rand(t:size(), { dtype = t:dtype(), device = t:device() }) end
function M.clamp_min(t, v) return T.clamp_min(t, v) end
function M.clamp_max(t, v) return T.clamp_max(t, v) end

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
