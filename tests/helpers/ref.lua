-- Independent float64 references for the op specs, computed in plain Lua
-- with loops over flat arrays, and the comparison / error helpers the specs
-- share.
--
-- A reference array is {shape = {...}, v = {...}}: v holds the elements in
-- row-major order (1-based, as everything in Lua). R.from(t) reads a tensor
-- into one; R.tensor(a, dtype) builds a tensor from one. Nothing here calls
-- the op under test: references use only Lua arithmetic and math.*.
local ddp = require "ddplua"

local R = {}

-- ---- arrays ---------------------------------------------------------------

function R.numel(shape)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  return n
end

function R.array(shape, fill)
  local v = {}
  if fill ~= nil then
    for k = 1, R.numel(shape) do v[k] = fill end
  end
  return { shape = shape, v = v }
end

local function flatten_into(x, out)
  if type(x) == "table" then
    for _, e in ipairs(x) do flatten_into(e, out) end
  else
    out[#out + 1] = x
  end
  return out
end

function R.from(t) return { shape = t:size(), v = flatten_into(t:totable(), {}) } end

function R.tensor(a, dtype)
  local opts = { dtype = dtype or "float64" }
  if #a.shape == 0 then return ddp.tensor(a.v[1], opts) end
  if R.numel(a.shape) == 0 then return ddp.zeros(a.shape, opts) end
  return ddp.tensor(a.v, opts):view(a.shape)
end

-- Calls fn(idx, k) for every multi-index idx (1-based) in row-major order;
-- k is the flat position. idx is reused between calls.
function R.each_index(shape, fn)
  local nd, n = #shape, R.numel(shape)
  local idx = {}
  for d = 1, nd do idx[d] = 1 end
  for k = 1, n do
    fn(idx, k)
    for d = nd, 1, -1 do
      idx[d] = idx[d] + 1
      if idx[d] <= shape[d] then break end
      idx[d] = 1
    end
  end
end

function R.offset(shape, idx)
  local k, s = 0, 1
  for d = #shape, 1, -1 do
    k = k + (idx[d] - 1) * s
    s = s * shape[d]
  end
  return k + 1
end

function R.get(a, idx) return a.v[R.offset(a.shape, idx)] end

-- Deterministic inputs: a float64 tensor of normal (or uniform in [lo, hi))
-- values from a fixed seed, leaving the global generator as it was.
function R.randn(shape, seed, scale)
  local state = ddp.get_rng_state()
  ddp.manual_seed(seed or 1)
  local t = ddp.randn(shape, { dtype = "float64" })
  ddp.set_rng_state(state)
  if scale then t = t * scale end
  return t
end

function R.uniform(shape, lo, hi, seed)
  local state = ddp.get_rng_state()
  ddp.manual_seed(seed or 1)
  local t = ddp.rand(shape, { dtype = "float64" }) * (hi - lo) + lo
  ddp.set_rng_state(state)
  return t
end

-- ---- scalar math that Lua's math library lacks ------------------------------

function R.tanh(x)
  if x > 20 then return 1.0 elseif x < -20 then return -1.0 end
  if math.abs(x) < 1e-4 then return x - x * x * x / 3 end
  local e = math.exp(2 * x)
  return (e - 1) / (e + 1)
end

function R.sigmoid(x) return 1 / (1 + math.exp(-x)) end

-- erf by its Maclaurin series for |x| < 3 and a continued fraction for
-- erfc beyond (both accurate to ~1e-14 there).
function R.erf(x)
  local ax = math.abs(x)
  if ax < 3 then
    local term, sum, n = ax, ax, 0
    repeat
      n = n + 1
      term = -term * ax * ax / n
      local add = term / (2 * n + 1)
      sum = sum + add
    until math.abs(add) <= 1e-17 * math.abs(sum) -- <=: at x = 0 every term is 0
    local r = 2 / math.sqrt(math.pi) * sum
    return x < 0 and -r or r
  end
  -- erfc(x) = exp(-x^2)/sqrt(pi) * 1/(x + 1/2/(x + 1/(x + 3/2/(x + ...))))
  local f = ax
  for k = 60, 1, -1 do f = ax + (k / 2) / f end
  local erfc = math.exp(-ax * ax) / math.sqrt(math.pi) / f
  return x < 0 and erfc - 1 or 1 - erfc
end

function R.gelu(x) return 0.5 * x * (1 + R.erf(x / math.sqrt(2))) end

-- ---- elementwise with broadcasting -----------------------------------------

function R.broadcast_shape(sa, sb)
  local n = math.max(#sa, #sb)
  local out = {}
  for i = 1, n do
    local a, b = sa[i - n + #sa] or 1, sb[i - n + #sb] or 1 -- missing leading dims are 1
    assert(a == b or a == 1 or b == 1, "reference: shapes do not broadcast")
    out[i] = a == 1 and b or a
  end
  return out
end

local function get_bcast(a, idx, nd)
  local ai, lead = {}, nd - #a.shape
  for d = 1, #a.shape do ai[d] = a.shape[d] == 1 and 1 or idx[d + lead] end
  return R.get(a, ai)
end

function R.map(a, f)
  local out = R.array(a.shape)
  for k, x in ipairs(a.v) do out.v[k] = f(x) end
  return out
end

function R.map2(a, b, f)
  local shape = R.broadcast_shape(a.shape, b.shape)
  local out = R.array(shape)
  R.each_index(shape, function(idx, k) out.v[k] = f(get_bcast(a, idx, #shape), get_bcast(b, idx, #shape)) end)
  return out
end

-- ---- reductions ---------------------------------------------------------------

-- dims: list of 1-based dims (empty: all). Returns the reduced array.
function R.reduce(a, dims, keepdim, init, step, finish)
  local red = {}
  if #dims == 0 then for d = 1, #a.shape do red[d] = true end end
  for _, d in ipairs(dims) do red[d] = true end
  local kshape, oshape = {}, {}
  for d = 1, #a.shape do
    kshape[d] = red[d] and 1 or a.shape[d]
    if not red[d] then oshape[#oshape + 1] = a.shape[d] end
  end
  local acc, cnt = R.array(kshape, init), R.array(kshape, 0)
  local oi = {}
  R.each_index(a.shape, function(idx, k)
    for d = 1, #a.shape do oi[d] = red[d] and 1 or idx[d] end
    local o = R.offset(kshape, oi)
    cnt.v[o] = cnt.v[o] + 1
    acc.v[o] = step(acc.v[o], a.v[k], cnt.v[o], idx)
  end)
  if finish then for o = 1, #acc.v do acc.v[o] = finish(acc.v[o], cnt.v[o]) end end
  return { shape = keepdim and kshape or oshape, v = acc.v }
end

function R.sum(a, dims, keepdim) return R.reduce(a, dims or {}, keepdim, 0, function(s, x) return s + x end) end

function R.mean(a, dims, keepdim)
  return R.reduce(a, dims or {}, keepdim, 0, function(s, x) return s + x end, function(s, n) return s / n end)
end

-- max/min over one dim: values and 1-based positions (first wins ties)
function R.extreme(a, dim, keepdim, is_max)
  local kshape = {}
  for d = 1, #a.shape do kshape[d] = d == dim and 1 or a.shape[d] end
  local best, pos, oi = R.array(kshape), R.array(kshape), {}
  R.each_index(a.shape, function(idx, k)
    for d = 1, #a.shape do oi[d] = d == dim and 1 or idx[d] end
    local o, x = R.offset(kshape, oi), a.v[k]
    if best.v[o] == nil or (is_max and x > best.v[o]) or (not is_max and x < best.v[o]) then
      best.v[o], pos.v[o] = x, idx[dim]
    end
  end)
  local shape = kshape
  if not keepdim then
    shape = {}
    for d = 1, #a.shape do
      if d ~= dim then shape[#shape + 1] = a.shape[d] end
    end
  end
  return { shape = shape, v = best.v }, { shape = shape, v = pos.v }
end

-- softmax / log_softmax along dim
function R.softmax(a, dim, log)
  local mx = R.reduce(a, { dim }, true, -math.huge, function(m, x) return math.max(m, x) end)
  local se = R.array(mx.shape, 0)
  local oi = {}
  local function o_of(idx)
    for d = 1, #a.shape do oi[d] = d == dim and 1 or idx[d] end
    return R.offset(mx.shape, oi)
  end
  R.each_index(a.shape, function(idx, k)
    local o = o_of(idx)
    se.v[o] = se.v[o] + math.exp(a.v[k] - mx.v[o])
  end)
  local out = R.array(a.shape)
  R.each_index(a.shape, function(idx, k)
    local o = o_of(idx)
    local lse = mx.v[o] + math.log(se.v[o])
    out.v[k] = log and a.v[k] - lse or math.exp(a.v[k] - lse)
  end)
  return out
end

-- ---- linear algebra -----------------------------------------------------------

function R.matmul(a, b)
  local a1, b1 = #a.shape == 1, #b.shape == 1
  local as = a1 and { 1, a.shape[1] } or a.shape
  local bs = b1 and { b.shape[1], 1 } or b.shape
  local m, kk, n = as[#as - 1], as[#as], bs[#bs]
  assert(kk == bs[#bs - 1], "reference: matmul inner sizes differ")
  local ab, bb = {}, {}
  for d = 1, #as - 2 do ab[d] = as[d] end
  for d = 1, #bs - 2 do bb[d] = bs[d] end
  local batch = R.broadcast_shape(ab, bb)
  local oshape = {}
  for d = 1, #batch do oshape[d] = batch[d] end
  oshape[#oshape + 1], oshape[#oshape + 2] = m, n
  local out = R.array(oshape)
  local A, B = { shape = as, v = a.v }, { shape = bs, v = b.v }
  local nb = #batch
  R.each_index(oshape, function(idx, k)
    local ai, bi = {}, {}
    for d = 1, #as - 2 do
      local od = d + nb - (#as - 2)
      ai[d] = as[d] == 1 and 1 or idx[od]
    end
    for d = 1, #bs - 2 do
      local od = d + nb - (#bs - 2)
      bi[d] = bs[d] == 1 and 1 or idx[od]
    end
    local i, j, s = idx[nb + 1], idx[nb + 2], 0
    local na, nb2 = #as, #bs
    for p = 1, kk do
      ai[na - 1], ai[na] = i, p
      bi[nb2 - 1], bi[nb2] = p, j
      s = s + R.get(A, ai) * R.get(B, bi)
    end
    out.v[k] = s
  end)
  if a1 or b1 then
    local shape = {}
    for d = 1, nb do shape[d] = batch[d] end
    if not a1 then shape[#shape + 1] = m end
    if not b1 then shape[#shape + 1] = n end
    out.shape = shape
  end
  return out
end

-- y = x w^T + b (b may be nil), optionally relu'd; x [..., in], w [out, in]
function R.linear(x, w, b, relu)
  local inf, outf = w.shape[2], w.shape[1]
  local rows = R.numel(x.shape) // inf
  local shape = {}
  for d = 1, #x.shape - 1 do shape[d] = x.shape[d] end
  shape[#shape + 1] = outf
  local out = R.array(shape)
  for r = 0, rows - 1 do
    for o = 1, outf do
      local s = b and b.v[o] or 0
      for i = 1, inf do s = s + x.v[r * inf + i] * w.v[(o - 1) * inf + i] end
      out.v[r * outf + o] = relu and math.max(s, 0) or s
    end
  end
  return out
end

-- ---- losses ---------------------------------------------------------------------

-- logits [N, C] or [N, C, d...]; target array of 1-based classes, shape [N]
-- or [N, d...]. opts: reduction ("mean"), label_smoothing (0),
-- ignore_index (-100).
function R.cross_entropy(x, t, opts)
  opts = opts or {}
  local eps, ignore = opts.label_smoothing or 0, opts.ignore_index or -100
  local C = x.shape[2]
  local loss = R.array(t.shape)
  local total, count = 0, 0
  local xi = {}
  R.each_index(t.shape, function(idx, k)
    local cls = t.v[k]
    if cls == ignore then
      loss.v[k] = 0
      return
    end
    local function logit(c)
      xi[1], xi[2] = idx[1], c
      for d = 2, #t.shape do xi[d + 1] = idx[d] end
      return R.get(x, xi)
    end
    local mx = -math.huge
    for c = 1, C do mx = math.max(mx, logit(c)) end
    local se, sx = 0, 0
    for c = 1, C do
      se = se + math.exp(logit(c) - mx)
      sx = sx + logit(c)
    end
    local lse = mx + math.log(se)
    local l = (1 - eps) * (lse - logit(cls)) + eps * (lse - sx / C)
    loss.v[k] = l
    total, count = total + l, count + 1
  end)
  local red = opts.reduction or "mean"
  if red == "none" then return loss end
  if red == "sum" then return { shape = {}, v = { total } } end
  return { shape = {}, v = { total / count } }
end

function R.mse(a, b, reduction)
  local d = R.map2(a, b, function(x, y) return (x - y) ^ 2 end)
  if reduction == "none" then return d end
  if reduction == "sum" then return R.sum(d) end
  return R.mean(d)
end

-- ---- comparisons and errors -------------------------------------------------------

-- Asserts tensor t equals reference array a (shape and values) within
-- |t - a| <= atol + rtol * |a|; NaN must match NaN.
--- Every result in got (a table of tensors) has its PyTorch counterpart in ref (and the other way round), of the
--- same dtype and shape, with the same values: NaN where NaN, exactly for integers and within rtol (relative, at
--- least 1) for floats. An error names the result and the element.
function R.assert_same_results(got, ref, rtol)
  local gc = require "helpers.gradcheck"
  local n, m = 0, 0
  for k, v in pairs(got) do
    n = n + 1
    local r = ref[k]
    assert(r ~= nil, k .. ": PyTorch gave no result")
    assert(r:dtype() == v:dtype(), string.format("%s: dtype %s, PyTorch %s", k, v:dtype(), r:dtype()))
    local sv, sr = table.concat(v:size(), ", "), table.concat(r:size(), ", ")
    assert(sv == sr and v:dim() == r:dim(), string.format("%s: shape [%s], PyTorch [%s]", k, sv, sr))
    local a, b = gc.flat_values(v:double()), gc.flat_values(r:double())
    for j = 1, #b do
      local x, y = a[j], b[j]
      local ok = x == y or (x ~= x and y ~= y) or
        (rtol ~= nil and y == y and math.abs(x - y) <= rtol * math.max(1, math.abs(y)))
      assert(ok, string.format("%s[%d]: %s, PyTorch %s", k, j, tostring(x), tostring(y)))
    end
  end
  for _ in pairs(ref) do m = m + 1 end
  assert(m == n, string.format("%d results, PyTorch %d", n, m))
end

function R.assert_close(t, a, atol, rtol, what)
  what = what or "result"
  local got = R.from(t)
  local sg, se = table.concat(got.shape, ", "), table.concat(a.shape, ", ")
  assert(sg == se, string.format("%s: shape [%s], expected [%s]", what, sg, se))
  rtol = rtol or 0
  for k = 1, #a.v do
    local x, y = got.v[k], a.v[k]
    local ok
    if y ~= y then ok = x ~= x
    elseif y == math.huge or y == -math.huge then ok = x == y
    else ok = math.abs(x - y) <= atol + rtol * math.abs(y) end
    if not ok then
      error(string.format("%s: element %d is %.17g, expected %.17g (atol %g, rtol %g)", what, k, x, y, atol, rtol), 2)
    end
  end
end

-- Tolerances for comparing against a float64 reference.
R.TOL64 = { 1e-12, 1e-10 }
R.TOL32 = { 2e-5, 2e-5 }

-- Runs fn on the float64 inputs and on float32 copies (int64 inputs are
-- passed unchanged), comparing both with the reference array. tol32 may
-- widen the float32 tolerance for long sums.
function R.check_forward(fn, inputs, ref, tol32, tol64)
  tol64, tol32 = tol64 or R.TOL64, tol32 or R.TOL32
  local out64 = fn(table.unpack(inputs, 1, inputs.n or #inputs))
  assert(out64:dtype() == "float64", "float64 inputs gave " .. out64:dtype())
  R.assert_close(out64, ref, tol64[1], tol64[2], "float64")
  local in32 = {}
  for i = 1, inputs.n or #inputs do
    local x = inputs[i]
    in32[i] = (ddp.is_tensor(x) and x:dtype() == "float64") and x:float() or x
  end
  local out32 = fn(table.unpack(in32, 1, inputs.n or #inputs))
  assert(out32:dtype() == "float32", "float32 inputs gave " .. out32:dtype())
  R.assert_close(out32, ref, tol32[1], tol32[2], "float32")
end

-- Asserts fn() raises an error whose message contains every given piece
-- (plain substring matches), returning the message.
function R.assert_error(fn, ...)
  local ok, err = pcall(fn)
  assert(not ok, "expected an error, but the call succeeded")
  err = tostring(err)
  for _, piece in ipairs({ ... }) do
    assert(err:find(piece, 1, true), string.format("error message %q does not mention %q", err, piece))
  end
  return err
end

-- Each case {fn, piece} must fail with a string message that mentions piece
-- and is not a Lua runtime error of the library ("attempt to ..."): the
-- hostile-argument specs' tables.
function R.assert_errors(cases)
  for i, c in ipairs(cases) do
    local ok, err = pcall(c[1])
    assert(not ok, "case " .. i .. " succeeded")
    assert(type(err) == "string", "case " .. i .. ": the error is a " .. type(err))
    assert(err:find(c[2], 1, true), string.format("case %d: %q does not mention %q", i, err, c[2]))
    assert(not err:find("attempt to", 1, true), "case " .. i .. ": " .. err)
  end
end

-- ---- CPU kernel sets -------------------------------------------------------

-- The float32 kernel sets this CPU can run ("avx512", "avx2", "base"; the
-- baseline always, last), for specs that hold each against float64; the
-- automatic choice is restored afterwards.
function R.cpu_kernel_sets()
  local list = {}
  for _, name in ipairs({ "avx512", "avx2", "base" }) do
    if pcall(ddp.core.set_cpu_kernels, name) then list[#list + 1] = name end
  end
  ddp.core.set_cpu_kernels("auto")
  return list
end

--- One busted describe block per kernel set (list: R.cpu_kernel_sets() by default) and thread count, named
--- "<set>, <n> thread(s):", with the set and the count made current around it and restored after; body(isa,
--- threads) declares the tests. env: the spec's _ENV (busted's describe, setup and teardown live there).
function R.describe_kernel_sets(env, threads_list, body, list)
  for _, isa in ipairs(list or R.cpu_kernel_sets()) do
    for _, threads in ipairs(threads_list) do
      env.describe(isa .. ", " .. threads .. " thread(s):", function()
        local prev
        env.setup(function()
          prev = ddp.core.set_cpu_kernels(isa)
          ddp.set_num_threads(threads)
        end)
        env.teardown(function()
          ddp.core.set_cpu_kernels(prev)
          ddp.set_num_threads(1)
        end)
        body(isa, threads)
      end)
    end
  end
end

return R
