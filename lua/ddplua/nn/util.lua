-- Argument checks shared by the nn modules: errors name the module and
-- what was expected.
local ddp = require "ddplua"

local M = {}

--- Checks that opts is nil or a table whose keys are all in `valid`.
function M.check_opts(who, opts, valid)
  if opts == nil then return {} end
  if type(opts) ~= "table" then error(string.format("%s: options must be a table, got %s", who, type(opts)), 3) end
  for k in pairs(opts) do
    local ok = false
    for _, v in ipairs(valid) do ok = ok or k == v end
    if not ok then
      error(string.format("%s: unknown option '%s' (valid options: %s)", who, tostring(k), table.concat(valid, ", ")),
        3)
    end
  end
  return opts
end

--- A positive (or, with allow_zero, non-negative) integer.
function M.check_int(who, what, v, allow_zero)
  if math.type(v) ~= "integer" or v < 0 or (v == 0 and not allow_zero) then
    error(string.format("%s: %s must be a %s integer, got %s", who, what, allow_zero and "non-negative" or "positive",
      tostring(v)), 3)
  end
  return v
end

--- An integer or a pair of integers -> h, w.
function M.check_pair(who, what, v, allow_zero)
  if type(v) == "table" then
    if #v ~= 2 then
      error(string.format("%s: %s must be an integer or a pair {h, w}, got %d values", who, what, #v), 3)
    end
    return M.check_int(who, what, v[1], allow_zero), M.check_int(who, what, v[2], allow_zero)
  end
  M.check_int(who, what, v, allow_zero)
  return v, v
end

--- The form the functional ops take: one number when both sides agree.
function M.pair_arg(h, w) if h == w then return h end return { h, w } end

function M.shape_str(t) return "[" .. table.concat(t:size(), ", ") .. "]" end

--- A tensor option table for creating parameters.
function M.tensor_opts(opts) return { dtype = opts.dtype, device = opts.device } end

--- A new parameter: values from make() built without recording a graph.
function M.parameter(make)
  local t = ddp.no_grad(make)
  return t:requires_grad_()
end

return M
