-- The forms a ported PyTorch script reaches for that ddplua's methods did not have (found 2026-12-07 by listing
-- torch and torch.Tensor against ddplua), composed from the runtime's ops with 1-based dims:
--   functions of the view and copy methods: ddp.flatten, ddp.reshape, ddp.transpose, ddp.permute, ddp.squeeze,
--     ddp.unsqueeze, ddp.narrow, ddp.select, ddp.t, ddp.clone, ddp.detach, ddp.is_floating_point (each calls the
--     method: torch.flatten(x, 1) is ddp.flatten(x, 2))
--   in place: x:clamp_(min, max) clamp_min_ clamp_max_ masked_fill_(mask, v) relu_ sigmoid_ tanh_ exp_ log_ log1p_
--     expm1_ sqrt_ rsqrt_ neg_ abs_ sign_ pow_(e) floor_ ceil_ round_ trunc_ frac_ reciprocal_ square_ sin_ cos_
--     erf_ nan_to_num_ lerp_(end, w) addcmul_(t1, t2 [, value]) addcdiv_(t1, t2 [, value]) tril_([k]) triu_([k])
--     fill_diagonal_(v [, wrap]); the random fills x:uniform_([from=0 [, to=1]]), x:normal_([mean=0 [, std=1]]),
--     x:bernoulli_([p=0.5]), x:exponential_([lambd=1]) from the global generator
--   x:unfold(dim, size, step): the windows of size along dim, step apart, as a new last dim (a gather: a copy)
--   ddp.tensor_split(x, sections or {indices}, dim), ddp.hsplit / vsplit / dsplit(x, sections or {indices})
--   x:rot90([k=1 [, {d1, d2}]]), x:fliplr(), x:flipud()
--   ddp.kron(a, b), ddp.inner(a, b), ddp.tensordot(a, b, dims or {{dims of a}, {dims of b}}), ddp.vdot(a, b),
--     ddp.addmv(x, m, v [, {beta=, alpha=}]), ddp.addr(x, v1, v2 [, {beta=, alpha=}])
--   ddp.logical_xor(a, b), x:isneginf(), x:isposinf(), x:signbit(), ddp.copysign(a, b), ddp.fmax(a, b),
--     ddp.fmin(a, b) (NaN only where both are), x:erfinv(), x:sinc(), x:reshape_as(other), x:ndimension()
-- All are methods and ddp. functions (the in-place forms, unfold, fliplr, flipud, reshape_as and ndimension methods
-- only). Gradients flow through every composition but the masks (logical_xor, isneginf, isposinf, signbit) and the
-- random fills, as PyTorch's.
--
-- In-place semantics as PyTorch's: the result is written into x (its version bumps, views of it see the change), a
-- leaf that requires grad is refused while grad mode is on (copy_'s error), a floating result is refused for an
-- integer x ("result type float32 can't be cast"), and where x takes part in a graph the new values carry the
-- gradient back to its old ones (the op reads a copy of x, which stays as it was for the backward).
--
-- Deliberate differences from PyTorch: erfinv is Giles' single-precision approximation refined by two Newton steps
-- on erf in float64, then rounded (PyTorch's float32 erfinv is a rational approximation in float32: the two differ
-- by an ulp or two), and its gradient at +-1 is 0 (PyTorch's inf); signbit counts NaN as unsigned and copysign with
-- a NaN sign gives the positive value (ddplua reads no NaN's sign bit); uniform_ / normal_ / bernoulli_ /
-- exponential_ draw from ddplua's Philox stream, so the numbers differ from PyTorch's for one seed (their
-- distributions do not); unfold copies (PyTorch's is a view).
local core = require "ddplua.core"
local E = require "ddplua.errors"
local T = core.Tensor
local M = package.loaded["ddplua"]

local checks = require "ddplua.tensor_checks"
local FLOATS, check_tensor, shape, norm_dim = checks.FLOATS, checks.check_tensor, checks.shape, checks.norm_dim
local options, check_float = checks.check_opts, checks.check_float

-- ---- functions of the view and copy methods ---------------------------------------------------------------------

for _, name in ipairs({ "flatten", "reshape", "transpose", "permute", "squeeze", "unsqueeze", "narrow", "select", "t",
  "clone", "detach", "is_floating_point" }) do
  M[name] = function(t, ...)
    check_tensor(name, t)
    return t[name](t, ...)
  end
end

-- ---- in place ---------------------------------------------------------------------------------------------------

local function same_size(a, b)
  local n = a:dim()
  if n ~= b:dim() then return false end
  for d = 1, n do
    if a:size(d) ~= b:size(d) then return false end
  end
  return true
end

-- x:name(...) = x:copy_(f(x, ...)); f reads a copy of x where x takes part in a graph, so that the saved tensors of
-- f's backward are not the ones overwritten
local function inplace(name, f)
  T[name] = function(t, ...)
    check_tensor(name, t)
    if core.is_grad_enabled() and t.requires_grad and t.is_leaf then
      E.raise(name .. ": a leaf tensor that requires grad is being used in an in-place operation (change its values " ..
        "under ddp.no_grad)")
    end
    local graph = core.is_grad_enabled() and t.requires_grad
    local r = f(graph and t:clone() or t, ...)
    if FLOATS[r:dtype()] and not FLOATS[t:dtype()] then
      E.raise(string.format("%s: result type %s can't be cast to the tensor's dtype %s", name, r:dtype(), t:dtype()))
    end
    if not same_size(r, t) then
      E.raise(string.format("%s: the result's shape %s does not match the tensor's %s (in place, the tensor's shape " ..
        "must be the broadcast shape)", name, shape(r), shape(t)))
    end
    return t:copy_(r)
  end
  return T[name]
end

for _, name in ipairs({ "clamp", "clamp_min", "clamp_max", "masked_fill", "relu", "sigmoid", "tanh", "exp", "log",
  "log1p", "expm1", "sqrt", "rsqrt", "neg", "abs", "sign", "pow", "floor", "ceil", "round", "trunc", "frac",
  "reciprocal", "square", "sin", "cos", "erf", "nan_to_num", "lerp", "addcmul", "addcdiv", "tril", "triu" }) do
  inplace(name .. "_", function(t, ...) return t[name](t, ...) end)
end

local function number_arg(who, v, dflt, what)
  if v == nil then return dflt end
  if type(v) ~= "number" or v ~= v then E.raise(string.format("%s: %s must be a number, got %s", who, what, tostring(v))) end
  return v
end

local function like(t) return { dtype = t:dtype(), device = t:device() } end

-- The draw scaled in place: d * scale + shift, each a rounding of its own (as d * scale + shift on tensors), the
-- trivial steps skipped (exact either way: d * 1 = d, and d + 0 = d for the draws' d, never -0)
local function scaled_(d, scale, shift)
  if scale ~= 1 then d:mul_(scale) end
  if shift ~= 0 then d:add_(shift) end
  return d
end

-- The random fills draw into the tensor itself when they can (contiguous, not recorded for autograd): a fresh
-- weight's init makes no tensor of its own (on a VM each new page costs a fault: the Fashion-MNIST MLP's 1.9 M
-- weights took 83 ms in a fresh process, 22 ms drawn in place)
local function random_fill(name, normal, check)
  local filled = inplace(name, function(t, a, b)
    local d = (normal and core.randn or core.rand)(t:size(), like(t))
    return scaled_(d, normal and b or b - a, a)
  end)
  T[name] = function(t, a, b)
    check_tensor(name, t)
    check_float(name, t)
    a, b = check(a, b)
    if (core.is_grad_enabled() and t.requires_grad) or not t:is_contiguous() then return filled(t, a, b) end
    return scaled_(core._rand_fill_(t, normal), normal and b or b - a, a)
  end
end

random_fill("uniform_", false, function(from, to)
  from, to = number_arg("uniform_", from, 0, "from"), number_arg("uniform_", to, 1, "to")
  if from > to then E.raise(string.format("uniform_: expects from <= to, got from=%s and to=%s", from, to)) end
  return from, to
end)

random_fill("normal_", true, function(mean, std)
  mean, std = number_arg("normal_", mean, 0, "mean"), number_arg("normal_", std, 1, "std")
  if std < 0 then E.raise("normal_: std must be >= 0, got " .. std) end
  return mean, std
end)

inplace("bernoulli_", function(t, p)
  p = number_arg("bernoulli_", p, 0.5, "p")
  if p < 0 or p > 1 then E.raise("bernoulli_: p must be in [0, 1], got " .. p) end
  return core.rand(t:size(), { device = t:device() }):lt(p):to(t:dtype())
end)

inplace("exponential_", function(t, lambd)
  check_float("exponential_", t)
  lambd = number_arg("exponential_", lambd, 1, "lambd")
  if lambd <= 0 then E.raise("exponential_: lambd must be > 0, got " .. lambd) end
  -- -log(1 - u) / lambd for u in [0, 1): never inf
  return (core.rand(t:size(), { dtype = "float64", device = t:device() }):neg() + 1):log():neg():div(lambd):to(t:dtype())
end)

--- x:fill_diagonal_(v [, wrap=false]): x's main diagonal (x 2-D, or all its dims equal) set to v; wrap: a tall
--- matrix's diagonal starts again below the square (PyTorch's)
function T.fill_diagonal_(t, v, wrap)
  check_tensor("fill_diagonal_", t)
  if type(v) ~= "number" then E.raise("fill_diagonal_: the value must be a number, got " .. type(v)) end
  local nd = t:dim()
  if nd < 2 then E.raise("fill_diagonal_: the tensor must have at least 2 dimensions, got " .. shape(t)) end
  local sz, step, n = t:size(), 0, math.huge
  for d = 1, nd do
    if nd > 2 and sz[d] ~= sz[1] then E.raise("fill_diagonal_: all dimensions of the tensor must be equal, got " .. shape(t)) end
    n = math.min(n, sz[d])
  end
  local stride = 1
  for d = nd, 1, -1 do step, stride = step + stride, stride * sz[d] end
  local numel = t:numel()
  local count = n
  if wrap and nd == 2 and sz[1] > sz[2] then count = (numel + step - 1) // step end
  local pos = core.arange(0, numel, { dtype = "int64", device = t:device() })
  local mask = pos:remainder(step):eq(0):logical_and(pos:lt(count * step)):reshape(sz)
  return t:masked_fill_(mask, v)
end

-- ---- windows, splits, rotations -----------------------------------------------------------------------------------

--- x:unfold(dim, size, step): the windows x[.., i*step + 1 .. i*step + size, ..] along dim, as dim of their count
--- and a new last dim of size (a copy, where PyTorch's is a view)
function T.unfold(t, dim, size, step)
  check_tensor("unfold", t)
  local d = norm_dim("unfold", t, dim)
  if math.type(size) ~= "integer" or size < 0 then E.raise("unfold: size must be a non-negative integer, got " .. tostring(size)) end
  if math.type(step) ~= "integer" or step < 1 then E.raise("unfold: step must be a positive integer, got " .. tostring(step)) end
  local len = t:dim() == 0 and 1 or t:size(d)
  if size > len then
    E.raise(string.format("unfold: size %d is larger than dim %d's %d (shape %s)", size, d, len, shape(t)))
  end
  local x = t:dim() == 0 and t:reshape({ 1 }) or t
  local count = (len - size) // step + 1
  local io = { dtype = "int64", device = t:device() }
  local idx = (core.arange(0, count, io):unsqueeze(2) * step + core.arange(1, size + 1, io):unsqueeze(1)):reshape(-1)
  local g = x:index_select(d, idx)
  local sz = x:size()
  local new = {}
  for k = 1, #sz do
    if k == d then new[#new + 1] = count; new[#new + 1] = size else new[#new + 1] = sz[k] end
  end
  return g:reshape(new):movedim(d + 1, -1)
end

--- ddp.tensor_split(x, sections | {indices} [, dim=1]): sections nearly equal parts (the first len % sections one
--- longer), or the parts cut after the given counts of values (PyTorch's indices: {2, 5} gives x[1..2], x[3..5],
--- x[6..]; negative ones from the end); views, returned as several values
function T.tensor_split(t, how, dim)
  check_tensor("tensor_split", t)
  if t:dim() == 0 then E.raise("tensor_split: expected at least a 1-dimensional tensor, got a 0-dimensional one") end
  local d = norm_dim("tensor_split", t, dim or 1)
  local len = t:size(d)
  local cuts = {}
  if math.type(how) == "integer" then
    if how < 1 then E.raise("tensor_split: the number of sections must be a positive integer, got " .. how) end
    local base, extra, at = len // how, len % how, 0
    for k = 1, how - 1 do
      at = at + base + (k <= extra and 1 or 0)
      cuts[k] = at
    end
  elseif type(how) == "table" and not core.is_tensor(how) then
    for k, i in ipairs(how) do
      if math.type(i) ~= "integer" then E.raise("tensor_split: the split indices must be integers, got " .. tostring(i)) end
      cuts[k] = i
    end
  else
    E.raise("tensor_split: expected a number of sections or a table of split indices, got " .. type(how))
  end
  -- each part is Python's x[previous cut : cut] (a negative cut from the end, both clamped to the length)
  local function at(c) return math.min(math.max(c < 0 and c + len or c, 0), len) end
  local parts, prev = {}, 0
  cuts[#cuts + 1] = len
  for _, c in ipairs(cuts) do
    local a, b = at(prev), at(c)
    parts[#parts + 1] = t:narrow(d, a + 1, math.max(b - a, 0))
    prev = c
  end
  return table.unpack(parts)
end

local function split_along(who, t, how, d, min_dim)
  check_tensor(who, t)
  if t:dim() < min_dim then
    E.raise(string.format("%s: expected at least a %d-dimensional tensor, got %s", who, min_dim, shape(t)))
  end
  if math.type(how) == "integer" and t:size(d) % how ~= 0 then
    E.raise(string.format("%s: dim %d of size %d does not split into %d equal parts", who, d, t:size(d), how))
  end
  return T.tensor_split(t, how, d)
end
function T.hsplit(t, how) return split_along("hsplit", t, how, t:dim() == 1 and 1 or 2, 1) end
function T.vsplit(t, how) return split_along("vsplit", t, how, 1, 2) end
function T.dsplit(t, how) return split_along("dsplit", t, how, 3, 3) end

--- x:rot90([k=1 [, {d1=1, d2=2}]]): x turned by 90 degrees k times, from dim d1 towards d2
function T.rot90(t, k, dims)
  check_tensor("rot90", t)
  k = k == nil and 1 or k
  if math.type(k) ~= "integer" then E.raise("rot90: k must be an integer, got " .. tostring(k)) end
  dims = dims or { 1, 2 }
  if type(dims) ~= "table" or #dims ~= 2 then E.raise("rot90: dims must be a table of two dims") end
  if t:dim() < 2 then E.raise("rot90: expected at least a 2-dimensional tensor, got " .. shape(t)) end
  local a, b = norm_dim("rot90", t, dims[1]), norm_dim("rot90", t, dims[2])
  if a == b then E.raise("rot90: the two dims must differ, got " .. a .. " twice") end
  k = k % 4
  if k == 0 then return t:clone() end
  if k == 2 then return t:flip({ a, b }) end
  if k == 1 then return t:flip({ b }):transpose(a, b) end
  return t:transpose(a, b):flip({ b })
end
function T.fliplr(t)
  check_tensor("fliplr", t)
  if t:dim() < 2 then E.raise("fliplr: expected at least a 2-dimensional tensor, got " .. shape(t)) end
  return t:flip({ 2 })
end
function T.flipud(t)
  check_tensor("flipud", t)
  if t:dim() < 1 then E.raise("flipud: expected at least a 1-dimensional tensor, got a 0-dimensional one") end
  return t:flip({ 1 })
end

-- ---- products ---------------------------------------------------------------------------------------------------

--- ddp.kron(a, b): the Kronecker product (the shapes' product dim by dim, the shorter padded with leading 1s)
function T.kron(a, b)
  check_tensor("kron", a)
  check_tensor("kron", b, " as the second operand")
  local n = math.max(a:dim(), b:dim())
  local sa, sb = a:size(), b:size()
  while #sa < n do table.insert(sa, 1, 1) end
  while #sb < n do table.insert(sb, 1, 1) end
  local va, vb, out = {}, {}, {}
  for k = 1, n do
    va[2 * k - 1], va[2 * k] = sa[k], 1
    vb[2 * k - 1], vb[2 * k] = 1, sb[k]
    out[k] = sa[k] * sb[k]
  end
  return (a:reshape(va) * b:reshape(vb)):reshape(out)
end

--- ddp.inner(a, b): the products summed over the last dims (a scalar times a tensor for 0-dim operands)
function T.inner(a, b)
  check_tensor("inner", a)
  check_tensor("inner", b, " as the second operand")
  if a:dim() == 0 or b:dim() == 0 then return a * b end
  if a:size(a:dim()) ~= b:size(b:dim()) then
    E.raise(string.format("inner: the last dims must match, got %s and %s", shape(a), shape(b)))
  end
  local k = a:size(a:dim())
  local lead_a, lead_b = a:size(), b:size()
  lead_a[#lead_a], lead_b[#lead_b] = nil, nil
  local r = core.matmul(a:reshape({ -1, k }), b:reshape({ -1, k }):t())
  local out = {}
  for _, s in ipairs(lead_a) do out[#out + 1] = s end
  for _, s in ipairs(lead_b) do out[#out + 1] = s end
  return r:reshape(out)
end

--- ddp.tensordot(a, b, dims): the products summed over a's last dims and b's first (dims an integer count), or over
--- the listed pairs ({{dims of a}, {dims of b}}, 1-based)
function M.tensordot(a, b, dims)
  check_tensor("tensordot", a)
  check_tensor("tensordot", b, " as the second operand")
  dims = dims == nil and 2 or dims
  local da, db = {}, {}
  if math.type(dims) == "integer" then
    if dims < 0 or dims > a:dim() or dims > b:dim() then
      E.raise(string.format("tensordot: dims %d is out of range for shapes %s and %s", dims, shape(a), shape(b)))
    end
    for k = 1, dims do da[k], db[k] = a:dim() - dims + k, k end
  elseif type(dims) == "table" and type(dims[1]) == "table" and type(dims[2]) == "table" and #dims[1] == #dims[2] then
    for k = 1, #dims[1] do da[k], db[k] = norm_dim("tensordot", a, dims[1][k]), norm_dim("tensordot", b, dims[2][k]) end
  else
    E.raise("tensordot: dims must be an integer or two tables of dims of equal length")
  end
  local ina, inb, ka = {}, {}, 1
  for k = 1, #da do
    if a:size(da[k]) ~= b:size(db[k]) then
      E.raise(string.format("tensordot: dim %d of %s and dim %d of %s differ", da[k], shape(a), db[k], shape(b)))
    end
    if ina[da[k]] or inb[db[k]] then E.raise("tensordot: a dim appears twice") end
    ina[da[k]], inb[db[k]], ka = true, true, ka * a:size(da[k])
  end
  local pa, pb, out = {}, {}, {}
  for k = 1, a:dim() do if not ina[k] then pa[#pa + 1] = k; out[#out + 1] = a:size(k) end end
  for _, k in ipairs(da) do pa[#pa + 1] = k end
  for _, k in ipairs(db) do pb[#pb + 1] = k end
  for k = 1, b:dim() do if not inb[k] then pb[#pb + 1] = k; out[#out + 1] = b:size(k) end end
  local am = (#pa > 0 and a:permute(pa) or a):reshape({ -1, ka })
  local bm = (#pb > 0 and b:permute(pb) or b):reshape({ ka, -1 })
  return core.matmul(am, bm):reshape(out)
end

--- ddp.vdot(a, b): the dot product of two 1-D tensors (real: dot)
function T.vdot(a, b)
  check_tensor("vdot", a)
  return a:dot(b)
end

local function beta_alpha(who, opts)
  local o = options(who, opts, { "beta", "alpha" })
  local beta, alpha = o.beta == nil and 1 or o.beta, o.alpha == nil and 1 or o.alpha
  if type(beta) ~= "number" or type(alpha) ~= "number" then E.raise(who .. ": beta and alpha must be numbers") end
  return beta, alpha
end

-- beta * x + alpha * p, x not read when beta is 0 (PyTorch's)
local function scaled_sum(x, p, beta, alpha)
  if alpha ~= 1 then p = p * alpha end
  if beta == 0 then return p + x:detach() * 0 end
  return (beta == 1 and x or x * beta) + p
end

--- ddp.addmv(x, m, v [, {beta=1, alpha=1}]): beta * x + alpha * (m @ v)
function T.addmv(x, m, v, opts)
  check_tensor("addmv", x)
  local beta, alpha = beta_alpha("addmv", opts)
  return scaled_sum(x, m:mv(v), beta, alpha)
end

--- ddp.addr(x, v1, v2 [, {beta=1, alpha=1}]): beta * x + alpha * outer(v1, v2)
function T.addr(x, v1, v2, opts)
  check_tensor("addr", x)
  local beta, alpha = beta_alpha("addr", opts)
  return scaled_sum(x, v1:outer(v2), beta, alpha)
end

-- ---- elementwise: masks, signs, NaN-ignoring extremes, erfinv, sinc -------------------------------------------

function T.logical_xor(a, b)
  check_tensor("logical_xor", a)
  if not core.is_tensor(b) then b = core.full({}, b, { device = a:device() }) end
  return a:ne(0):ne(b:ne(0))
end
function T.isneginf(t)
  check_tensor("isneginf", t)
  return t:eq(-math.huge)
end
function T.isposinf(t)
  check_tensor("isposinf", t)
  return t:eq(math.huge)
end
--- x:signbit(): 1 where the sign bit is set (negative numbers and -0; NaN counts as unsigned), uint8
function T.signbit(t)
  check_tensor("signbit", t)
  if not FLOATS[t:dtype()] then return t:lt(0) end
  local x = t:detach()
  return x:lt(0):logical_or(x:eq(0):logical_and(x:reciprocal():lt(0))) -- (-0's reciprocal is -inf)
end

--- ddp.copysign(a, b): |a| with b's sign (b's sign bit: -0 counts as negative)
function T.copysign(a, b)
  check_tensor("copysign", a)
  if not core.is_tensor(b) then b = core.full({}, b, { dtype = FLOATS[a:dtype()] and a:dtype() or "float32", device = a:device() }) end
  local x = FLOATS[a:dtype()] and a or a:to(FLOATS[b:dtype()] and b:dtype() or "float32")
  return core.where(T.signbit(b), -x:abs(), x:abs())
end

local function nan_ignoring(who, pick)
  return function(a, b)
    check_tensor(who, a)
    check_tensor(who, b, " as the second operand")
    local m = pick(a, b)
    return core.where(a:isnan(), b, core.where(b:isnan(), a, m))
  end
end
--- ddp.fmax(a, b) / ddp.fmin(a, b): the larger (smaller) of each pair, the other where one is NaN
T.fmax = nan_ignoring("fmax", function(a, b) return core.maximum(a, b) end)
T.fmin = nan_ignoring("fmin", function(a, b) return core.minimum(a, b) end)

--- x:erfinv(): the inverse of erf on (-1, 1) (+-inf at +-1, NaN outside); the gradient sqrt(pi)/2 * exp(y^2)
function T.erfinv(t)
  check_tensor("erfinv", t)
  check_float("erfinv", t)
  local dt = t:dtype()
  local x = t:double()
  -- Giles' single-precision approximation, then two Newton steps on erf in float64
  local w = (x:neg() * x + 1):log():neg()
  local small = w:lt(5)
  local ws, wl = w - 2.5, w:sqrt() - 3
  local function poly(v, cs)
    local p = core.full(v:size(), cs[1], { dtype = "float64", device = v:device() })
    for k = 2, #cs do p = p * v + cs[k] end
    return p
  end
  local ps = poly(ws, { 2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503,
    -0.00417768164, 0.246640727, 1.50140941 })
  local pl = poly(wl, { -0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613,
    0.00943887047, 1.00167406, 2.83297682 })
  local y = core.where(small, ps, pl) * x
  local c = 2 / math.sqrt(math.pi)
  for _ = 1, 2 do
    local err = y:erf() - x
    y = y - err / (c * (y:neg() * y):exp())
  end
  y = core.where(x:eq(1), math.huge, core.where(x:eq(-1), -math.huge, y))
  y = core.where(x:abs():gt(1), 0 / 0, y)
  local r = y:detach():to(dt)
  if core.is_grad_enabled() and t.requires_grad then -- d erfinv / dx = sqrt(pi) / 2 * exp(erfinv(x)^2)
    local g = ((r:double() * r:double()):exp() * (math.sqrt(math.pi) / 2)):to(dt)
    g = core.where(g:isfinite(), g, 0) -- (at +-1 and outside: 0, where PyTorch's is inf and NaN)
    return r + (t - t:detach()) * g
  end
  return r
end

--- x:sinc(): sin(pi x) / (pi x), 1 at 0
function T.sinc(t)
  check_tensor("sinc", t)
  local x = FLOATS[t:dtype()] and t or t:float()
  local px = x * math.pi
  local zero = x:detach():eq(0)
  return core.where(zero, 1, px:sin() / core.where(zero, 1, px))
end

function T.reshape_as(t, other)
  check_tensor("reshape_as", t)
  check_tensor("reshape_as", other, " as the other tensor")
  return t:reshape(other:size())
end
function T.ndimension(t) return t:dim() end

for _, name in ipairs({ "tensor_split", "hsplit", "vsplit", "dsplit", "rot90", "kron", "inner", "vdot", "addmv",
  "addr", "logical_xor", "isneginf", "isposinf", "signbit", "copysign", "fmax", "fmin", "erfinv", "sinc" }) do
  M[name] = T[name]
end

return T
