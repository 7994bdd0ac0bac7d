-- The ops the differential suite compares with PyTorch, one entry each:
--
--   { name = "add",                        -- the row of the per-op table
--     lua = "a + b",                       -- a Lua expression (or a chunk with `return`): the inputs by name,
--                                          -- A = the arguments, ddp
--     torch = "a + b",                     -- a Python expression: the inputs, A, torch, F, D(dim) (1-based -> 0)
--     gen = function(g) ... return A end,  -- draws the inputs (g:tensor) and returns the arguments (tests/diff/gen.lua)
--     tol = { float32 = { 1e-5, 1e-6 } },  -- optional: {rtol, atol} per dtype (atol scales with the result's magnitude)
--     grad = false,                        -- optional: no backward check
--     weight = 2,                          -- optional: a share of the cases (default 1)
--     conditioning = true }                -- optional: a smooth op whose results or gradients are sums that may
--                                          -- cancel (matmul, conv, norms, softmax, cross-entropy; an expanded input
--                                          -- sums its gradient too): a mismatching element is rechecked against how
--                                          -- far PyTorch's float64 result moves under one-ulp input perturbations
--                                          -- (tests/diff/run.lua). Not for ops with kinks or steps (clamp, relu,
--                                          -- max, sign, comparisons): a perturbation across one would excuse anything.
--
-- Kinds with a generator ready: unary(name, lua, torch, opts), binary(...), scalar(...). Every float input requires
-- grad unless its g:tensor call says grad = false; backward runs on sum(out[1] * w) with fixed weights w. Adding an
-- op: one entry here (docs/adding_an_op.md). Helpers both sides define: cls(t, ig) (1-based class targets to 0-based,
-- ignore_index ig to -100, the ignore_index the torch calls pass), bn(x, rm, rv, w, b, A) (batch_norm returning y and the updated running stats),
-- setitem(t, i, v).
local G = require "tests.diff.gen"

local ALL, FLOATS = G.ALL, G.FLOATS
local M = {}

local function add(e) M[#M + 1] = e end

local function values_opts(o)
  return { positive = o.positive, range = o.range, specials = o.specials, magnitude = o.magnitude }
end

local function unary(name, lua, torch, o)
  o = o or {}
  add({ name = name, lua = lua, torch = torch, tol = o.tol, grad = o.grad, weight = o.weight,
    conditioning = o.conditioning, gen = function(g)
    g:tensor("x", g:shape(), g:pick(o.dtypes or ALL), values_opts(o))
    return o.args and o.args(g) or {}
  end })
end

local function dtype_pair(g, dtypes)
  local a = g:pick(dtypes)
  if g:chance(0.25) then return a, g:pick(dtypes) end
  return a, a
end

local function binary(name, lua, torch, o)
  o = o or {}
  add({ name = name, lua = lua, torch = torch, tol = o.tol, grad = o.grad, weight = o.weight,
    conditioning = o.conditioning, gen = function(g)
    local s = g:shape()
    local t = g:bshape(s)
    if g:chance(0.5) then s, t = t, s end
    local da, db = dtype_pair(g, o.dtypes or ALL)
    g:tensor("a", s, da, values_opts(o))
    g:tensor("b", t, db, values_opts(o))
    return {}
  end })
end

local function scalar(name, lua, torch, o)
  o = o or {}
  add({ name = name, lua = lua, torch = torch, tol = o.tol, grad = o.grad, weight = o.weight,
    conditioning = o.conditioning, gen = function(g)
    g:tensor("a", g:shape(), g:pick(o.dtypes or ALL), values_opts(o))
    return { s = g:number(o.number) }
  end })
end

-- ---- elementwise: the op table's unary ops ----
unary("neg", "-x", "-x", { conditioning = true })
unary("exp", "x:exp()", "torch.exp(x)", { conditioning = true })
unary("log", "x:log()", "torch.log(x)", { conditioning = true })
unary("relu", "x:relu()", "torch.relu(x)")
unary("gelu", "x:gelu()", "F.gelu(x)", { conditioning = true })
unary("tanh", "x:tanh()", "torch.tanh(x)", { conditioning = true })
unary("sigmoid", "x:sigmoid()", "torch.sigmoid(x)", { conditioning = true })
unary("sqrt", "x:sqrt()", "torch.sqrt(x)", { conditioning = true })
unary("rsqrt", "x:rsqrt()", "torch.rsqrt(x)", { conditioning = true })
unary("abs", "x:abs()", "torch.abs(x)")
unary("square", "x:square()", "torch.square(x)", { conditioning = true })
unary("reciprocal", "x:reciprocal()", "torch.reciprocal(x)", { conditioning = true })
unary("sign", "x:sign()", "torch.sign(x)")
unary("clamp", "x:clamp(A.lo, A.hi)", "torch.clamp(x, A['lo'], A['hi'])", { args = function(g)
  local lo, hi = g:number({ specials = false }), g:number({ specials = false })
  local k = g:int(1, 4)
  return { lo = k ~= 2 and lo or nil, hi = k ~= 3 and hi or nil }
end })
unary("leaky_relu", "x:leaky_relu(A.slope)", "F.leaky_relu(x, A['slope'])",
  { args = function(g) return { slope = g:pick({ 0.01, 0.2, -0.5 }) } end })
unary("elu", "x:elu(A.alpha)", "F.elu(x, A['alpha'])", { args = function(g) return { alpha = g:pick({ 1.0, 0.5 }) } end })
unary("silu", "x:silu()", "F.silu(x)", { conditioning = true })
unary("softplus", "x:softplus(A.beta, A.threshold)", "F.softplus(x, A['beta'], A['threshold'])",
  { args = function(g) return { beta = g:pick({ 1.0, 2.0 }), threshold = g:pick({ 20.0, 1.0 }) } end })
-- PyTorch through its vectorised loop: x flattened and followed by 64 zeros, so that none of its elements falls in
-- the scalar tail (the last n % 16 float32, n % 8 float64 elements of a contiguous loop), then cut back. Where the
-- two loops answer differently (the gradient at NaN of hardtanh, the shrinks, selu, celu and hardswish, and
-- hardswish's at 3) ddplua follows the vectorised loop, as for elu (docs/pytorch_differences.md,
-- pytorch_elu_nan_grad): which one PyTorch runs for an element depends on the element's place in the tensor.
local function vectorised(call) -- call: a Python expression of the padded input v
  return "(lambda v: " .. call .. ")(torch.cat([x.reshape(-1), x.new_zeros(64)]))[:x.numel()].reshape(x.shape)"
end
-- hardtanh and threshold keep int64 for whole parameters, as PyTorch (which truncates fractional ones to int64,
-- where ddplua gives float32, as clamp; uint8: PyTorch refuses negative parameters)
local function int_keeping(name, lua, torch, args)
  add({ name = name, lua = lua, torch = vectorised(torch), gen = function(g)
    local dt = g:pick({ "float32", "float64", "int64" })
    g:tensor("x", g:shape(), dt)
    return args(g, dt == "int64")
  end })
end
int_keeping("hardtanh", "x:hardtanh(A.lo, A.hi)", "F.hardtanh(v, A['lo'], A['hi'])", function(g, int)
  local b = g:pick(int and { { -1.0, 1.0 }, { 0.0, 6.0 }, { -3.0, 2.0 }, { 2.0, 1.0 } } or
    { { -1.0, 1.0 }, { 0.0, 6.0 }, { -0.5, 0.75 }, { 2.0, 1.0 }, { -math.huge, 0.5 }, { -1e30, 1e30 } })
  return { lo = b[1], hi = b[2] }
end)
int_keeping("relu6", "ddp.nn.F.relu6(x)", "F.relu6(v)", function() return {} end)
int_keeping("threshold", "x:threshold(A.th, A.value)", "F.threshold(v, A['th'], A['value'])", function(g, int)
  local th = g:pick(int and { 0.0, -1.0, 2.0 } or { 0.0, 0.5, 0.1, -1.0, 3.0, 1e30, -math.huge })
  return { th = th, value = g:pick(int and { 0.0, -2.0, 20.0 } or { 0.0, -2.0, 20.0, 0.5, math.huge }) }
end)
unary("hardsigmoid", "x:hardsigmoid()", "F.hardsigmoid(x)")
unary("hardswish", "x:hardswish()", vectorised("F.hardswish(v)"))
unary("mish", "x:mish()", "F.mish(x)", { conditioning = true })
unary("selu", "x:selu()", vectorised("F.selu(v)"))
unary("celu", "x:celu(A.alpha)", vectorised("F.celu(v, A['alpha'])"),
  { args = function(g) return { alpha = g:pick({ 1.0, 0.5, 2.0, 0.7 }) } end })
unary("logsigmoid", "x:logsigmoid()", "F.logsigmoid(x)", { conditioning = true })
-- (floats only: PyTorch's composite x / (|x| + 1) computes |x| + 1 in an integer dtype, where it wraps: uint8 255
-- gives inf, int64's smallest value +1 where ddplua gives -1)
unary("softsign", "x:softsign()", "F.softsign(x)", { conditioning = true, dtypes = FLOATS })
unary("tanhshrink", "x:tanhshrink()", "F.tanhshrink(x)", { conditioning = true })
unary("softshrink", "x:softshrink(A.lambd)", vectorised("F.softshrink(v, A['lambd'])"),
  { args = function(g) return { lambd = g:pick({ 0.5, 0.0, 1.5, 0.3 }) } end })
unary("hardshrink", "x:hardshrink(A.lambd)", vectorised("F.hardshrink(v, A['lambd'])"),
  { args = function(g) return { lambd = g:pick({ 0.5, 0.0, 1.5, 0.3 }) } end })
unary("gelu_tanh", "ddp.nn.F.gelu(x, { approximate = 'tanh' })", "F.gelu(x, approximate='tanh')",
  { conditioning = true })
-- trigonometric, hyperbolic, log2 / log10 / exp2: libm's against PyTorch's (SLEEF's) functions, each within an ulp
for _, op in ipairs({ "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "log2", "log10",
  "exp2" }) do
  unary(op, "x:" .. op .. "()", "torch." .. op .. "(x)", { conditioning = true })
end

-- ---- binary, with broadcasting and type promotion ----
binary("add", "a + b", "a + b", { conditioning = true })
binary("sub", "a - b", "a - b", { conditioning = true })
binary("mul", "a * b", "a * b", { conditioning = true })
binary("div", "a / b", "a / b", { conditioning = true })
binary("maximum", "ddp.maximum(a, b)", "torch.maximum(a, b)")
binary("minimum", "ddp.minimum(a, b)", "torch.minimum(a, b)")
binary("pow", "a ^ b", "torch.pow(a, b)")
for _, c in ipairs({ "eq", "ne", "lt", "le", "gt", "ge" }) do
  binary(c, "a:" .. c .. "(b)", "torch." .. c .. "(a, b)")
end
add({ name = "add_alpha", lua = "a:add(b, A.alpha)", torch = "torch.add(a, b, alpha=A['alpha'])", gen = function(g)
  local s = g:shape()
  local da, db = dtype_pair(g, ALL)
  g:tensor("a", s, da)
  g:tensor("b", g:bshape(s), db)
  return { alpha = g:number({ specials = false, ints = { -1, 2, 0 }, floats = { 0.5, -1.5 } }) }
end })

-- ---- with a Lua number (PyTorch's wrapped numbers) ----
scalar("add_number", "a + A.s", "a + A['s']", { conditioning = true })
scalar("rsub_number", "A.s - a", "A['s'] - a", { conditioning = true })
scalar("mul_number", "a * A.s", "a * A['s']", { conditioning = true })
scalar("div_number", "a / A.s", "a / A['s']", { conditioning = true })
scalar("rdiv_number", "A.s / a", "A['s'] / a", { conditioning = true })
scalar("pow_number", "a ^ A.s", "torch.pow(a, A['s'])", { number = { ints = { 0, 1, 2, 3, -1 },
  floats = { 0.5, 2.0, -1.5, 3.0 } } })
scalar("rpow_number", "A.s ^ a", "torch.pow(A['s'], a)", { number = { ints = { 0, 1, 2, 3 }, floats = { 0.5, 2.0,
  0.0 } } })
scalar("compare_number", "a:lt(A.s)", "torch.lt(a, A['s'])")
scalar("eq_number", "a:eq(A.s)", "torch.eq(a, A['s'])")

-- ---- in-place writes (on a clone: the leaf itself may not be written) ----
add({ name = "inplace_add", lua = "a:clone():add_(b)", torch = "a.clone().add_(b)", gen = function(g)
  local s = g:shape()
  local da, db = dtype_pair(g, ALL)
  g:tensor("a", s, da)
  g:tensor("b", g:bshape(s), db)
  return {}
end })
add({ name = "inplace_mul_number", lua = "a:clone():mul_(A.s)", torch = "a.clone().mul_(A['s'])", gen = function(g)
  g:tensor("a", g:shape(), g:pick(ALL))
  return { s = g:number() }
end })
add({ name = "fill", lua = "(a * 1):fill_(A.s)", torch = "(a * 1).fill_(A['s'])", gen = function(g)
  g:tensor("a", g:shape(), g:pick(ALL))
  return { s = g:number({ specials = false, ints = { 0, 5, -3, 4611686018427387903 } }) }
end })
add({ name = "copy", lua = "(a * 1):copy_(b)", torch = "(a * 1).copy_(b)", gen = function(g)
  local s = g:shape()
  g:tensor("a", s, g:pick(ALL))
  g:tensor("b", g:bshape(s), g:pick(ALL))
  return {}
end })
add({ name = "setitem", lua = "setitem(a * 2, A.i, b)", torch = "setitem(a * 2, A['i'], b)", gen = function(g)
  local s = g:shape({ min_rank = 1, no_zero = true })
  local dt = g:pick(FLOATS)
  g:tensor("a", s, dt)
  g:tensor("b", { table.unpack(s, 2) }, dt)
  return { i = g:int(1, s[1]) }
end })

-- ---- reductions ----
local function reduce_dim(g, s) return #s > 0 and g:int(-#s, #s) or nil end
local function nonzero(d) return d ~= 0 and d or 1 end
add({ name = "sum", lua = "A.all and x:sum() or x:sum(A.dim, A.keepdim)",
  torch = "x.sum() if A['all'] else x.sum(dim=D(A['dim']), keepdim=A['keepdim'])", gen = function(g)
    local s = g:shape()
    g:tensor("x", s, g:pick(ALL))
    if #s == 0 or g:chance(0.3) then return { all = true } end
    return { dim = nonzero(reduce_dim(g, s)), keepdim = g:chance(0.5) }
  end, tol = { float32 = { 1e-5, 1e-6 } }, conditioning = true })
add({ name = "mean", conditioning = true, lua = "A.all and x:mean() or x:mean(A.dims, A.keepdim)",
  torch = "x.mean() if A['all'] else x.mean(dim=[D(d) for d in A['dims']], keepdim=A['keepdim'])", gen = function(g)
    local s = g:shape()
    g:tensor("x", s, g:pick(ALL))
    if #s == 0 or g:chance(0.3) then return { all = true } end
    local dims = { nonzero(reduce_dim(g, s)) }
    if #s >= 2 and g:chance(0.4) then
      local d2 = g:int(1, #s)
      if d2 ~= (dims[1] > 0 and dims[1] or dims[1] + #s + 1) then dims[2] = d2 end
    end
    return { dims = dims, keepdim = g:chance(0.5) }
  end })
for _, op in ipairs({ "max", "min" }) do
  add({ name = op, lua = "if A.all then return x:" .. op .. "() end return x:" .. op .. "(A.dim, A.keepdim)",
    torch = "torch." .. op .. "(x) if A['all'] else ix1(torch." .. op .. "(x, D(A['dim']), A['keepdim']))",
    gen = function(g)
      local s = g:shape()
      g:tensor("x", s, g:pick(ALL))
      if #s == 0 or g:chance(0.3) then return { all = true } end
      return { dim = nonzero(reduce_dim(g, s)), keepdim = g:chance(0.5) }
    end })
end
for _, op in ipairs({ "argmax", "argmin" }) do
  add({ name = op, lua = "A.all and x:" .. op .. "() or x:" .. op .. "(A.dim, A.keepdim)",
    torch = "(torch." .. op .. "(x) if A['all'] else torch." .. op .. "(x, D(A['dim']), A['keepdim'])) + 1",
    grad = false, gen = function(g)
      local s = g:shape()
      g:tensor("x", s, g:pick(ALL))
      if #s == 0 or g:chance(0.3) then return { all = true } end
      return { dim = nonzero(reduce_dim(g, s)), keepdim = g:chance(0.5) }
    end })
end
-- (the *_large rows: logits of 1e2..1e12, bug 13 of issue 11: computed from x - max, they agree with PyTorch)
for _, large in ipairs({ false, true }) do
  for _, op in ipairs({ "softmax", "log_softmax" }) do
    add({ name = op .. (large and "_large" or ""), lua = "x:" .. op .. "(A.dim)", torch = "torch." .. op ..
      "(x, D(A['dim']))", gen = function(g)
        local s = g:shape({ min_rank = 1 })
        g:tensor("x", s, g:pick(FLOATS), { magnitude = large and { 2, 12 } or nil })
        return { dim = nonzero(reduce_dim(g, s)) }
      end, tol = { float32 = { 1e-5, 1e-5 } }, conditioning = true })
  end
end

-- ---- linear algebra ----
add({ name = "matmul", lua = "a:matmul(b)", torch = "torch.matmul(a, b)", weight = 2, conditioning = true,
  gen = function(g)
  local m, k, n = g:int(0, 4), g:int(0, 5), g:int(0, 4)
  local ra, rb = g:int(1, 4), g:int(1, 4)
  local batch = {}
  for d = 1, math.max(ra, rb) - 2 do batch[d] = g:pick({ 1, 2, 3, 0 }) end
  local function lead(r)
    local out = {}
    for d = #batch - (r - 2) + 1, #batch do out[#out + 1] = (g:chance(0.2) and 1 or batch[d]) end
    return out
  end
  local sa = ra == 1 and { k } or ra == 2 and { m, k } or (function() local s = lead(ra) s[#s + 1] = m s[#s + 1] = k return s end)()
  local sb = rb == 1 and { k } or rb == 2 and { k, n } or (function() local s = lead(rb) s[#s + 1] = k s[#s + 1] = n return s end)()
  local dt = g:pick({ "float32", "float64", "float32", "int64" })
  g:tensor("a", sa, dt, { specials = false })
  g:tensor("b", sb, dt, { specials = false })
  return {}
end, tol = { float32 = { 1e-4, 1e-5 } } })
for _, v in ipairs({ { "linear", "ddp.linear(x, w, b)", "F.linear(x, w, b)" },
  { "linear_relu", "ddp.linear(x, w, b, 'relu')", "torch.relu(F.linear(x, w, b))" },
  { "linear_nobias", "ddp.linear(x, w)", "F.linear(x, w)" } }) do
  add({ name = v[1], lua = v[2], torch = v[3], conditioning = true, gen = function(g)
    local s = g:shape({ min_rank = 1, max_rank = 3 })
    local out = g:int(1, 4)
    local dt = g:pick(FLOATS)
    g:tensor("x", s, dt)
    g:tensor("w", { out, s[#s] }, dt)
    if v[1] ~= "linear_nobias" then g:tensor("b", { out }, dt) end
    return {}
  end, tol = { float32 = { 1e-4, 1e-5 } } })
end

-- ---- nn: convolution, pooling, normalisation, losses, embedding ----
-- Normalising a constant group (variance 0) multiplies rounding errors by 1/sqrt(eps) = 316 (and by the weight):
-- both libraries are then off by that much, so the absolute tolerance is wider (it scales with the result's size).
local NORM_TOL = { float32 = { 1e-4, 1e-3 }, float64 = { 1e-9, 1e-7 } }
local NORM_GRAD_TOL = { float32 = { 1e-3, 1e-3 }, float64 = { 1e-8, 1e-7 } }
for _, bias in ipairs({ true, false }) do
  add({ name = bias and "conv2d" or "conv2d_nobias",
    lua = "ddp.conv2d(x, w, " .. (bias and "b" or "nil") .. ", A.stride, A.padding, A.dilation, A.groups)",
    torch = "F.conv2d(x, w, " .. (bias and "b" or "None") .. ", A['stride'], A['padding'], A['dilation'], A['groups'])",
    weight = 2, conditioning = true, gen = function(g)
      local groups = g:pick({ 1, 1, 2, 3 })
      local cpg, opg = g:int(1, 2), g:int(1, 2)
      local k = { g:int(1, 3), g:int(1, 3) }
      local dil = { g:pick({ 1, 1, 2 }), g:pick({ 1, 2 }) }
      local pad = { g:int(0, 2), g:int(0, 1) }
      local st = { g:pick({ 1, 1, 2 }), g:pick({ 1, 2, 3 }) }
      local h, w = g:int(1, 7), g:int(1, 7)
      local n = g:pick({ 1, 2, 0 })
      local dt = g:pick(FLOATS)
      local xs = g:chance(0.15) and { groups * cpg, h, w } or { n, groups * cpg, h, w }
      g:tensor("x", xs, dt, { specials = false })
      g:tensor("w", { groups * opg, cpg, k[1], k[2] }, dt, { specials = false })
      if bias then g:tensor("b", { groups * opg }, dt) end
      return { stride = st, padding = pad, dilation = dil, groups = groups }
    end, tol = { float32 = { 1e-4, 1e-5 } } })
end
for _, bias in ipairs({ true, false }) do
  add({ name = bias and "conv_transpose2d" or "conv_transpose2d_nobias",
    lua = "ddp.conv_transpose2d(x, w, " .. (bias and "b" or "nil") ..
      ", A.stride, A.padding, A.output_padding, A.groups, A.dilation)",
    torch = "F.conv_transpose2d(x, w, " .. (bias and "b" or "None") ..
      ", A['stride'], A['padding'], A['output_padding'], A['groups'], A['dilation'])",
    weight = 2, conditioning = true, gen = function(g)
      local groups = g:pick({ 1, 1, 2, 3 })
      local cpg, opg = g:int(1, 2), g:int(1, 2)
      local k = { g:int(1, 4), g:int(1, 3) }
      local dil = { g:pick({ 1, 1, 2 }), g:pick({ 1, 2 }) }
      local st = { g:pick({ 1, 2, 2 }), g:pick({ 1, 2, 3 }) }
      local op = { g:int(0, st[1] - 1), g:int(0, st[2] - 1) }
      local h, w = g:int(1, 6), g:int(1, 6)
      -- the padding leaves at least one output row and column: (in - 1) s - 2 p + d (k - 1) + op + 1 >= 1
      local function pad_for(i, in_)
        local most = ((in_ - 1) * st[i] + dil[i] * (k[i] - 1) + op[i]) // 2
        return g:int(0, math.min(2, most))
      end
      local pad = { pad_for(1, h), pad_for(2, w) }
      local n = g:pick({ 1, 2, 0 })
      local dt = g:pick(FLOATS)
      local xs = g:chance(0.15) and { groups * cpg, h, w } or { n, groups * cpg, h, w }
      g:tensor("x", xs, dt, { specials = false })
      g:tensor("w", { groups * cpg, opg, k[1], k[2] }, dt, { specials = false })
      if bias then g:tensor("b", { groups * opg }, dt) end
      return { stride = st, padding = pad, output_padding = op, dilation = dil, groups = groups }
    end, tol = { float32 = { 1e-4, 1e-5 } } })
end
-- 3x3 stride-1 layers of 32+ channels: oneDNN's Winograd kernels on the CPU (cpu_dnnl_conv_prim.c)
add({ name = "conv2d_winograd", lua = "ddp.conv2d(x, w, b, 1, A.padding)", torch = "F.conv2d(x, w, b, 1, A['padding'])",
  gen = function(g)
    local c, o = g:pick({ 32, 48, 64 }), g:pick({ 32, 48 })
    local dt = g:pick(FLOATS)
    g:tensor("x", { g:pick({ 1, 2, 3 }), c, g:int(3, 12), g:int(3, 12) }, dt, { specials = false })
    g:tensor("w", { o, c, 3, 3 }, dt, { specials = false })
    g:tensor("b", { o }, dt)
    return { padding = g:int(0, 1) }
  end, tol = { float32 = { 1e-4, 1e-5 } } })
for _, op in ipairs({ "max_pool2d", "avg_pool2d" }) do
  local max = op == "max_pool2d"
  add({ name = op,
    lua = max and "ddp.max_pool2d(x, A.k, A.stride, A.padding, 1, A.ceil)" or
      "ddp.avg_pool2d(x, A.k, A.stride, A.padding, A.ceil)",
    torch = "F." .. op .. "(x, A['k'], A['stride'], A['padding'], ceil_mode=A['ceil'])", gen = function(g)
      local k = { g:int(1, 3), g:int(1, 3) }
      local pad = { g:int(0, k[1] // 2), g:int(0, k[2] // 2) }
      local st = { g:int(1, 3), g:int(1, 2) }
      local xs = { g:pick({ 1, 2, 0 }), g:int(1, 2), g:int(1, 6), g:int(1, 6) }
      if g:chance(0.15) then table.remove(xs, 1) end
      g:tensor("x", xs, g:pick(FLOATS), { specials = not max and false or nil })
      return { k = k, stride = st, padding = pad, ceil = g:chance(0.5) }
    end })
end
-- avg_pool2d's other divisors: the positions inside the input (count_include_pad=false) or a fixed one
add({ name = "avg_pool2d_divisor", lua = "ddp.nn.F.avg_pool2d(x, A.k, A.stride, A.padding, A.ceil, A.cip, A.div)",
  torch = "F.avg_pool2d(x, A['k'], A['stride'], A['padding'], ceil_mode=A['ceil'], count_include_pad=A['cip'], " ..
    "divisor_override=A.get('div'))",
  gen = function(g)
    local k = { g:int(1, 4), g:int(1, 4) }
    local pad = { g:int(0, k[1] // 2), g:int(0, k[2] // 2) }
    local xs = { g:pick({ 1, 2, 0 }), g:int(1, 3), g:int(1, 7), g:int(1, 7) }
    if g:chance(0.15) then table.remove(xs, 1) end
    g:tensor("x", xs, g:pick(FLOATS), { specials = false })
    return { k = k, stride = { g:int(1, 3), g:int(1, 3) }, padding = pad, ceil = g:chance(0.5), cip = g:chance(0.5),
      div = g:chance(0.4) and g:int(1, 9) or nil }
  end })
-- F.pad in every mode (the last one or two dims: one core.plane_gather on the CPU) and nearest interpolation of
-- [N, C, H, W] (the same kernel), on strided and expanded layouts
add({ name = "pad", lua = "ddp.nn.F.pad(x, A.pad, A.mode, A.value)",
  torch = "F.pad(x, A['pad'], A['mode'], A['value'])",
  gen = function(g)
    local mode = g:pick({ "constant", "reflect", "replicate", "circular" })
    local rank = g:pick({ 3, 4, 4 })
    local xs = { g:int(1, 2), g:int(1, 3), g:int(1, 6), g:int(1, 7) }
    if rank == 3 then table.remove(xs, 3) end
    local pairs_n = g:int(1, 2) -- reflect and replicate pad 1 dim of a 3-D input, 2 of a 3-D or 4-D one (PyTorch 1.13)
    if mode == "circular" then pairs_n = rank - 2 elseif mode ~= "constant" and rank == 4 then pairs_n = 2 end
    local pad = {}
    for k = 1, pairs_n do
      local n = xs[rank - k + 1]
      local l, r
      if mode == "reflect" then l, r = g:int(0, n - 1), g:int(0, n - 1)
      elseif mode == "replicate" then l, r = g:int(0, 3), g:int(0, 3)
      elseif mode == "circular" then l, r = g:int(0, n), g:int(0, n)
      else
        l, r = g:int(-1, 3), g:int(-1, 3)
        if n + l + r < 0 then r = 0 end
      end
      pad[#pad + 1], pad[#pad + 2] = l, r
    end
    g:tensor("x", xs, g:pick(FLOATS))
    return { pad = pad, mode = mode, value = mode == "constant" and g:pick({ 0.0, 1.5, -2.0 }) or 0.0 }
  end })
-- depthwise layers past 3x3 (ddplua's own weight gradient, cpu_conv_depthwise.c), stride 1 mostly
add({ name = "conv2d_depthwise", lua = "ddp.conv2d(x, w, b, A.stride, A.padding, A.dilation, A.groups)",
  torch = "F.conv2d(x, w, b, A['stride'], A['padding'], A['dilation'], A['groups'])",
  weight = 2, conditioning = true, gen = function(g)
    local c, mult = g:int(1, 4), g:pick({ 1, 1, 2 })
    local k = { g:int(2, 7), g:int(1, 7) }
    local dil = { g:pick({ 1, 1, 2 }), g:pick({ 1, 2 }) }
    local pad = { g:int(0, 3), g:int(0, 3) }
    local h, w = g:int(1, 9) + (k[1] - 1) * dil[1], g:int(1, 9) + (k[2] - 1) * dil[2]
    local dt = g:pick(FLOATS)
    g:tensor("x", { g:pick({ 1, 2, 3 }), c, h, w }, dt, { specials = false })
    g:tensor("w", { c * mult, 1, k[1], k[2] }, dt, { specials = false })
    g:tensor("b", { c * mult }, dt)
    return { stride = { 1, g:pick({ 1, 1, 2 }) }, padding = pad, dilation = dil, groups = c }
  end, tol = { float32 = { 1e-4, 1e-5 } } })
add({ name = "unfold", lua = "ddp.nn.F.unfold(x, A.k, A.d, A.p, A.s)", torch = "F.unfold(x, A['k'], A['d'], A['p'], A['s'])",
  gen = function(g)
    local k, d = { g:int(1, 3), g:int(1, 3) }, { g:pick({ 1, 1, 2 }), g:pick({ 1, 2 }) }
    local p, st = { g:int(0, 2), g:int(0, 2) }, { g:pick({ 1, 1, 2, 3 }), g:pick({ 1, 2 }) }
    local h, w = g:int(1, 6) + (k[1] - 1) * d[1], g:int(1, 6) + (k[2] - 1) * d[2]
    g:tensor("x", { g:pick({ 1, 2, 0 }), g:int(1, 3), h, w }, g:pick(FLOATS))
    return { k = k, d = d, p = p, s = st }
  end })
add({ name = "fold", lua = "ddp.nn.F.fold(x, A.out, A.k, A.d, A.p, A.s)",
  torch = "F.fold(x, A['out'], A['k'], A['d'], A['p'], A['s'])",
  gen = function(g)
    local k, d = { g:int(1, 3), g:int(1, 3) }, { g:pick({ 1, 1, 2 }), g:pick({ 1, 2 }) }
    local p, st = { g:int(0, 2), g:int(0, 2) }, { g:pick({ 1, 1, 2, 3 }), g:pick({ 1, 2 }) }
    local h, w = g:int(1, 6) + (k[1] - 1) * d[1], g:int(1, 6) + (k[2] - 1) * d[2]
    local function blocks(n, kk, dd, pp, ss) return (n + 2 * pp - dd * (kk - 1) - 1) // ss + 1 end
    local L = blocks(h, k[1], d[1], p[1], st[1]) * blocks(w, k[2], d[2], p[2], st[2])
    g:tensor("x", { g:pick({ 1, 2 }), g:int(1, 3) * k[1] * k[2], L }, g:pick(FLOATS))
    return { out = { h, w }, k = k, d = d, p = p, s = st }
  end })
add({ name = "interpolate_nearest", lua = "ddp.nn.F.interpolate(x, A.size)", torch = "F.interpolate(x, A['size'])",
  gen = function(g)
    g:tensor("x", { g:int(1, 2), g:int(1, 3), g:int(1, 6), g:int(1, 6) }, g:pick(FLOATS))
    return { size = { g:int(1, 13), g:int(1, 13) } }
  end })
add({ name = "batch_norm", lua = "bn(x, rm, rv, w, b, A)", torch = "bn(x, rm, rv, w, b, A)", conditioning = true,
  gen = function(g)
  local s = g:shape({ min_rank = 2, max_rank = 4, no_zero = true })
  local dt = g:pick(FLOATS)
  g:tensor("x", s, dt, { specials = false })
  g:tensor("rm", { s[2] }, dt, { grad = false, contiguous = true })
  g:tensor("rv", { s[2] }, dt, { grad = false, contiguous = true, positive = true })
  -- (finite affine parameters: with an infinite one the result is NaN or inf depending on how the affine
  -- arithmetic is grouped, and both are right)
  g:tensor("w", { s[2] }, dt, { specials = false })
  g:tensor("b", { s[2] }, dt, { specials = false })
  return { training = g:chance(0.6), momentum = g:pick({ 0.1, 0.5 }), eps = 1e-5 }
end, tol = NORM_TOL, grad_tol = NORM_GRAD_TOL })
-- nn.Sequential's fusions: BatchNorm + ReLU, and BatchNorm2d + ReLU + MaxPool2d (planes of >= 64 values take the
-- fused CPU kernels, smaller ones the three ops); the same values, gradients and running statistics as the ops apart
-- (statistics and affine parameters of moderate size: batch_norm's entry draws the ill-conditioned ones, where a
-- bias of 1e4 leaves float32 outputs that tie and the pooled maximum is a matter of rounding on both sides)
local function bn_affine(g, c, dt)
  g:tensor("rm", { c }, dt, { grad = false, contiguous = true, range = { -2, 2 } })
  g:tensor("rv", { c }, dt, { grad = false, contiguous = true, range = { 0.05, 3 } })
  g:tensor("w", { c }, dt, { range = { -2, 2 } })
  g:tensor("b", { c }, dt, { range = { -1, 1 } })
  return { training = g:chance(0.6), momentum = g:pick({ 0.1, 0.5 }), eps = 1e-5 }
end
add({ name = "batch_norm_relu",
  lua = "local y = ddp.batch_norm(x, rm, rv, w, b, A.training, A.momentum, A.eps, 'relu') return y, rm, rv",
  torch = "(F.relu(F.batch_norm(x, rm, rv, w, b, A['training'], A['momentum'], A['eps'])), rm, rv)",
  gen = function(g)
    local s = g:pick({ { g:int(1, 3), g:int(1, 4), g:int(1, 12), g:int(1, 12) },
      g:shape({ min_rank = 2, max_rank = 4, no_zero = true }) })
    local dt = g:pick(FLOATS)
    g:tensor("x", s, dt, { specials = false })
    return bn_affine(g, s[2], dt)
  end, tol = NORM_TOL, grad_tol = NORM_GRAD_TOL })
add({ name = "batch_norm_relu_max_pool2d",
  lua = "local y = ddp.core.batch_norm_relu_max_pool2d(x, rm, rv, w, b, A.training, A.momentum, A.eps, A.k, A.stride, " ..
    "A.padding, A.ceil) return y, rm, rv",
  torch = "(F.max_pool2d(F.relu(F.batch_norm(x, rm, rv, w, b, A['training'], A['momentum'], A['eps'])), A['k'], " ..
    "A['stride'], A['padding'], ceil_mode=A['ceil']), rm, rv)",
  gen = function(g)
    local k = g:chance(0.6) and { 2, 2 } or { g:int(1, 3), g:int(1, 3) }
    local st = g:chance(0.6) and { k[1], k[2] } or { g:int(1, 3), g:int(1, 2) }
    local pad = g:chance(0.6) and { 0, 0 } or { g:int(0, k[1] // 2), g:int(0, k[2] // 2) }
    local hw = g:chance(0.7) and { g:int(8, 15), g:int(8, 15) } or { g:int(k[1], 7), g:int(k[2], 7) }
    local s = { g:int(1, 3), g:int(1, 4), hw[1], hw[2] }
    local dt = g:pick(FLOATS)
    g:tensor("x", s, dt, { specials = false })
    local A = bn_affine(g, s[2], dt)
    A.k, A.stride, A.padding, A.ceil = k, st, pad, g:chance(0.3)
    return A
  end, tol = NORM_TOL, grad_tol = NORM_GRAD_TOL })
add({ name = "layer_norm", lua = "ddp.layer_norm(x, A.shape, w, b, A.eps)",
  torch = "F.layer_norm(x, A['shape'], w, b, A['eps'])", conditioning = true, gen = function(g)
    local s = g:shape({ min_rank = 1 })
    local k = g:int(1, #s)
    local ns = { table.unpack(s, #s - k + 1) }
    local dt = g:pick(FLOATS)
    g:tensor("x", s, dt, { specials = false })
    g:tensor("w", ns, dt, { specials = false }) -- finite affine parameters, as batch_norm's
    g:tensor("b", ns, dt, { specials = false })
    return { shape = ns, eps = 1e-5 }
  end, tol = NORM_TOL, grad_tol = NORM_GRAD_TOL })

-- logits [N, C, d...] or [C] with class targets (1-based; some ignore_index)
local function class_case(g, opts)
  local C = g:int(1, 5)
  local lead = g:chance(0.15) and {} or { g:pick({ 1, 2, 4, 0 }) }
  local extra = g:chance(0.25) and { g:int(1, 3) } or {}
  local xs, ts = {}, {}
  for _, d in ipairs(lead) do xs[#xs + 1] = d ts[#ts + 1] = d end
  xs[#xs + 1] = C
  for _, d in ipairs(extra) do xs[#xs + 1] = d ts[#ts + 1] = d end
  if #lead == 0 then extra = {} xs = { C } ts = {} end
  local dt = g:pick(FLOATS)
  g:tensor("x", xs, dt, { specials = opts.specials, magnitude = opts.magnitude })
  local ig = g:pick({ -100, -100, 2 })
  g:tensor("t", ts, "int64", { range = { 1, C }, contiguous = true, grad = false })
  if opts.weight then g:tensor("w", { C }, dt, { positive = true, grad = false, contiguous = true }) end
  return { red = g:pick({ "mean", "sum", "none" }), ls = opts.smoothing and g:pick({ 0.0, 0.1 }) or nil, ig = ig }
end
add({ name = "cross_entropy",
  lua = "ddp.cross_entropy(x, t, {reduction = A.red, label_smoothing = A.ls, ignore_index = A.ig})",
  torch = "F.cross_entropy(x, cls(t, A['ig']), reduction=A['red'], label_smoothing=A['ls'], ignore_index=-100)",
  weight = 2, gen = function(g) return class_case(g, { smoothing = true }) end, tol = { float32 = { 1e-5, 1e-5 } },
  conditioning = true })
add({ name = "cross_entropy_large",
  lua = "ddp.cross_entropy(x, t, {reduction = A.red, label_smoothing = A.ls, ignore_index = A.ig})",
  torch = "F.cross_entropy(x, cls(t, A['ig']), reduction=A['red'], label_smoothing=A['ls'], ignore_index=-100)",
  gen = function(g) return class_case(g, { smoothing = true, magnitude = { 2, 12 } }) end,
  tol = { float32 = { 1e-5, 1e-5 } }, conditioning = true })
add({ name = "cross_entropy_weight",
  lua = "ddp.cross_entropy(x, t, {reduction = A.red, label_smoothing = A.ls, ignore_index = A.ig, weight = w})",
  torch = "F.cross_entropy(x, cls(t, A['ig']), weight=w, reduction=A['red'], label_smoothing=A['ls'], " ..
    "ignore_index=-100)",
  gen = function(g) return class_case(g, { smoothing = true, weight = true, specials = false }) end,
  tol = { float32 = { 1e-5, 1e-5 } }, conditioning = true })
add({ name = "cross_entropy_probs", lua = "ddp.cross_entropy(x, p:softmax(A.cd), {reduction = A.red, " ..
    "label_smoothing = A.ls})",
  torch = "F.cross_entropy(x, torch.softmax(p, D(A['cd'])), reduction=A['red'], label_smoothing=A['ls'])",
  gen = function(g)
    local s = g:chance(0.2) and { g:int(1, 4) } or { g:pick({ 1, 3, 0 }), g:int(1, 4) }
    local dt = g:pick(FLOATS)
    g:tensor("x", s, dt, { specials = false })
    g:tensor("p", s, dt, { specials = false })
    return { red = g:pick({ "mean", "sum", "none" }), ls = g:pick({ 0.0, 0.2 }), cd = #s == 1 and 1 or 2 }
  end, tol = { float32 = { 1e-5, 1e-5 } }, conditioning = true })
add({ name = "nll_loss", lua = "ddp.nll_loss(x, t, {reduction = A.red, ignore_index = A.ig, weight = w})",
  torch = "F.nll_loss(x, cls(t, A['ig']), weight=w, reduction=A['red'], ignore_index=-100)",
  gen = function(g)
    local a = class_case(g, { weight = true, specials = false })
    a.ls = nil
    return a
  end })
add({ name = "mse_loss", conditioning = true, lua = "ddp.mse_loss(a, b, {reduction = A.red})",
  torch = "F.mse_loss(a, b, reduction=A['red'])", gen = function(g)
    local s = g:shape()
    local dt = g:pick(FLOATS)
    g:tensor("a", s, dt)
    g:tensor("b", g:chance(0.8) and s or g:bshape(s), dt)
    return { red = g:pick({ "mean", "sum", "none" }) }
  end })
add({ name = "embedding", lua = "ddp.embedding(ids, w)", torch = "F.embedding(ids - 1, w)", gen = function(g)
  local rows = g:int(1, 5)
  g:tensor("ids", g:shape({ max_rank = 3 }), "int64", { range = { 1, rows }, grad = false })
  g:tensor("w", { rows, g:int(1, 4) }, g:pick(FLOATS))
  return {}
end })
add({ name = "index_select", lua = "x:index_select(A.dim, idx)", torch = "torch.index_select(x, D(A['dim']), idx - 1)",
  gen = function(g)
    local s = g:shape({ min_rank = 1, no_zero = true })
    local dim = g:int(1, #s)
    g:tensor("x", s, g:pick(ALL))
    g:tensor("idx", { g:int(0, 4) }, "int64", { range = { 1, s[dim] }, grad = false })
    return { dim = dim }
  end })

-- F.interpolate's linear modes (core.resample_dim per spatial dim); nearest is index_select, checked above
add({ name = "interpolate_linear",
  lua = "ddp.nn.F.interpolate(x, {size = A.size, scale_factor = A.scale_factor, mode = A.mode, " ..
    "align_corners = A.align_corners})",
  torch = "F.interpolate(x, size=A['size'], scale_factor=A['scale_factor'], mode=A['mode'], " ..
    "align_corners=A['align_corners'])",
  gen = function(g)
    local ns = g:pick({ 1, 2 })
    local spatial, size, sf = {}, nil, nil
    for i = 1, ns do spatial[i] = g:int(1, 7) end
    if g:chance(0.5) then
      size = {}
      for i = 1, ns do size[i] = g:int(1, 9) end
    else
      sf = {}
      for i = 1, ns do
        repeat sf[i] = g:pick({ 0.5, 0.75, 1.5, 2, 3, 1.3 }) until math.floor(spatial[i] * sf[i]) >= 1
      end
    end
    local shape = { g:pick({ 1, 2, 0 }), g:int(1, 3) }
    for i = 1, ns do shape[2 + i] = spatial[i] end
    g:tensor("x", shape, g:pick(FLOATS))
    return { size = size, scale_factor = sf, mode = ns == 1 and "linear" or "bilinear",
      align_corners = g:pick({ true, false }) }
  end, tol = { float32 = { 1e-5, 1e-6 } } })

-- ---- optimizers: a few steps with given gradients (helpers.lua's optim_steps; torch.optim on the other side) ----
for _, opt in ipairs({ "SGD", "Adam", "AdamW" }) do
  add({ name = "optim_" .. opt:lower(), lua = "optim_steps(p, g, A)", torch = "optim_steps(p, g, A)", grad = false,
    gen = function(g)
      local s = g:shape({ max_rank = 3 })
      local dt = g:pick(FLOATS)
      local steps = g:int(1, 4)
      g:tensor("p", s, dt, { specials = false, grad = false })
      g:tensor("g", { steps, table.unpack(s) }, dt, { specials = false, grad = false })
      local hp = { lr = g:pick({ 1e-3, 0.1, 1.0 }), weight_decay = g:pick({ 0, 0.01, 0.5 }) }
      if opt == "SGD" then
        hp.momentum = g:pick({ 0, 0.9 })
        hp.dampening = hp.momentum > 0 and g:pick({ 0, 0.5 }) or 0
        hp.nesterov = hp.momentum > 0 and hp.dampening == 0 and g:chance(0.5)
      else
        hp.betas = g:pick({ { 0.9, 0.999 }, { 0.5, 0.9 }, { 0.0, 0.99 } })
        hp.eps = g:pick({ 1e-8, 1e-3 })
        hp.amsgrad = g:chance(0.5)
      end
      return { opt = opt, hp = hp }
    end, tol = { float32 = { 1e-5, 1e-6 } } })
end

-- ---- joining, views and casts ----
add({ name = "cat", lua = "ddp.cat({a, b}, A.dim)", torch = "torch.cat([a, b], D(A['dim']))", gen = function(g)
  local s = g:shape({ min_rank = 1 })
  local dim = g:int(1, #s)
  local t = { table.unpack(s) }
  t[dim] = g:int(0, 3)
  local da, db = dtype_pair(g, ALL)
  g:tensor("a", s, da)
  g:tensor("b", t, db)
  return { dim = dim }
end })
add({ name = "stack", lua = "ddp.stack({a, b}, A.dim)", torch = "torch.stack([a, b], D(A['dim']))", gen = function(g)
  local s = g:shape()
  local dt = g:pick(ALL)
  g:tensor("a", s, dt)
  g:tensor("b", s, dt)
  return { dim = g:int(1, #s + 1) }
end })
local function view_entry(name, lua, torch, args)
  add({ name = name, lua = lua, torch = torch, gen = function(g)
    local s = g:shape({ min_rank = 1 })
    g:tensor("x", s, g:pick(ALL))
    return args(g, s)
  end })
end
view_entry("reshape", "x:reshape(A.shape)", "x.reshape(A['shape'])", function(g, s)
  local n = G.numel(s)
  local shapes = { { n }, { -1 }, { 1, n }, { n, 1 } }
  if n % 2 == 0 and n > 0 then shapes[#shapes + 1] = { 2, -1 } end
  return { shape = g:pick(shapes) }
end)
view_entry("transpose", "x:transpose(A.a, A.b)", "x.transpose(D(A['a']), D(A['b']))",
  function(g, s) return { a = g:int(1, #s), b = g:int(1, #s) } end)
view_entry("permute", "x:permute(A.p)", "x.permute([D(d) for d in A['p']])", function(g, s)
  local p = {}
  for d = 1, #s do p[d] = d end
  for d = #s, 2, -1 do
    local k = g:int(1, d)
    p[d], p[k] = p[k], p[d]
  end
  return { p = p }
end)
view_entry("narrow", "x:narrow(A.dim, A.start, A.len)", "x.narrow(D(A['dim']), A['start'] - 1, A['len'])",
  function(g, s)
    local d = g:int(1, #s)
    local start = g:int(1, s[d] + 1)
    return { dim = d, start = start, len = g:int(0, s[d] - start + 1) }
  end)
view_entry("select", "x:select(A.dim, A.i)", "x.select(D(A['dim']), D(A['i']) if A['i'] > 0 else A['i'])",
  function(g, s)
    local d = g:int(1, #s)
    if s[d] == 0 then return { dim = d, i = 1 } end -- both refuse
    return { dim = d, i = g:chance(0.3) and -g:int(1, s[d]) or g:int(1, s[d]) }
  end)
view_entry("expand", "x:expand(A.shape)", "x.expand(A['shape'])", function(g, s)
  local out = { g:int(1, 2) }
  for d = 1, #s do out[#out + 1] = (s[d] == 1 and g:chance(0.6)) and g:int(0, 3) or (g:chance(0.3) and -1 or s[d]) end
  return { shape = out }
end)
view_entry("flatten", "x:flatten(A.s, A.e)", "x.flatten(D(A['s']), D(A['e']))", function(g, s)
  local a = g:int(1, #s)
  return { s = a, e = g:int(a, #s) }
end)
view_entry("unsqueeze", "x:unsqueeze(A.dim)", "x.unsqueeze(D(A['dim']))", function(g, s)
  return { dim = g:int(1, #s + 1) }
end)
view_entry("squeeze", "A.dim and x:squeeze(A.dim) or x:squeeze()",
  "x.squeeze(D(A['dim'])) if A.get('dim') else x.squeeze()", function(g, s)
    return { dim = g:chance(0.5) and g:int(1, #s) or nil }
  end)
view_entry("contiguous", "x:contiguous()", "x.contiguous()", function() return {} end)
view_entry("to", "x:to(A.dt)", "x.to(DT[A['dt']])", function(g) return { dt = g:pick(ALL) } end)

-- ---- the model ops (issue 14): their own list, appended ----
for _, e in ipairs(require "tests.diff.ops_models") do add(e) end

return M
