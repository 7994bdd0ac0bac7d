-- The argument checks the Lua-composed tensor functions share (tensor_logic.lua, tensor_more.lua,
-- tensor_linalg.lua): the floating dtypes, a tensor argument (the error names the function and which argument),
-- a shape as "[2, 3]" for messages.
local core = require "ddplua.core"
local E = require "ddplua.errors"

local M = {}

M.FLOATS = { float32 = true, float64 = true, bfloat16 = true, float16 = true }

function M.check_tensor(who, x, what)
  if not core.is_tensor(x) then E.raise(string.format("%s: expected a tensor%s, got %s", who, what or "", type(x))) end
end

function M.shape(t) return "[" .. table.concat(t:size(), ", ") .. "]" end

return M
