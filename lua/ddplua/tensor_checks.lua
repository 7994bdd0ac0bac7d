-- The argument checks the Lua-composed tensor functions share (tensor_logic.lua, tensor_more.lua,
-- tensor_linalg.lua, tensor_reduce_more.lua, ...): the floating dtypes, a tensor argument (the error names the
-- function and which argument), a shape as "[2, 3]" for messages, a 1-based dim, two shapes broadcast, a boolean
-- option, a floating tensor, keepdim's squeeze.
local core = require "ddplua.core"
local E = require "ddplua.errors"

local M = {}

M.FLOATS = { float32 = true, float64 = true, bfloat16 = true, float16 = true }

function M.check_tensor(who, x, what)
  if not core.is_tensor(x) then E.raise(string.format("%s: expected a tensor%s, got %s", who, what or "", type(x))) end
end

function M.shape(t) return "[" .. table.concat(t:size(), ", ") .. "]" end

--- opts: nil (-> {}) or a table whose keys are all in `valid` (a list); errors name the function and the keys.
function M.check_opts(who, opts, valid)
  if opts == nil then return {} end
  if type(opts) ~= "table" then E.raise(string.format("%s: options must be a table, got %s", who, type(opts))) end
  for k in pairs(opts) do
    local ok = false
    for _, v in ipairs(valid) do ok = ok or k == v end
    if not ok then
      E.raise(string.format("%s: unknown option '%s' (valid options: %s)", who, tostring(k), table.concat(valid, ", ")))
    end
  end
  return opts
end

--- A 1-based dim of t, negative from the end (a 0-dim tensor takes 1 and -1, as PyTorch takes 0 and -1).
function M.norm_dim(who, t, d)
  if math.type(d) ~= "integer" then E.raise(who .. ": dim must be an integer (1-based), got " .. tostring(d)) end
  local nd = t:dim()
  local n = math.max(nd, 1)
  local r = d < 0 and d + n + 1 or d
  if r < 1 or r > n then E.raise(string.format("%s: dim %d is out of range for a %d-dimensional tensor", who, d, nd)) end
  return r
end

--- The shape a and b broadcast to (an error naming both shapes when they do not).
function M.broadcast_shape(who, a, b)
  local sa, sb = a:size(), b:size()
  local n, out = math.max(#sa, #sb), {}
  for k = 1, n do
    local x, y = sa[#sa - n + k] or 1, sb[#sb - n + k] or 1
    if x ~= y and x ~= 1 and y ~= 1 then
      E.raise(string.format("%s: the shapes %s and %s do not broadcast", who, M.shape(a), M.shape(b)))
    end
    out[k] = x == 1 and y or x
  end
  return out
end

--- opts[name] as a boolean (nil: dflt); the error names the function and the option.
function M.bool_opt(who, v, name, dflt)
  if v == nil then return dflt end
  if type(v) ~= "boolean" then E.raise(string.format("%s: %s must be a boolean, got %s", who, name, type(v))) end
  return v
end

function M.check_float(who, t)
  if not M.FLOATS[t:dtype()] then
    E.raise(string.format("%s: expected a floating-point tensor, got %s", who, t:dtype()))
  end
end

--- r without its dim d unless keepdim.
function M.squeeze_if(r, d, keepdim)
  if keepdim then return r end
  return r:squeeze(d)
end

return M
