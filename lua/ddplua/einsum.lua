-- ddp.einsum(equation, a [, b, ...]) (or einsum(equation, {a, b, ...})):
-- PyTorch's einsum for the contractions models use, routed through
-- permute, reshape, sum and one batched matmul per pair of operands, so
-- the gradient comes from those ops.
--
-- Per pair: labels only one operand has and the result does not are
-- summed away first; the labels both share and the result keeps are the
-- batch, those both share and it drops are contracted, the rest are each
-- operand's own rows / columns: A becomes [batch, rows, k], B [batch, k,
-- cols], and the product is permuted into the result's order. "ij,jk->ik",
-- "bij,bjk->bik", "bhtd,bhsd->bhts", "ij->ji", "ij->", "i,j->ij",
-- "bhts,bhsd->bhtd" all come out this way. Without "->" the result takes
-- the labels that appear once, in alphabetical order (PyTorch's rule).
-- Ellipses and a label repeated within one operand (diagonals) are errors.
local ddp = require "ddplua"

-- errors carry no position here; the entry point re-raises them at the caller's line
local function fail(fmt, ...) error("einsum: " .. string.format(fmt, ...), 0) end

local function parse(eq, nops)
  if type(eq) ~= "string" then fail("the equation must be a string, got %s", type(eq)) end
  eq = eq:gsub("%s", "")
  if eq:find("...", 1, true) then fail("ellipses ('...') are not supported (name every dimension)") end
  local lhs, rhs = eq:match("^([^%-]*)%->(.*)$")
  if not lhs then lhs = eq end
  local inputs = {}
  for part in (lhs .. ","):gmatch("([^,]*),") do inputs[#inputs + 1] = part end
  if #inputs ~= nops then fail("the equation names %d operand(s), got %d tensor(s)", #inputs, nops) end
  local count = {}
  for i, s in ipairs(inputs) do
    if not s:match("^[%a]*$") then fail("operand %d's subscripts '%s' must be letters", i, s) end
    local seen = {}
    for c in s:gmatch(".") do
      if seen[c] then fail("the label '%s' repeats within operand %d (diagonals are not supported)", c, i) end
      seen[c] = true
      count[c] = (count[c] or 0) + 1
    end
  end
  if not rhs then
    local once = {}
    for c, n in pairs(count) do if n == 1 then once[#once + 1] = c end end
    table.sort(once)
    rhs = table.concat(once)
  end
  if not rhs:match("^[%a]*$") then fail("the result's subscripts '%s' must be letters", rhs) end
  local seen = {}
  for c in rhs:gmatch(".") do
    if not count[c] then fail("the result's label '%s' is not in any operand", c) end
    if seen[c] then fail("the label '%s' repeats in the result", c) end
    seen[c] = true
  end
  return inputs, rhs
end

local function chars(s)
  local out = {}
  for c in s:gmatch(".") do out[#out + 1] = c end
  return out
end

local function has(s, c) return s:find(c, 1, true) ~= nil end

-- t's labels (a string) checked against its shape, sizes recorded in `sizes`
local function check_sizes(t, labels, i, sizes)
  if t:dim() ~= #labels then
    fail("operand %d has %d dimensions but its subscripts '%s' name %d", i, t:dim(), labels, #labels)
  end
  for d, c in ipairs(chars(labels)) do
    local n = t:size(d)
    if sizes[c] and sizes[c] ~= n then
      fail("the label '%s' has size %d in operand %d but %d elsewhere", c, n, i, sizes[c])
    end
    sizes[c] = n
  end
end

-- sums t over the labels not in keep; returns the tensor and its labels
local function sum_out(t, labels, keep)
  local dims, rest = {}, {}
  for d, c in ipairs(chars(labels)) do
    if has(keep, c) then rest[#rest + 1] = c else dims[#dims + 1] = d end
  end
  if #dims == 0 then return t, labels end
  return t:sum(dims), table.concat(rest)
end

-- t (with labels) permuted into `order` (a string of its labels)
local function permute_to(t, labels, order)
  if labels == order or #order <= 1 then return t end
  local perm = {}
  for i, c in ipairs(chars(order)) do perm[i] = labels:find(c, 1, true) end
  return t:permute(perm)
end

local function prod(sizes, labels)
  local n = 1
  for c in labels:gmatch(".") do n = n * sizes[c] end
  return n
end

local function shape_of(sizes, labels)
  local s = {}
  for i, c in ipairs(chars(labels)) do s[i] = sizes[c] end
  return s
end

-- the product of a and b keeping the labels in `keep` (the result's and
-- those later operands still need)
local function contract(a, la, b, lb, keep, sizes)
  a, la = sum_out(a, la, lb .. keep)
  b, lb = sum_out(b, lb, la .. keep)
  local batch, rows, cols, k = {}, {}, {}, {}
  for _, c in ipairs(chars(la)) do
    if has(lb, c) then
      if has(keep, c) then batch[#batch + 1] = c else k[#k + 1] = c end
    else
      rows[#rows + 1] = c
    end
  end
  for _, c in ipairs(chars(lb)) do if not has(la, c) then cols[#cols + 1] = c end end
  batch, rows, cols, k = table.concat(batch), table.concat(rows), table.concat(cols), table.concat(k)
  local nb, m, n, kk = prod(sizes, batch), prod(sizes, rows), prod(sizes, cols), prod(sizes, k)
  local A = permute_to(a, la, batch .. rows .. k):reshape(nb, m, kk)
  local B = permute_to(b, lb, batch .. k .. cols):reshape(nb, kk, n)
  local C = A:matmul(B)
  local labels = batch .. rows .. cols
  local shape = shape_of(sizes, labels)
  return #shape == 0 and C:reshape({}) or C:reshape(shape), labels
end

local function einsum(eq, ...)
  local ops = { ... }
  if #ops == 1 and type(ops[1]) == "table" and not ddp.is_tensor(ops[1]) then ops = ops[1] end
  if #ops == 0 then fail("expected at least one operand") end
  for i, t in ipairs(ops) do
    if not ddp.is_tensor(t) then fail("operand %d is a %s, expected a tensor", i, type(t)) end
  end
  local inputs, out = parse(eq, #ops)
  local sizes = {}
  for i, t in ipairs(ops) do check_sizes(t, inputs[i], i, sizes) end
  local cur, labels = ops[1], inputs[1]
  for i = 2, #ops do
    local later = out
    for j = i + 1, #ops do later = later .. inputs[j] end
    cur, labels = contract(cur, labels, ops[i], inputs[i], later, sizes)
  end
  cur, labels = sum_out(cur, labels, out)
  local r = permute_to(cur, labels, out)
  if r == ops[1] then r = r:clone() end -- einsum("ij->ij", a) is a new tensor, as PyTorch's
  return r
end

return function(eq, ...)
  local res = table.pack(pcall(einsum, eq, ...))
  if not res[1] then error(res[2], 2) end
  return res[2]
end
