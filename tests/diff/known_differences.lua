-- The deliberate differences from PyTorch 1.13, in one place: the
-- differential suite (tests/diff/) counts a mismatch an entry explains as
-- "known" instead of failing, and docs/pytorch_differences.md lists every
-- entry by its id with the same reason (run.lua refuses to run when the
-- page misses one). An entry:
--
--   { id = "short_name", ops = { "op", ... } or "*", reason = "why",
--     owner = "who changes it, for an item that is not deliberate but owned",
--     explains = function(case, result, detail) return true end }
--
-- case: the case as written to cases.json (op, args, inputs with dtype,
-- max_abs: the largest finite |input|, n_special: NaN/inf inputs);
-- result: PyTorch's (status, error, outs); detail: the mismatch text.
local K = {}

-- a number as the detail prints it (%.17g: "inf", "-nan" are not Lua numerals)
local function num(s)
  if s == nil then return nil end
  local l = s:lower()
  if l == "inf" or l == "+inf" then return math.huge end
  if l == "-inf" then return -math.huge end
  if l:find("nan", 1, true) then return 0 / 0 end
  return tonumber(s)
end
K.num = num

-- the two numbers of a mismatch's "element i: got vs want", or nil
local function pair(detail)
  local a, b = detail:match("element %d+: (%S+) vs (%S+)")
  return num(a), num(b)
end

local function nonfinite(v) return v ~= v or math.abs(v) == math.huge end

local function any_input(case, pred)
  for _, inp in ipairs(case.inputs) do
    if pred(inp) then return true end
  end
  return false
end

