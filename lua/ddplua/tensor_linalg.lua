-- PyTorch's vector and matrix products spelled with matmul (each a method and a ddp. function, with PyTorch's
-- argument order and shape checks, the errors naming the shapes): dot, mv, outer, addmm and baddbmm
-- (beta * input + alpha * product, input broadcast to the product's shape and ignored when beta is 0, as PyTorch
-- does), trace and diag (a vector on a diagonal of a new matrix, or a matrix's diagonal as a vector; offset > 0
-- above the main diagonal, < 0 below). Their gradients come from the composition. diag of a matrix with an
-- offset past its corner is empty (PyTorch 1.13 raises "integer multiplication overflow" there).
local core = require "ddplua.core"
local E = require "ddplua.errors"
local T = core.Tensor
local M = package.loaded["ddplua"]

local checks = require "ddplua.tensor_checks"
local FLOATS, check_tensor, shape = checks.FLOATS, checks.check_tensor, checks.shape

--- ddp.dot(a, b): the inner product of two 1-D tensors of one size and dtype (0-dim)
function T.dot(a, b)
  check_tensor("dot", a)
  check_tensor("dot", b, " as the second operand")
  if a:dim() ~= 1 or b:dim() ~= 1 or a:size(1) ~= b:size(1) then
    E.raise(string.format("dot: expected two 1-D tensors of the same size, got %s and %s", shape(a), shape(b)))
  end
  if a:dtype() ~= b:dtype() then
    E.raise(string.format("dot: expected two tensors of the same dtype, got %s and %s", a:dtype(), b:dtype()))
  end
  return core.matmul(a, b)
end

--- ddp.mv(m, v): [n, m] @ [m] -> [n]
function T.mv(m, v)
  check_tensor("mv", m)
  check_tensor("mv", v, " as the vector")
  if m:dim() ~= 2 or v:dim() ~= 1 or m:size(2) ~= v:size(1) then
    E.raise(string.format("mv: expected a matrix [n, m] and a vector [m], got %s and %s", shape(m), shape(v)))
  end
  if m:dtype() ~= v:dtype() then
    E.raise(string.format("mv: expected two tensors of the same dtype, got %s and %s", m:dtype(), v:dtype()))
  end
  return core.matmul(m, v)
end

--- ddp.outer(a, b): [n] and [m] -> [n, m], a[i] * b[j] (the dtype of a * b)
function T.outer(a, b)
  check_tensor("outer", a)
  check_tensor("outer", b, " as the second operand")
  if a:dim() ~= 1 or b:dim() ~= 1 then
    E.raise(string.format("outer: expected two 1-D tensors, got %s and %s", shape(a), shape(b)))
  end
  return a:unsqueeze(2) * b:unsqueeze(1)
end

local function scale_opts(who, opts, int)
  if opts ~= nil and type(opts) ~= "table" then E.raise(who .. ": expected an options table {beta=, alpha=}") end
  opts = opts or {}
  for k in pairs(opts) do
    if k ~= "beta" and k ~= "alpha" then E.raise(who .. ": unknown option '" .. tostring(k) .. "'") end
  end
  local beta, alpha = opts.beta or 1, opts.alpha or 1
  if type(beta) ~= "number" or type(alpha) ~= "number" then E.raise(who .. ": beta and alpha must be numbers") end
  if int and (math.type(beta) ~= "integer" or math.type(alpha) ~= "integer") then
    E.raise(who .. ": beta and alpha must be integers for integer tensors")
  end
  return beta, alpha
end

