-- The differential suite's random cases: a seeded generator (the same seed
-- gives the same cases on every machine: a 64-bit LCG in Lua integers, not
-- ddplua's or Lua's generator), shapes with size-0 and size-1 dimensions,
-- broadcasting partners, non-contiguous layouts (transpose, permute,
-- narrow, expand) and values of every kind: ordinary, tiny and huge
-- magnitudes, exact ties, negative zero, NaN and infinities; int64 values
-- beyond 2^53; uint8 over its whole range.
--
-- An op entry (tests/diff/ops.lua) describes its inputs through g:tensor
-- and g:number; a case is then a plain table the parent writes as JSON for
-- PyTorch and the ddplua child reads back.
local G = {}
G.__index = G

function G.new(seed)
  return setmetatable({ state = seed * 2862933555777941757 + 3037000493, inputs = {}, n_special = 0, max_abs = 0 }, G)
end

-- ---- numbers ---------------------------------------------------------------

function G:next64()
  self.state = self.state * 6364136223846793005 + 1442695040888963407
  return self.state
end
function G:float() return ((self:next64() >> 11) & ((1 << 53) - 1)) / 9007199254740992.0 end -- [0, 1)
function G:int(lo, hi) return lo + ((self:next64() >> 17) % (hi - lo + 1)) end
function G:chance(p) return self:float() < p end
function G:pick(list) return list[self:int(1, #list)] end
function G:normal()
  local u, v = self:float(), self:float()
  return math.sqrt(-2 * math.log(1 - u)) * math.cos(2 * math.pi * v)
end

local F32_MAX = 3.4028234663852886e38
-- v rounded to float32 (inputs must be exact in their dtype, so that the
-- reproducers rebuild them bit for bit)
local function f32(v)
  if v ~= v or v == math.huge or v == -math.huge then return v end
  if math.abs(v) > F32_MAX then return v > 0 and math.huge or -math.huge end
  return (string.unpack("<f", string.pack("<f", v)))
end
G.f32 = f32

local SPECIALS = { 0.0, -0.0, 0 / 0, math.huge, -math.huge, 1e30, -1e30, 1e-30, -1e-30 }

--- n values for dtype. opts: positive (> 0), range {lo, hi}, specials (false: none), ints (small integers only),
--- magnitude {lo, hi} (floats: normal values times 10^e, e drawn once per tensor from lo..hi).
function G:values(dtype, n, opts)
  opts = opts or {}
  local v = {}
  if dtype == "int64" then
    local mode = self:int(1, 10)
    for i = 1, n do
      local x
      if opts.range then x = self:int(opts.range[1], opts.range[2])
      elseif mode == 1 and opts.specials ~= false then -- beyond 2^53: exactness
        x = self:pick({ 4611686018427387903, -4611686018427387903, 9007199254740993, math.maxinteger, math.mininteger,
          4611686018427387902 })
      elseif mode <= 3 then x = self:int(-100, 100)
      else x = self:int(-4, 4) end
      if opts.positive and x <= 0 then x = 1 - x end
      v[i] = x
    end
    return v
  end
  if dtype == "uint8" then
    local wide = self:chance(0.5)
    for i = 1, n do
      local x = opts.range and self:int(opts.range[1], opts.range[2]) or (wide and self:int(0, 255) or self:int(0, 5))
      if opts.positive and x == 0 then x = 1 end
      v[i] = x
    end
    return v
  end
  -- floats
  local mode = opts.range and "range" or opts.magnitude and "magnitude" or (opts.ints and "ints" or self:pick({ "normal", "normal", "normal", "normal",
    "normal", "wide", "ints", "specials", "scaled", "scaled" }))
  if opts.specials == false and mode == "specials" then mode = "normal" end
  local scale = self:pick({ 1e-3, 1e3, 1e4, 30 })
  if mode == "magnitude" then scale = 10.0 ^ self:int(opts.magnitude[1], opts.magnitude[2]) end
  for i = 1, n do
    local x
    if mode == "range" then x = opts.range[1] + (opts.range[2] - opts.range[1]) * self:float()
    elseif mode == "wide" and opts.specials ~= false then
      x = (self:chance(0.5) and 1 or -1) * 10 ^ (self:float() * 60 - 30)
    elseif mode == "ints" then x = self:int(-3, 3) + 0.0
    elseif mode == "specials" and self:chance(0.25) then x = self:pick(SPECIALS)
    elseif mode == "scaled" or mode == "magnitude" then x = self:normal() * scale
    else x = self:normal() end
    if opts.positive then x = math.abs(x) + 1e-3 end
    if dtype == "float32" then x = f32(x) end
    v[i] = x
  end
  return v
end

-- ---- shapes -----------------------------------------------------------------

--- A shape of rank min_rank..max_rank (default 0..4); sizes mostly 1..5, sometimes 0 (unless no_zero).
function G:shape(opts)
  opts = opts or {}
  local rank = self:int(opts.min_rank or 0, opts.max_rank or 4)
  local s = {}
  for d = 1, rank do
    local r = self:float()
    s[d] = (r < 0.06 and not opts.no_zero) and 0 or (r < 0.3 and 1 or self:int(2, opts.max_size or 5))
  end
  return s
end

--- A shape that broadcasts with s: some dims replaced by 1, some leading ones dropped, or s itself.
function G:bshape(s)
  local out = {}
  local drop = self:chance(0.3) and self:int(0, #s) or 0
  for d = drop + 1, #s do out[#out + 1] = (self:chance(0.25) and 1 or s[d]) end
  if self:chance(0.1) then return {} end -- a 0-dim partner
  return out
end

local function numel(s)
  local n = 1
  for _, x in ipairs(s) do n = n * x end
  return n
end
G.numel = numel

-- ---- layouts -------------------------------------------------------------------

-- A base shape and the view ops that turn a tensor of that shape into one
-- of shape s with other strides: the same ops run in ddplua and PyTorch.
-- Ops: {"t", d0, d1} (transpose, 1-based), {"permute", p...}, {"narrow",
-- dim, start, len}, {"expand", shape...}.
function G:layout(s, opts)
  opts = opts or {}
  local r = #s
  local kinds = {}
  if r >= 2 then kinds[#kinds + 1] = "t" end
  if r >= 3 then kinds[#kinds + 1] = "permute" end
  if r >= 1 then kinds[#kinds + 1] = "narrow" end
  if r >= 1 and not opts.no_expand then kinds[#kinds + 1] = "expand" end
  if #kinds == 0 or self:chance(0.55) then return { table.unpack(s) }, {} end
  local kind = self:pick(kinds)
  local base = { table.unpack(s) }
  if kind == "t" then
    local a = self:int(1, r)
    local b = self:int(1, r - 1)
    if b >= a then b = b + 1 end
    base[a], base[b] = s[b], s[a]
    return base, { { "t", a, b } }
  elseif kind == "permute" then
    local p = {}
    for d = 1, r do p[d] = d end
    for d = r, 2, -1 do
      local k = self:int(1, d)
      p[d], p[k] = p[k], p[d]
    end
    -- base[p[d]] = s[d] so that base:permute(p) has shape s
    for d = 1, r do base[p[d]] = s[d] end
    return base, { { "permute", table.unpack(p) } }
  elseif kind == "narrow" then
    local d = self:int(1, r)
    local extra = self:int(1, 3)
    local start = self:int(1, extra + 1)
    base[d] = s[d] + extra
    return base, { { "narrow", d, start, s[d] } }
  else
    local dims = {}
    for d = 1, r do if s[d] ~= 1 then dims[#dims + 1] = d end end
    if #dims == 0 then return base, {} end
    local d = self:pick(dims)
    base[d] = 1
    return base, { { "expand", table.unpack(s) } }
  end
end

-- ---- inputs ----------------------------------------------------------------------

--- Registers an input tensor of shape s and dtype. opts: values opts (positive, range, specials, ints), grad (false:
--- never requires grad), contiguous (no layout), no_expand.
function G:tensor(name, s, dtype, opts)
  opts = opts or {}
  local base, ops = { table.unpack(s) }, {}
  if not opts.contiguous then base, ops = self:layout(s, opts) end
  local v = self:values(dtype, numel(base), opts)
  for _, x in ipairs(v) do
    if math.type(x) == "float" then
      if x ~= x or x == math.huge or x == -math.huge then self.n_special = self.n_special + 1
      elseif math.abs(x) > self.max_abs then self.max_abs = math.abs(x) end
    elseif math.abs(x) > self.max_abs then self.max_abs = math.abs(x) + 0.0 end
  end
  local grad = opts.grad ~= false and (dtype == "float32" or dtype == "float64")
  self.inputs[#self.inputs + 1] = { name = name, dtype = dtype, base_shape = base, layout = ops, values = v,
    requires_grad = grad }
end

--- A Lua number argument: an integer or a float (with specials unless opts.specials == false).
function G:number(opts)
  opts = opts or {}
  if opts.int or (not opts.float and self:chance(0.4)) then
    return self:pick(opts.ints or { 0, 1, 2, -1, 3, -2, 7, 300, 4611686018427387903 })
  end
  if opts.specials ~= false and self:chance(0.1) then return self:pick({ 0 / 0, math.huge, -math.huge, -0.0 }) end
  return self:pick(opts.floats or { 0.5, -1.5, 2.0, 0.1, 1e-3, 1e4, 3.0, -0.25 })
end

G.FLOATS = { "float32", "float64" }
G.ALL = { "float32", "float64", "int64", "uint8" }

return G
