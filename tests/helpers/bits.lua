-- Bit-for-bit comparison of two tensors for specs that hold a fast path to
-- a reference path of the same math: NaN equals NaN (any payload), and -0
-- differs from +0. The elements are compared as float64 (every float32 and
-- bfloat16 value is exact there).
local M = {}

-- Raises naming the first element that differs; `ref` names the reference in the message. The dtypes may
-- differ (a float32 path against a float64 one): callers that need one dtype assert it.
function M.same_bits(a, b, what, ref)
  local x, y = a:double():reshape(-1):totable(), b:double():reshape(-1):totable()
  if #x ~= #y then error(string.format("%s: %d elements, %s has %d", what, #x, ref or "the reference", #y), 2) end
  for i = 1, #x do
    local ok = (x[i] ~= x[i] and y[i] ~= y[i]) or (x[i] == y[i] and 1 / x[i] == 1 / y[i])
    if not ok then error(string.format("%s: element %d is %s, %s gives %s", what, i, x[i], ref or "the reference", y[i]), 2) end
  end
end

return M