-- beta * input + alpha * product, input broadcast to the product's shape (and not read when beta is 0)
local function add_scaled(who, input, prod, a, b, opts)
  local dt = input:dtype()
  if a:dtype() ~= dt or b:dtype() ~= dt then
    E.raise(string.format("%s: expected tensors of one dtype, got %s, %s and %s", who, dt, a:dtype(), b:dtype()))
  end
  local beta, alpha = scale_opts(who, opts, not FLOATS[dt])
  local want, have = prod, input:size()
  if #have > #want then
    E.raise(string.format("%s: input of shape %s does not broadcast to the product's shape [%s]", who, shape(input),
      table.concat(want, ", ")))
  end
  for k = 1, #have do
    local h, w = have[#have - k + 1], want[#want - k + 1]
    if h ~= w and h ~= 1 then
      E.raise(string.format("%s: input of shape %s does not broadcast to the product's shape [%s]", who,
        shape(input), table.concat(want, ", ")))
    end
  end
  return beta, alpha
end

local function combine(input, p, beta, alpha)
  if alpha ~= 1 then p = p * alpha end
  if beta == 0 then return p end
  return (beta == 1 and input or input * beta) + p
end

--- ddp.addmm(input, m1, m2 [, {beta=1, alpha=1}]): beta * input + alpha * (m1 @ m2); m1 [n, m], m2 [m, p], input
--- broadcast to [n, p]
function T.addmm(input, m1, m2, opts)
  check_tensor("addmm", input)
  check_tensor("addmm", m1, " as mat1")
  check_tensor("addmm", m2, " as mat2")
  if m1:dim() ~= 2 or m2:dim() ~= 2 or m1:size(2) ~= m2:size(1) then
    E.raise(string.format("addmm: expected mat1 [n, m] and mat2 [m, p], got %s and %s", shape(m1), shape(m2)))
  end
  local beta, alpha = add_scaled("addmm", input, { m1:size(1), m2:size(2) }, m1, m2, opts)
  return combine(input, core.matmul(m1, m2), beta, alpha)
end

--- ddp.baddbmm(input, b1, b2 [, {beta=1, alpha=1}]): beta * input + alpha * bmm(b1, b2); b1 [B, n, m],
--- b2 [B, m, p], input broadcast to [B, n, p]
function T.baddbmm(input, b1, b2, opts)
  check_tensor("baddbmm", input)
  check_tensor("baddbmm", b1, " as batch1")
  check_tensor("baddbmm", b2, " as batch2")
  if b1:dim() ~= 3 or b2:dim() ~= 3 or b1:size(1) ~= b2:size(1) or b1:size(3) ~= b2:size(2) then
    E.raise(string.format("baddbmm: expected batch1 [B, n, m] and batch2 [B, m, p], got %s and %s", shape(b1),
      shape(b2)))
  end
  local beta, alpha = add_scaled("baddbmm", input, { b1:size(1), b1:size(2), b2:size(3) }, b1, b2, opts)
  return combine(input, core.matmul(b1, b2), beta, alpha)
end

--- t:diag([diagonal]): a 1-D t placed on that diagonal of a new square matrix (zeros elsewhere), or the diagonal
--- of a 2-D t as a 1-D tensor; diagonal 0 is the main one, > 0 above it, < 0 below
function T.diag(t, diagonal)
  check_tensor("diag", t)
  local k = diagonal or 0
  if math.type(k) ~= "integer" then E.raise("diag: diagonal must be an integer, got " .. tostring(diagonal)) end
  if t:dim() == 1 then
    local n = t:size(1)
    local opts = { dtype = t:dtype(), device = t:device() }
    local ar = core.arange(n, { device = t:device() })
    local m = core.where(ar:unsqueeze(2):eq(ar:unsqueeze(1)), t:unsqueeze(1), 0) -- t[j] at (j, j)
    if k == 0 then return m end
    local a = math.abs(k)
    if k > 0 then -- columns a + 1 .. a + n, rows 1 .. n
      m = core.cat({ core.zeros({ n, a }, opts), m }, 2)
      return core.cat({ m, core.zeros({ a, n + a }, opts) }, 1)
    end
    m = core.cat({ m, core.zeros({ n, a }, opts) }, 2)
    return core.cat({ core.zeros({ a, n + a }, opts), m }, 1)
  elseif t:dim() == 2 then
    local r, c = t:size(1), t:size(2)
    local len = k >= 0 and math.min(r, c - k) or math.min(r + k, c)
    if len <= 0 then return t:narrow(1, 1, 0):reshape(0) end
    local sq = t:narrow(1, k < 0 and 1 - k or 1, len):narrow(2, k > 0 and 1 + k or 1, len)
    local idx = core.arange(1, len + 1, { device = t:device() }):unsqueeze(2) -- row j: column j
    return sq:gather(2, idx):reshape(len)
  end
  E.raise(string.format("diag: expected a 1-D or 2-D tensor, got %s", shape(t)))
end

--- t:trace(): the sum of a matrix's main diagonal (integers in int64, as sum)
function T.trace(t)
  check_tensor("trace", t)
  if t:dim() ~= 2 then E.raise(string.format("trace: expected a matrix (2-D), got %s", shape(t))) end
  return T.diag(t):sum()
end

for _, name in ipairs({ "dot", "mv", "outer", "addmm", "baddbmm", "diag", "trace" }) do
  M[name] = T[name]
end

return T
