-- Indexing a tensor by a tensor, as PyTorch's advanced indexing along the first dims (the C metamethods of
-- src/lua/l_tensor.c call the two functions registered at the end for a tensor key; an integer key selects):
--
--   t[mask]          mask: uint8 (ddplua's bool, a comparison's result) of t's shape -> 1-D, the values where it
--                    is true (masked_select); of the shape of t's first k dims -> [count, the other dims...]
--   t[positions]     int64 1-based positions along dim 1 (-1 the last, as t[-1]), any shape -> [positions' shape...,
--                    the other dims...]
--   t[mask] = v      v a number, or a tensor broadcast to [count, the other dims...]
--   t[positions] = v v a number, or a tensor broadcast to [positions' shape..., the other dims...]; a position given
--                    twice keeps one of its values (as PyTorch's index_put_ without accumulate)
--
-- Reads have gradients (index_select, masked_select); writes are recorded by autograd as copy_ is (through a view
-- too). Without autograd (neither t nor v requires grad, or grad mode off) a number written by a mask or positions,
-- and a tensor written by positions, go in place (masked_fill_, index_fill_, index_copy_); a tensor written by a
-- mask goes through masked_scatter and a copy_ back.
local ddp = require "ddplua"
local core = ddp.core
local E = require "ddplua.errors"

local function shape_str(s) return "[" .. table.concat(s, ", ") .. "]" end

-- the mask's dim count k after checking that it matches t's first k dims
local function mask_dims(who, t, mask)
  local ms, ts = mask:size(), t:size()
  local ok = #ms >= 1 and #ms <= #ts
  for i = 1, #ms do ok = ok and ms[i] == ts[i] end
  if not ok then
    E.raise(string.format("%s: the mask %s must have the shape of the tensor %s or of its first dims", who,
      shape_str(ms), shape_str(ts)))
  end
  return #ms
end

-- t's dims after the first k
local function rest_of(t, k)
  local ts, r = t:size(), {}
  for i = k + 1, #ts do r[#r + 1] = ts[i] end
  return r
end

local function concat(a, b)
  local out = {}
  for _, v in ipairs(a) do out[#out + 1] = v end
  for _, v in ipairs(b) do out[#out + 1] = v end
  return out
end

local function key_kind(who, key)
  local dt = key:dtype()
  if dt == "uint8" then return "mask" end
  if dt == "int64" then return "positions" end
  E.raise(string.format("%s: a tensor index must hold int64 positions (1-based) or be a uint8 mask (a " ..
    "comparison's result), got %s", who, dt))
end

-- the rows of t's first k dims (flattened) that the mask selects: int64 1-based positions
local function mask_rows(mask) return mask:reshape(-1):nonzero():view(-1) end

-- positions along dim 1 of t, flattened, the negative ones counted from the end
local function flat_positions(t, key)
  local flat = key:reshape(-1)
  if flat:numel() > 0 and flat:min():item() < 0 then flat = flat + flat:lt(0):to("int64") * (t:size(1) + 1) end
  return flat
end

-- fn(...) with a failure reported at the user's line (index_select's range error, ...)
local function at_user_line(fn, ...)
  local ok, r = pcall(fn, ...)
  if not ok then E.raise((tostring(r):gsub("^[^:\n]*%.lua:%d+: ", ""))) end
  return r
end

local index_by_tensor, newindex_by_tensor

function index_by_tensor(t, key)
  local who = "index"
  if key_kind(who, key) == "mask" then
    local k = mask_dims(who, t, key)
    if k == t:dim() then return t:masked_select(key) end
    return t:reshape(concat({ -1 }, rest_of(t, k))):index_select(1, mask_rows(key))
  end
  if t:dim() == 0 then E.raise(who .. ": cannot index a 0-dimensional tensor by positions") end
  return t:index_select(1, flat_positions(t, key)):view(concat(key:size(), rest_of(t, 1)))
end

-- v as a tensor of t's dtype and device, broadcast to shape
local function source(who, t, v, shape)
  local ok, s = pcall(function() return v:to(t:dtype(), t:device()):expand(shape) end)
  if not ok then
    E.raise(string.format("%s: the value %s cannot be broadcast to the indexed shape %s", who, shape_str(v:size()),
      shape_str(shape)))
  end
  return s
end

function newindex_by_tensor(t, key, v)
  local who = "index assignment"
  if type(v) ~= "number" and not ddp.is_tensor(v) then
    E.raise(string.format("%s: the value must be a number or a tensor, got %s", who, type(v)))
  end
  local grad = ddp.is_grad_enabled() and (t.requires_grad or (ddp.is_tensor(v) and v.requires_grad))
  if key_kind(who, key) == "mask" then
    local k = mask_dims(who, t, key)
    local full = key
    if k < t:dim() then -- the rows' mask over every element
      local s = key:size()
      for _ = k + 1, t:dim() do s[#s + 1] = 1 end
      full = key:view(s):expand(t:size())
    end
    if type(v) == "number" then
      t:masked_fill_(full, v)
      return
    end
    local count = key:sum():item()
    local src = source(who, t, v, concat({ count }, rest_of(t, k))):reshape(-1)
    t:copy_(t:masked_scatter(full, src))
    return
  end
  if t:dim() == 0 then E.raise(who .. ": cannot index a 0-dimensional tensor by positions") end
  local flat = flat_positions(t, key)
  if type(v) == "number" then
    if grad then t:copy_(t:index_fill(1, flat, v)) else t:index_fill_(1, flat, v) end
    return
  end
  local rest = rest_of(t, 1)
  local src = source(who, t, v, concat(key:size(), rest)):reshape(concat({ flat:numel() }, rest))
  if grad then t:copy_(t:index_copy(1, flat, src)) else t:index_copy_(1, flat, src) end
end

core._set_tensor_indexers(function(t, key) return at_user_line(index_by_tensor, t, key) end,
  function(t, key, v) at_user_line(newindex_by_tensor, t, key, v) end)