K.entries = {
  {
    id = "no_bool_dtype",
    ops = "*",
    reason = "ddplua has no bool dtype: comparisons return uint8 0/1 where PyTorch returns bool; the values agree. " ..
      "(The suite accepts uint8 for a bool result, and nothing else.)",
    dtype_alias = { bool = "uint8" },
    explains = function() return false end,
  },
  {
    id = "cast_out_of_range",
    ops = { "to", "fill", "copy", "setitem" },
    reason = "a float that is NaN, infinite or outside the integer type's range becomes 0 (NaN) or the type's " ..
      "limit (int64), or wraps modulo 256 (uint8), where PyTorch's conversion is undefined behaviour in C++ and " ..
      "gives what the CPU instruction gives (INT64_MIN on x86). ddplua's result is defined and the same on every " ..
      "device.",
    explains = function(case, _, detail)
      local to_int = (case.args.dt == "int64" or case.args.dt == "uint8") or
        any_input(case, function(i) return i.dtype == "int64" or i.dtype == "uint8" end)
      return to_int and (case.n_special > 0 or case.max_abs >= 2 ^ 31) and detail:find("element", 1, true) ~= nil
    end,
  },
  {
    id = "mixed_dtype_backward",
    ops = { "add", "sub", "mul", "div", "maximum", "minimum", "pow" },
    reason = "with operands of different dtypes, PyTorch's backward formulas evaluate some terms in an operand's " ..
      "own dtype (pow's exponent - 1 in float32 when the base is float64; log of an int64 base in float32) while " ..
      "ddplua computes the partial derivatives in the result's dtype: the gradients agree to float32 precision, " ..
      "not to float64's.",
    explains = function(case, _, detail)
      local dts = {}
      for _, i in ipairs(case.inputs) do dts[i.dtype] = true end
      local n = 0
      for _ in pairs(dts) do n = n + 1 end
      if not (n > 1 and detail:find("^gradient")) then return false end
      local a, b = pair(detail)
      return a ~= nil and b ~= nil and math.abs(a - b) <= 1e-5 * math.max(1, math.abs(b))
    end,
  },
  {
    id = "pytorch_elu_nan_grad",
    ops = { "elu" },
    reason = "PyTorch's elu backward at a NaN input gives NaN in its vectorised loop and the incoming gradient in " ..
      "its scalar tail (the two test x > 0 and x <= 0), so the result depends on the element's position; ddplua " ..
      "gives NaN everywhere, as the vectorised loop does.",
    explains = function(case, _, detail) return case.n_special > 0 and detail:find("^gradient") ~= nil end,
  },
  {
    id = "pytorch_noncontiguous",
    ops = "*",
    reason = "PyTorch 1.13 computes some ops wrongly, or refuses them, on non-contiguous inputs: batch_norm's CPU " ..
      "backward reads an expanded (stride-0) weight as contiguous (gradients of 1e24 where 0.65 is right) and, in " ..
      "evaluation mode, mixes up the gradient of a permuted input; conv2d refuses an empty batch whose input is " ..
      "not contiguous ('view size is not compatible'). The suite runs PyTorch again on the same values made " ..
      "contiguous and counts a mismatch as this known one only when ddplua agrees with that run.",
    explains = function() return false end, -- decided by run_cases.lua with PyTorch's contiguous run
  },
  {
    id = "pytorch_division_gradients",
    ops = { "div", "div_number", "rdiv_number" },
    reason = "PyTorch's gradient of a / b with respect to b is -grad * a / (b * b), and number / b runs as " ..
      "reciprocal(b) * number, so b * b or 1 / b overflow or underflow (inf, 0 * inf = NaN) where ddplua's " ..
      "-grad * (a / b) / b stays finite; the values agree wherever both are finite.",
    explains = function(_, _, detail)
      if not (detail:find("^gradient of %w+: element") or detail:find("^output %d+: element")) then return false end
      local a, b = pair(detail)
      return a ~= nil and b ~= nil and (nonfinite(a) ~= nonfinite(b) or (a ~= a) ~= (b ~= b))
    end,
  },
  {
    id = "summation_order",
    ops = { "sum", "mean", "matmul", "linear", "linear_relu", "linear_nobias", "conv2d", "conv2d_nobias",
      "batch_norm", "layer_norm", "avg_pool2d" },
    reason = "not a difference of the op: a sum whose terms include +inf and -inf, or terms of 1e20 and more that " ..
      "cancel, depends on the order of the additions (NaN or inf, or any value within the terms' rounding error); " ..
      "ddplua and PyTorch add in different orders (ddplua accumulates float32 sums in float64). Only cases with " ..
      "such inputs are counted here.",
    explains = function(case, _, detail)
      local a, b = pair(detail)
      if a == nil or b == nil then return false end
      -- products that overflow: float32 inputs beyond sqrt(3.4e38); a fused multiply-add does not round the
      -- product to inf, so inf - inf (NaN) in one order is -inf in another
      local overflow = case.max_abs >= (any_input(case, function(i) return i.dtype == "float32" end) and 1.8e19
        or 1.3e154)
      if nonfinite(a) and nonfinite(b) then return case.n_special > 0 or overflow end -- NaN vs inf, inf vs -inf
      return case.max_abs >= 1e20 or (case.n_special > 0 and nonfinite(a) ~= nonfinite(b))
    end,
  },
  {
    id = "softmax_large_logits",
    ops = { "softmax", "log_softmax", "cross_entropy", "cross_entropy_weight", "cross_entropy_probs", "nll_loss" },
    owner = "speed (issue 15): the vectorised float32 softmax / log_softmax / cross-entropy row kernels (bug 13)",
    reason = "not deliberate, owned elsewhere: the row kernels compute exp(x - lse) with lse rounded to the logits' " ..
      "magnitude, so probabilities are off by about |x| * 6e-8 in float32 (1e-5 from |x| = 100; the " ..
      "cross-entropy gradient drifts from 1e4, softmax breaks from 1e10: bug 13 of issue 11); the rewrite that " ..
      "computes from exp(x - max) as PyTorch does belongs to the CPU-kernel work and lands with it.",
    explains = function(case)
      local f32 = any_input(case, function(i) return i.dtype == "float32" end)
      return case.max_abs >= (f32 and 64 or 1e8)
    end,
  },
}

K.by_id = {}
for _, e in ipairs(K.entries) do K.by_id[e.id] = e end

-- the dtype ddplua gives for a PyTorch result dtype it has no equivalent of
K.dtype_alias = {}
for _, e in ipairs(K.entries) do
  for from, to in pairs(e.dtype_alias or {}) do K.dtype_alias[from] = to end
end

local function applies(e, op)
  if e.ops == "*" then return true end
  for _, o in ipairs(e.ops) do
    if o == op then return true end
  end
  return false
end

--- The id of the entry that explains a mismatch, or nil.
function K.explain(case, result, detail)
  for _, e in ipairs(K.entries) do
    if applies(e, case.op) and e.explains(case, result, detail) then return e.id end
  end
  return nil
end

return K
