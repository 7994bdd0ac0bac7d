-- How the differential suite (tests/diff/) recognises each known
-- difference from PyTorch 1.13 in a case. What the differences are, and
-- why, is written once, in docs/pytorch_differences.md: every entry here
-- has a "## `id`" section there (an "Owner:" line marks an owned item that
-- is not deliberate) and K.check_page refuses a page and a list that
-- disagree. A mismatch an entry explains is counted as "known". An entry:
--
--   { id = "short_name", ops = { "op", ... } or "*",
--     explains = function(case, result, detail) return true end }
--
-- case: the case as written to cases.json (op, A: its decoded arguments, inputs with dtype,
-- max_abs: the largest finite |input|, n_special: NaN/inf inputs);
-- result: PyTorch's (status, error, outs); detail: the mismatch text ("element i: got vs want (largest |want| s)"
-- for floats).
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

-- the largest |want| of the compared tensor ("(largest |want| s)" after a float mismatch), or nil
local function scale_of(detail) return num(detail:match("%(largest |want| (%S+)%)")) end

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
    dtype_alias = { bool = "uint8" },
    explains = function() return false end,
  },
  {
    id = "cast_out_of_range",
    ops = { "to", "fill", "copy", "setitem" },
    explains = function(case, _, detail)
      local to_int = (case.A.dt == "int64" or case.A.dt == "uint8") or
        any_input(case, function(i) return i.dtype == "int64" or i.dtype == "uint8" end)
      return to_int and (case.n_special > 0 or case.max_abs >= 2 ^ 31) and detail:find("element", 1, true) ~= nil
    end,
  },
  {
    id = "mixed_dtype_backward",
    ops = { "add", "sub", "mul", "div", "maximum", "minimum", "pow" },
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
    explains = function(case, _, detail) return case.n_special > 0 and detail:find("^gradient") ~= nil end,
  },
  {
    id = "pytorch_noncontiguous",
    ops = "*",
    explains = function() return false end, -- decided by run_cases.lua with PyTorch's contiguous run
  },
  {
    id = "pytorch_division_gradients",
    ops = { "div", "div_number", "rdiv_number" },
    explains = function(_, _, detail)
      if not (detail:find("^gradient of %w+: element") or detail:find("^output %d+: element")) then return false end
      local a, b = pair(detail)
      return a ~= nil and b ~= nil and (nonfinite(a) ~= nonfinite(b) or (a ~= a) ~= (b ~= b))
    end,
  },
  {
    id = "summation_order",
    ops = { "sum", "mean", "matmul", "linear", "linear_relu", "linear_nobias", "conv2d", "conv2d_nobias",
      "conv2d_winograd", "conv_transpose2d", "conv_transpose2d_nobias", "batch_norm", "layer_norm", "avg_pool2d" },
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
    id = "interpolate_nonfinite",
    ops = { "interpolate_linear" },
    explains = function(case, _, detail)
      local a, b = pair(detail)
      return case.n_special > 0 and a ~= nil and b ~= nil and (nonfinite(a) or nonfinite(b))
    end,
  },
  {
    id = "winograd_rounding",
    ops = { "conv2d_winograd" },
    explains = function(case, _, detail)
      local got, want = pair(detail)
      local scale = scale_of(detail)
      return case.n_special == 0 and got ~= nil and want ~= nil and scale ~= nil and not nonfinite(got) and
        not nonfinite(want) and math.abs(got - want) <= 5e-5 * scale
    end,
  },
  {
    id = "ignored_rows_zero_gradient",
    ops = { "cross_entropy", "cross_entropy_weight", "cross_entropy_large" },
    explains = function(case, _, detail)
      local got, want = pair(detail)
      return case.n_special > 0 and case.A.ig ~= nil and case.A.ig ~= -100 and detail:find("^gradient of x:")
        ~= nil and got == 0 and want ~= want
    end,
  },
  -- (the model ops' entries, tests/diff/ops_models.lua)
  {
    id = "fused_attention_backward",
    ops = { "sdpa", "sdpa_causal", "sdpa_bool_mask", "sdpa_float_mask" },
    explains = function(case, _, detail)
      return case.max_abs >= 100 and detail:find("^gradient of %w+: element") ~= nil
    end,
  },
  {
    id = "var_std_constant_input",
    ops = { "var", "std" },
    explains = function(case, _, detail)
      local got = pair(detail)
      local x = case.inputs[1] -- every element the same: one stored value (a scalar or one element, expanded)
      if not detail:find("^gradient of x:") or got ~= 0 or x == nil or case.n_special > 0 then return false end
      local numel = 1
      for _, d in ipairs(x.base_shape) do numel = numel * d end
      return numel == 1
    end,
  },
  {
    id = "var_std_nonfinite_gradient",
    ops = { "var", "std" },
    explains = function(case, _, detail)
      local got, want = pair(detail)
      return case.n_special > 0 and detail:find("^gradient of x:") ~= nil and got ~= nil and want ~= nil and
        (nonfinite(got) or nonfinite(want))
    end,
  },
  {
    id = "scan_gradients",
    ops = { "cumprod", "logcumsumexp" },
    explains = function(case, _, detail)
      local got, want = pair(detail)
      if not detail:find("^gradient of x:") or got == nil or want == nil then return false end
      if want ~= want then return true end
      if case.op ~= "logcumsumexp" then return false end
      if case.n_special > 0 or case.max_abs >= 1e20 then return true end
      -- PyTorch's log-space sums round exponents of size |x| to their ulp, once a term: results off by up to
      -- n |x| ulps of the scale for n terms, n up to the generator's longest line (70; an expanded input repeats
      -- one value along it)
      local eps = any_input(case, function(i) return i.dtype ~= "float64" end) and 2 ^ -23 or 2 ^ -52
      local scale = scale_of(detail)
      return scale ~= nil and not nonfinite(got) and math.abs(got - want) <= 4 * 70 * eps * case.max_abs * scale
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

--- The sections of docs/pytorch_differences.md ("## `id`" headings): id -> { text = ..., owner = ... or nil }, and
--- nil plus the reason when the page and K.entries disagree.
function K.check_page(page)
  local sections, order = {}, {}
  local id
  for line in (page .. "\n"):gmatch("([^\n]*)\n") do
    local h = line:match("^## `([%w_]+)`")
    if h then
      id = h
      sections[id] = { text = {} }
      order[#order + 1] = id
    elseif line:match("^#") then
      id = nil
    elseif id then
      local sec = sections[id]
      local owner = line:match("^Owner: (.+)")
      if owner then sec.owner, sec.in_owner = owner, true
      elseif sec.in_owner and line:match("%S") then sec.owner = sec.owner .. " " .. line
      else sec.in_owner = false end
      sec.text[#sec.text + 1] = line
    end
  end
  for _, e in ipairs(K.entries) do
    if not sections[e.id] then return nil, "docs/pytorch_differences.md has no section ## `" .. e.id .. "`" end
  end
  for _, s in ipairs(order) do
    if not K.by_id[s] then
      return nil, "docs/pytorch_differences.md lists `" .. s .. "`, which tests/diff/known_differences.lua lacks"
    end
    sections[s].text = table.concat(sections[s].text, " "):gsub("%s+", " "):gsub("^ ", "")
  end
  return sections
end

--- The id of the entry that explains a mismatch, or nil.
function K.explain(case, result, detail)
  for _, e in ipairs(K.entries) do
    if applies(e, case.op) and e.explains(case, result, detail) then return e.id end
  end
  return nil
end

return K
