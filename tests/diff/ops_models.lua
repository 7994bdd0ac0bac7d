-- The model ops of issue 14 in the differential suite (entries as in
-- tests/diff/ops.lua, which appends this list): sin/cos/erf/log1p/expm1, floor/ceil/round/trunc,
-- where, masked_fill, tril/triu, gather, scatter/scatter_add, topk,
-- split/chunk, cumsum, flip, repeat_/tile, norm, var/std, einsum, the fused
-- scaled_dot_product_attention (against PyTorch's softmax(q k^T s + bias) v:
-- torch 1.13 has no fused op), adaptive_avg_pool2d, RMSprop/Adagrad/Adadelta, and the
-- random ops where their result is determined (bernoulli of 0/1, multinomial
-- of one-hot rows, randint over one value). Inputs come with the suite's
-- layouts (transposed, permuted, narrowed, expanded) and broadcast partners.
-- The recurrent layers, MultiheadAttention and the transformer are modules:
-- tests/spec/nn_rnn_spec.lua and nn_transformer_spec.lua check them against
-- PyTorch with PyTorch's weights.
local G = require "tests.diff.gen"

local ALL, FLOATS = G.ALL, G.FLOATS
local M = {}

local function add(e) M[#M + 1] = e end

-- an int64 index input with given values (contiguous, no grad)
local function index_input(g, name, shape, values)
  g.inputs[#g.inputs + 1] = { name = name, dtype = "int64", base_shape = shape, layout = {}, values = values,
    requires_grad = false }
end

local function dims_of(g, s)
  return #s > 0 and g:int(-#s, #s) or nil
end
local function nonzero(d) return d ~= 0 and d or 1 end

-- ---- unary ----
for _, op in ipairs({ "sin", "cos", "erf", "log1p", "expm1", "floor", "ceil", "round", "trunc" }) do
  add({ name = op, lua = "x:" .. op .. "()", torch = "torch." .. op .. "(x)", gen = function(g)
    g:tensor("x", g:shape(), g:pick(ALL))
    return {}
  end })
end

-- ---- selection ----
add({ name = "where", lua = "ddp.where(c, a, b)", torch = "torch.where(c.bool(), a, b)", gen = function(g)
  local s = g:shape()
  local dt = g:pick(ALL)
  local shapes = { s, g:bshape(s), g:bshape(s) }
  local k = g:int(1, 3)
  shapes[1], shapes[k] = shapes[k], shapes[1] -- the full shape on any of the three
  g:tensor("c", shapes[1], "uint8", { range = { 0, 1 } })
  g:tensor("a", shapes[2], dt)
  g:tensor("b", shapes[3], dt)
  return {}
end })
add({ name = "where_number", lua = "ddp.where(c, a, A.s)", torch = "torch.where(c.bool(), a, A['s'])",
  gen = function(g)
    local s = g:shape()
    local dt = g:pick(FLOATS)
    g:tensor("c", g:bshape(s), "uint8", { range = { 0, 1 } })
    g:tensor("a", s, dt)
    return { s = g:number({ float = true }) }
  end })
add({ name = "masked_fill", lua = "x:masked_fill(m, A.v)", torch = "x.masked_fill(m.bool(), A['v'])",
  gen = function(g)
    local s = g:shape()
    local dt = g:pick(FLOATS)
    g:tensor("x", s, dt)
    g:tensor("m", g:bshape(s), "uint8", { range = { 0, 1 } })
    return { v = g:number({ float = true }) }
  end })
for _, op in ipairs({ "tril", "triu" }) do
  add({ name = op, lua = "x:" .. op .. "(A.k)", torch = "torch." .. op .. "(x, A['k'])", gen = function(g)
    g:tensor("x", g:shape({ min_rank = 2 }), g:pick(ALL))
    return { k = g:int(-3, 3) }
  end })
end

-- idx of shape like s but at most s's size in every dim except d (any size there), values 1..s[d]
local function index_shape(g, s, d)
  local is = {}
  for i = 1, #s do is[i] = i == d and g:int(0, 4) or g:int(0, s[i]) end
  return is
end
add({ name = "gather", lua = "x:gather(A.dim, idx)", torch = "torch.gather(x, D(A['dim']), idx - 1)",
  gen = function(g)
    local s = g:shape({ min_rank = 1, no_zero = true })
    local d = g:int(1, #s)
    g:tensor("x", s, g:pick(ALL))
    local is = index_shape(g, s, d)
    g:tensor("idx", is, "int64", { range = { 1, s[d] }, grad = false, contiguous = true })
    return { dim = d }
  end })

-- scatter: indices along dim distinct within each line (PyTorch leaves the winner of duplicates unspecified); the
-- source has the index's shape (PyTorch's backward for src needs that) and every size is at least 1 (its backward
-- fails on an empty index)
local function distinct_index(g, s, d)
  local is = {}
  for i = 1, #s do is[i] = g:int(1, s[i]) end
  local n = G.numel(is)
  local values = {}
  local stride = 1 -- of dim d in is (row-major); each line along d gets a prefix of a permutation of 1..s[d]
  for i = #is, d + 1, -1 do stride = stride * is[i] end
  local lines = {}
  for pos = 0, n - 1 do
    local line = pos // (stride * is[d]) * stride + pos % stride
    if not lines[line] then
      local p = {}
      for k = 1, s[d] do p[k] = k end
      for k = s[d], 2, -1 do
        local j = g:int(1, k)
        p[k], p[j] = p[j], p[k]
      end
      lines[line] = p
    end
    values[pos + 1] = lines[line][(pos // stride) % is[d] + 1]
  end
  return is, values
end
add({ name = "scatter", lua = "x:scatter(A.dim, idx, src)", torch = "x.scatter(D(A['dim']), idx - 1, src)",
  gen = function(g)
    local s = g:shape({ min_rank = 1, no_zero = true })
    local d = g:int(1, #s)
    local dt = g:pick(ALL)
    g:tensor("x", s, dt)
    local is, values = distinct_index(g, s, d)
    g:tensor("src", is, dt)
    index_input(g, "idx", is, values)
    return { dim = d }
  end })
add({ name = "scatter_value", lua = "x:scatter(A.dim, idx, A.v)", torch = "x.scatter(D(A['dim']), idx - 1, A['v'])",
  gen = function(g)
    local s = g:shape({ min_rank = 1, no_zero = true })
    local d = g:int(1, #s)
    g:tensor("x", s, g:pick(FLOATS))
    local is, values = distinct_index(g, s, d)
    index_input(g, "idx", is, values)
    return { dim = d, v = g:number({ float = true, specials = false }) }
  end })
add({ name = "scatter_add", lua = "x:scatter_add(A.dim, idx, src)",
  torch = "x.scatter_add(D(A['dim']), idx - 1, src)", gen = function(g)
    local s = g:shape({ min_rank = 1, no_zero = true })
    local d = g:int(1, #s)
    local dt = g:pick(ALL)
    g:tensor("x", s, dt)
    local is = {}
    for i = 1, #s do is[i] = i == d and g:int(1, 5) or g:int(1, s[i]) end
    g:tensor("src", is, dt)
    g:tensor("idx", is, "int64", { range = { 1, s[d] }, grad = false, contiguous = true }) -- duplicates add up
    return { dim = d }
  end, tol = { float32 = { 1e-5, 1e-6 } } })

-- topk: distinct values (no expanded copies: PyTorch's order among ties is unspecified)
add({ name = "topk", lua = "return x:topk(A.k, A.dim, A.largest)",
  torch = "ix1(torch.topk(x, A['k'], D(A['dim']), A['largest']))", gen = function(g)
    local s = g:shape({ min_rank = 1 })
    local d = g:int(1, #s)
    g:tensor("x", s, g:pick(FLOATS), { range = { -100, 100 }, no_expand = true })
    return { k = g:int(0, s[d]), dim = d, largest = g:chance(0.7) }
  end })

-- ---- pieces and joins: every part scaled by its position and joined again, so each one's gradient counts ----
add({ name = "split", lua = "local p = table.pack(x:split(A.s, A.dim)) for i = 1, p.n do p[i] = p[i] * i end " ..
    "return ddp.cat({ table.unpack(p, 1, p.n) }, A.dim), ddp.tensor(p.n, { dtype = 'int64' })",
  torch = "(lambda p: (torch.cat([t * (i + 1) for i, t in enumerate(p)], D(A['dim'])), torch.tensor(len(p))))" ..
    "(x.split(A['s'], D(A['dim'])))", gen = function(g)
    local s = g:shape({ min_rank = 1 })
    local d = g:int(1, #s)
    g:tensor("x", s, g:pick(FLOATS))
    if g:chance(0.5) then return { s = g:int(1, 4), dim = d } end
    local parts, left = {}, s[d]
    while left > 0 do
      parts[#parts + 1] = g:int(0, left)
      left = left - parts[#parts]
    end
    if #parts == 0 then parts[1] = 0 end
    return { s = parts, dim = d }
  end })
add({ name = "chunk", lua = "local p = table.pack(x:chunk(A.n, A.dim)) for i = 1, p.n do p[i] = p[i] * i end " ..
    "return ddp.cat({ table.unpack(p, 1, p.n) }, A.dim), ddp.tensor(p.n, { dtype = 'int64' })",
  torch = "(lambda p: (torch.cat([t * (i + 1) for i, t in enumerate(p)], D(A['dim'])), torch.tensor(len(p))))" ..
    "(x.chunk(A['n'], D(A['dim'])))", gen = function(g)
    local s = g:shape({ min_rank = 1 })
    g:tensor("x", s, g:pick(FLOATS))
    return { n = g:int(1, 6), dim = g:int(1, #s) }
  end })
add({ name = "cumsum", lua = "x:cumsum(A.dim)", torch = "torch.cumsum(x, D(A['dim']))", gen = function(g)
  local s = g:shape()
  g:tensor("x", s, g:pick(ALL))
  return { dim = nonzero(dims_of(g, s) or 1) }
end, tol = { float32 = { 1e-5, 1e-6 } } })
add({ name = "flip", lua = "x:flip(A.dims)", torch = "torch.flip(x, [D(d) for d in A['dims']])", gen = function(g)
  local s = g:shape({ min_rank = 1 })
  g:tensor("x", s, g:pick(ALL))
  local dims, used = {}, {}
  for _ = 1, g:int(1, #s) do
    local d = g:int(1, #s)
    if not used[d] then
      used[d] = true
      dims[#dims + 1] = d
    end
  end
  return { dims = dims }
end })
for _, op in ipairs({ "repeat_", "tile" }) do
  local tile = op == "tile"
  add({ name = op, lua = "x:" .. op .. "(A.reps)",
    torch = tile and "torch.tile(x, A['reps'])" or "x.repeat(*A['reps'])", gen = function(g)
      local s = g:shape({ max_rank = 3 })
      g:tensor("x", s, g:pick(ALL))
      local n = tile and g:int(1, 4) or g:int(math.max(#s, 1), 4)
      local reps = {}
      for i = 1, n do reps[i] = g:pick({ 1, 2, 3, 0, 1 }) end
      return { reps = reps }
    end })
end

-- ---- reductions ----
local function dim_arg(g, s)
  if #s == 0 or g:chance(0.3) then return nil end
  if #s >= 2 and g:chance(0.3) then
    local a = g:int(1, #s)
    local b = g:int(1, #s - 1)
    if b >= a then b = b + 1 end
    return { a, b }
  end
  return nonzero(dims_of(g, s))
end
add({ name = "norm", lua = "x:norm(A.p, A.dim, A.keepdim)",
  torch = "torch.norm(x, A['p'], (None if A['dim'] is None else D(A['dim']) if isinstance(A['dim'], int) else " ..
    "[D(d) for d in A['dim']]), A['keepdim'])", gen = function(g)
    local s = g:shape()
    g:tensor("x", s, g:pick(FLOATS))
    return { p = g:pick({ 2, 2, 1, 3, 0.5, math.huge, -math.huge, 0 }), dim = dim_arg(g, s), keepdim = g:chance(0.4) }
  end, tol = { float32 = { 1e-5, 1e-6 } } })
for _, op in ipairs({ "var", "std" }) do
  add({ name = op, lua = "x:" .. op .. "(A.dim, { unbiased = A.unbiased, keepdim = A.keepdim })",
    torch = "torch." .. op .. "(x, (None if A['dim'] is None else D(A['dim']) if isinstance(A['dim'], int) else " ..
      "[D(d) for d in A['dim']]), unbiased=A['unbiased'], keepdim=A['keepdim'])", gen = function(g)
      local s = g:shape({ no_zero = true })
      g:tensor("x", s, g:pick(FLOATS))
      local dim = dim_arg(g, s)
      -- the count reduced over: with one element the unbiased value is 0/0 and its gradient undefined (PyTorch
      -- gives inf or NaN by the order of its arithmetic)
      local n = 1
      local dims = type(dim) == "table" and dim or dim and { dim } or nil
      for d = 1, #s do
        local hit = dims == nil
        for _, e in ipairs(dims or {}) do hit = hit or e == d or e == d - #s - 1 end
        if hit then n = n * s[d] end
      end
      return { dim = dim, unbiased = n >= 2 and g:chance(0.6), keepdim = g:chance(0.4) }
    end, tol = { float32 = { 1e-4, 1e-5 } } })
end

-- ---- einsum: the common contractions (one entry per operand count: an entry's inputs are always the same) ----
local EQUATIONS = { { "ij,jk->ik", "bij,bjk->bik", "ij,kj->ik", "i,i->", "i,j->ij", "bhtd,bhsd->bhts",
  "bhts,bhsd->bhtd", "ij,ij->ij", "ij,jk" }, { "ij->ji", "ij->", "ijk->ik", "ijk->kji", "ij" } }
for nops = 2, 1, -1 do
  add({ name = nops == 2 and "einsum" or "einsum_one", conditioning = true, lua = nops == 2 and "ddp.einsum(A.eq, x, y)" or
    "ddp.einsum(A.eq, x)", torch = nops == 2 and "torch.einsum(A['eq'], x, y)" or "torch.einsum(A['eq'], x)",
    gen = function(g)
      local eq = g:pick(EQUATIONS[3 - nops])
      local size = {}
      local dt = g:pick(FLOATS)
      local function shape_of(term)
        local s = {}
        for c in term:gmatch("%a") do
          size[c] = size[c] or g:int(1, 4)
          s[#s + 1] = size[c]
        end
        return s
      end
      local terms = {}
      for t in (eq:match("^([^-]*)%-") or eq):gmatch("[^,]+") do terms[#terms + 1] = t end
      g:tensor("x", shape_of(terms[1]), dt, { specials = false })
      if nops == 2 then g:tensor("y", shape_of(terms[2]), dt, { specials = false }) end
      return { eq = eq }
    end, tol = { float32 = { 1e-4, 1e-5 } } })
end

-- ---- attention: the fused op against softmax(q k^T * scale + bias) v ----
local SDPA_TORCH = "torch.softmax((q @ k.transpose(-2, -1)) * (A['scale'] if A['scale'] is not None else " ..
  "q.shape[-1] ** -0.5) + %s, -1) @ v"
local function sdpa_inputs(g, o)
  local batch = {}
  for i = 1, g:int(0, 2) do batch[i] = g:int(1, 3) end
  local L, S = g:int(1, 6), g:int(1, 6)
  if o.causal and S < L then S = L end -- no row without a key
  local E, Ev = g:int(1, 5), g:int(1, 5)
  local dt = g:pick(FLOATS)
  local function shp(a, b)
    local s = { table.unpack(batch) }
    s[#s + 1], s[#s + 2] = a, b
    return s
  end
  g:tensor("q", shp(L, E), dt, { specials = false })
  g:tensor("k", shp(S, E), dt, { specials = false })
  g:tensor("v", shp(S, Ev), dt, { specials = false })
  return dt, L, S
end
add({ name = "sdpa", conditioning = true, lua = "ddp.core.scaled_dot_product_attention(q, k, v, { scale = A.scale })",
  torch = SDPA_TORCH:format("0.0"), weight = 2, gen = function(g)
    sdpa_inputs(g, {})
    return { scale = g:chance(0.5) and g:pick({ 0.3, 1.0, 2.5 }) or nil }
  end, tol = { float32 = { 1e-4, 1e-5 } } })
add({ name = "sdpa_causal", conditioning = true,
  lua = "ddp.core.scaled_dot_product_attention(q, k, v, { is_causal = true })",
  torch = SDPA_TORCH:format("torch.zeros(q.shape[-2], k.shape[-2], dtype=q.dtype).masked_fill(" ..
    "torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril().logical_not(), float('-inf'))"),
  gen = function(g)
    sdpa_inputs(g, { causal = true })
    return {}
  end, tol = { float32 = { 1e-4, 1e-5 } } })
add({ name = "sdpa_bool_mask", conditioning = true,
  lua = "ddp.core.scaled_dot_product_attention(q, k, v, { attn_mask = m })",
  torch = SDPA_TORCH:format("torch.zeros(m.shape, dtype=q.dtype).masked_fill(m == 0, float('-inf'))"),
  gen = function(g)
    local _, L, S = sdpa_inputs(g, {})
    -- true takes part; the first key is always allowed (a row with no key is NaN on both sides but a 0/0 of
    -- which the gradient is not defined)
    local ms = g:chance(0.5) and { L, S } or { 1, S }
    local v = {}
    for i = 1, ms[1] * ms[2] do v[i] = ((i - 1) % S == 0 or g:chance(0.6)) and 1 or 0 end
    g.inputs[#g.inputs + 1] = { name = "m", dtype = "uint8", base_shape = ms, layout = {}, values = v,
      requires_grad = false }
    return {}
  end, tol = { float32 = { 1e-4, 1e-5 } } })
add({ name = "sdpa_float_mask", conditioning = true,
  lua = "ddp.core.scaled_dot_product_attention(q, k, v, { attn_mask = m })",
  torch = SDPA_TORCH:format("m"), gen = function(g)
    local dt, L, S = sdpa_inputs(g, {})
    g:tensor("m", g:chance(0.5) and { L, S } or { S }, dt, { specials = false, grad = false })
    return {}
  end, tol = { float32 = { 1e-4, 1e-5 } } })

-- ---- pooling ----
add({ name = "adaptive_avg_pool2d", lua = "ddp.core.adaptive_avg_pool2d(x, A.size)",
  torch = "F.adaptive_avg_pool2d(x, A['size'])", gen = function(g)
    local xs = { g:pick({ 1, 2 }), g:int(1, 3), g:int(1, 7), g:int(1, 7) }
    if g:chance(0.2) then table.remove(xs, 1) end
    g:tensor("x", xs, g:pick(FLOATS))
    return { size = { g:int(1, 8), g:int(1, 8) } }
  end })

-- ---- optimizers: a few steps with given gradients (helpers' optim_steps) ----
-- Their updates are smooth in p and g (no max, unlike Adam's amsgrad), so a mismatch is rechecked against PyTorch's
-- own float64 sensitivity: a parameter of -10 stepped to 0.2 is a cancellation (SEED=20261228 case 3428, rmsprop
-- with momentum: 0.2061021 against 0.2060966).
for _, opt in ipairs({ "RMSprop", "Adagrad", "Adadelta" }) do
  add({ name = "optim_" .. opt:lower(), lua = "optim_steps(p, g, A)", torch = "optim_steps(p, g, A)", grad = false,
    conditioning = true,
    gen = function(g)
      local s = g:shape({ max_rank = 3 })
      local dt = g:pick(FLOATS)
      local steps = g:int(1, 4)
      g:tensor("p", s, dt, { specials = false, grad = false })
      g:tensor("g", { steps, table.unpack(s) }, dt, { specials = false, grad = false })
      local hp = { lr = g:pick({ 1e-3, 0.01, 0.5 }), weight_decay = g:pick({ 0, 0.01, 0.5 }) }
      if opt == "RMSprop" then
        hp.alpha = g:pick({ 0.99, 0.9 })
        hp.eps = g:pick({ 1e-8, 1e-3 })
        hp.momentum = g:pick({ 0, 0.9 })
        hp.centered = g:chance(0.5)
      elseif opt == "Adadelta" then
        hp.lr = g:pick({ 1.0, 0.1, 2.0 })
        hp.rho = g:pick({ 0.9, 0.5, 0.0 })
        hp.eps = g:pick({ 1e-6, 1e-3 })
      else
        hp.lr_decay = g:pick({ 0, 0.1 })
        hp.initial_accumulator_value = g:pick({ 0, 0.1 })
        hp.eps = g:pick({ 1e-10, 1e-3 })
      end
      return { opt = opt, hp = hp }
    end, tol = { float32 = { 1e-5, 1e-6 } } })
end

-- ---- random ops where the result is determined ----
add({ name = "bernoulli_01", lua = "ddp.bernoulli(p)", torch = "torch.bernoulli(p)", grad = false, gen = function(g)
  local s = g:shape()
  local v = {}
  for i = 1, G.numel(s) do v[i] = g:chance(0.5) and 1.0 or 0.0 end
  g.inputs[#g.inputs + 1] = { name = "p", dtype = g:pick(FLOATS), base_shape = s, layout = {}, values = v,
    requires_grad = false }
  return {}
end })
add({ name = "multinomial_onehot", lua = "ddp.multinomial(p, A.n, A.rep)",
  torch = "torch.multinomial(p, A['n'], A['rep']) + 1", grad = false, gen = function(g)
    local rows, cats = g:int(1, 3), g:int(1, 5)
    local v = {}
    for r = 0, rows - 1 do
      local hot = g:int(1, cats)
      for c = 1, cats do v[r * cats + c] = c == hot and g:pick({ 1.0, 0.25, 7.0 }) or 0.0 end
    end
    local s = g:chance(0.3) and { cats } or { rows, cats }
    if #s == 1 then
      for c = cats + 1, #v do v[c] = nil end
    end
    g.inputs[#g.inputs + 1] = { name = "p", dtype = g:pick(FLOATS), base_shape = s, layout = {}, values = v,
      requires_grad = false }
    local rep = g:chance(0.7)
    return { n = rep and g:int(1, 4) or 1, rep = rep }
  end })
add({ name = "randint_one_value", lua = "ddp.randint(A.lo, A.lo + 1, A.shape)",
  torch = "torch.randint(A['lo'], A['lo'] + 1, tuple(A['shape']))", grad = false, gen = function(g)
    return { lo = g:pick({ 0, -5, 7, 4611686018427387903 }), shape = g:shape({ max_rank = 3 }) }
  end })

-- ---- order statistics: the stable sort (ties in position order, on both sides of the radix sort's 48), cummax /
-- cummin, searchsorted (its boundaries without NaN: PyTorch's binary search gives NaN boundaries no fixed place)
add({ name = "sort_stable", lua = "return x:sort(A.dim, A.desc)",
  torch = "ix1(torch.sort(x, dim=D(A['dim']), descending=A['desc'], stable=True))", gen = function(g)
    local s = g:shape({ min_rank = 1, max_rank = 2, max_size = 120 })
    g:tensor("x", s, g:pick(ALL))
    return { dim = g:int(-#s, -1) + #s + 1, desc = g:chance(0.5) }
  end })
for _, op in ipairs({ "cummax", "cummin" }) do
  add({ name = op, lua = "return x:" .. op .. "(A.dim)", torch = "ix1(torch." .. op .. "(x, D(A['dim'])))",
    gen = function(g)
      local s = g:shape({ min_rank = 1, max_rank = 2, max_size = 70 })
      g:tensor("x", s, g:pick(ALL))
      return { dim = g:int(1, #s) }
    end })
end
-- cumprod and logcumsumexp (core.cum_scan) with their gradients; cumprod's inputs without infinities or NaN, where
-- PyTorch's gradient (a division by x) gives NaN for the whole line (docs/pytorch_differences.md)
add({ name = "cumprod", lua = "return x:cumprod(A.dim)", torch = "torch.cumprod(x, D(A['dim']))", gen = function(g)
  local s = g:shape({ min_rank = 1, max_rank = 3, max_size = 70 })
  g:tensor("x", s, g:pick(ALL), { specials = false })
  return { dim = g:int(1, #s) }
end })
add({ name = "logcumsumexp", lua = "return x:logcumsumexp(A.dim)", torch = "torch.logcumsumexp(x, D(A['dim']))",
  gen = function(g)
    local s = g:shape({ min_rank = 1, max_rank = 3, max_size = 70 })
    g:tensor("x", s, g:pick(FLOATS))
    return { dim = g:int(1, #s) }
  end })
add({ name = "searchsorted", lua = "return ddp.searchsorted(b:sort(), x, { right = A.right })",
  torch = "torch.searchsorted(b.sort()[0], x, right=A['right']) + 1", gen = function(g)
    local dt = g:pick({ "float32", "float64", "int64" })
    g:tensor("b", { g:int(0, 90) }, dt, { specials = false, grad = false })
    g:tensor("x", g:shape({ max_size = 30 }), dt, { grad = false })
    return { right = g:chance(0.5) }
  end })

return M
