-- cumprod and logcumsumexp (core.cumprod / core.logcumsumexp: the backend's cum_scan, src/backends/cpu/cpu_scan.c):
-- against scans written here in float64, on both layouts of the kernel (rows of the last dim in blocks of 16 lines,
-- columns of a middle dim in blocks of 16), line counts on both sides of a block, one and two threads, float32,
-- float64, bfloat16 and int64 (exact past 2^53, wrapping as PyTorch's); the gradients against the direct sum
-- written here (zeros, one, two, none in a line), finite differences and PyTorch, with its infinities; the errors.
local ddp = require "ddplua"
local R = require "helpers.ref"
local TR = require "helpers.torch_ref"
local gc = require "helpers.gradcheck"

-- The lines of a (R.from array) along dim d: calls fn(get, set, n) per line with 1-based accessors.
local function each_line(a, d, fn)
  local shape, n = a.shape, a.shape[d]
  local outer, inner = 1, 1
  for k = 1, #shape do
    if k < d then outer = outer * shape[k] elseif k > d then inner = inner * shape[k] end
  end
  for o = 0, outer - 1 do
    for i = 0, inner - 1 do
      local function at(j) return o * n * inner + (j - 1) * inner + i + 1 end
      fn(function(j) return a.v[at(j)] end, function(j, v) a.v[at(j)] = v end, n)
    end
  end
end

local function log_add_exp(a, b)
  if a ~= a or b ~= b then return a + b end
  local hi, lo = math.max(a, b), math.min(a, b)
  if lo == -math.huge or hi == math.huge then return hi end
  return hi + math.log(1 + math.exp(lo - hi))
end

-- The scan of x along d in float64 (Lua numbers), or of int64 values in Lua integers (wrapping as int64).
local function scan_ref(x, d, lse)
  local a = R.from(x)
  each_line(a, d, function(get, set, n)
    local acc = lse and -math.huge or (math.type(get(1)) == "integer" and 1 or 1.0)
    for j = 1, n do
      acc = lse and log_add_exp(acc, get(j)) or acc * get(j)
      set(j, acc)
    end
  end)
  return a
end

-- The gradient of sum(w * scan(x)) along d written as the direct sum: dx_j = sum over i >= j of w_i times the
-- derivative of y_i in x_j (the product of the other x up to i; exp(x_j - y_i)).
local function grad_ref(x, w, d, lse)
  local a, wa, y = R.from(x), R.from(w), scan_ref(x, d, lse)
  local out = R.from(x)
  local lines = {}
  each_line(y, d, function(get) lines[#lines + 1] = get end)
  local wl = {}
  each_line(wa, d, function(get) wl[#wl + 1] = get end)
  local k = 0
  each_line(a, d, function(get, _, n)
    k = k + 1
    local yl, wgt = lines[k], wl[k]
    local res = {}
    for j = 1, n do
      local s = 0
      for i = j, n do
        local dy
        if lse then
          dy = math.exp(get(j) - yl(i))
        else
          dy = 1
          for l = 1, i do if l ~= j then dy = dy * get(l) end end
        end
        s = s + wgt(i) * dy
      end
      res[j] = s
    end
    out.lines = out.lines or {}
    out.lines[k] = res
  end)
  k = 0
  each_line(out, d, function(_, set, n)
    k = k + 1
    for j = 1, n do set(j, out.lines[k][j]) end
  end)
  out.lines = nil
  return out
end

-- Values in [-2, 2] with zeros at a few positions (cumprod's interesting case), float64.
local function with_zeros(shape, seed)
  local x = R.uniform(shape, -2, 2, seed)
  return ddp.where(R.uniform(shape, 0, 1, seed + 1):lt(0.08), 0, x)
end

local LAYOUTS = { -- shape, dim: rows (inner 1) under, at and over a block of 16; columns (inner > 1) likewise
  { { 37, 53 }, 2 }, { { 16, 9 }, 2 }, { { 3, 200 }, 2 }, { { 5, 40, 19 }, 2 }, { { 3, 7, 33 }, 1 }, { { 70 }, 1 },
  { { 2, 5, 16 }, 2 }, { { 1, 1 }, 1 }, { { 4, 1, 3 }, 2 },
}

for _, threads in ipairs({ 1, 2 }) do
  describe(threads .. " thread(s):", function()
    setup(function() ddp.set_num_threads(threads) end)
    teardown(function() ddp.set_num_threads(1) end)

    it("cumprod and logcumsumexp match float64 scans in every layout, float64, float32 and bfloat16", function()
      for li, case in ipairs(LAYOUTS) do
        local shape, d = case[1], case[2]
        local x = with_zeros(shape, 100 + li)
        for _, lse in ipairs({ false, true }) do
          local name = lse and "logcumsumexp" or "cumprod"
          local ref = scan_ref(x, d, lse)
          local function call(t) return lse and t:logcumsumexp(d) or t:cumprod(d) end
          R.assert_close(call(x), ref, lse and 1e-15 or 0, lse and 1e-14 or 0, name .. " float64 " .. li)
          -- float32 folds its values in double and rounds once: the float64 scan of the float32 values, rounded
          local x32 = x:float()
          local ref32 = R.from(R.tensor(scan_ref(x32:double(), d, lse)):float())
          R.assert_close(call(x32), ref32, 0, lse and 2e-7 or 0, name .. " float32 " .. li)
          local xb = x:bfloat16()
          local refb = R.from(R.tensor(scan_ref(xb:double(), d, lse)):bfloat16())
          R.assert_close(call(xb), refb, 0, lse and 8e-3 or 0, name .. " bfloat16 " .. li)
        end
      end
    end)

    it("cumprod of int64 is exact past 2^53 and wraps as PyTorch's; other integers multiply in int64", function()
      local v = {}
      for j = 1, 45 do v[j] = (j % 3) + 2 end -- 2, 3, 4: the products pass 2^53 near j = 30 and 2^63 later
      local x = ddp.tensor(v, { dtype = "int64" }):view(1, 45):expand(20, 45):contiguous()
      local got = x:cumprod(2)
      assert.equal("int64", got:dtype())
      local acc = 1
      for j = 1, 45 do
        acc = acc * v[j] -- Lua integers wrap like int64
        assert.equal(acc, got[20][j]:item(), "position " .. j)
      end
      local u = ddp.tensor({ 200, 2, 3 }, { dtype = "uint8" }):cumprod(1)
      assert.equal("int64", u:dtype())
      assert.same({ 200, 400, 1200 }, u:totable())
      local c = x:transpose(1, 2):cumprod(1) -- strided, the column layout
      assert.equal(got[7][40]:item(), c[40][7]:item())
    end)

    it("the gradients equal the direct sums, with no zero, one zero and two zeros in a line", function()
      for li, case in ipairs({ { { 6, 9 }, 2 }, { { 4, 7, 18 }, 2 }, { { 19, 5 }, 2 }, { { 5, 3 }, 1 } }) do
        local shape, d = case[1], case[2]
        -- lines with no zero, one zero, two zeros and a zero at the end, in turn
        local x = R.from(R.uniform(shape, -1.5, 1.5, 300 + li))
        local k = 0
        each_line(x, d, function(_, set, n)
          k = k + 1
          if k % 4 == 2 then set(math.min(3, n), 0) end
          if k % 4 == 3 then set(1, 0); set(n, 0) end
          if k % 4 == 0 then set(n, 0) end
        end)
        x = R.tensor(x)
        local w = R.randn(shape, 400 + li)
        for _, lse in ipairs({ false, true }) do
          local xl = x:clone():requires_grad_()
          local y = lse and xl:logcumsumexp(d) or xl:cumprod(d)
          ;(y * w):sum():backward()
          R.assert_close(xl.grad, grad_ref(x, w, d, lse), 1e-12, 1e-11, (lse and "logcumsumexp" or "cumprod") ..
            " gradient " .. li)
          local x32 = x:float():requires_grad_()
          local y32 = lse and x32:logcumsumexp(d) or x32:cumprod(d)
          ;(y32 * w:float()):sum():backward()
          R.assert_close(x32.grad, grad_ref(x, w, d, lse), 1e-5, 1e-5, "float32 gradient " .. li)
        end
      end
    end)
  end)
end

it("the gradients pass finite differences, strided inputs included", function()
  gc.assert_gradcheck(function(t) return t:cumprod(2) end, { gc.smooth_input({ 5, 21 }, 7) })
  gc.assert_gradcheck(function(t) return t:transpose(1, 2):cumprod(2) end, { gc.smooth_input({ 17, 3 }, 8) })
  gc.assert_gradcheck(function(t) return t:logcumsumexp(1) end, { gc.smooth_input({ 23, 4 }, 9) })
  gc.assert_gradcheck(function(t) return (t * 40):logcumsumexp(2) end, { gc.smooth_input({ 3, 30 }, 10) })
end)

-- (cumprod's gradient on lines with an infinity or a NaN is left out: PyTorch's divides the reversed sums of g * y
-- by x, so such a line gives NaN everywhere; ddplua's multiplies the other values, which gives the derivative where
-- it exists: a NaN at the start still has the finite derivatives of the products after it, docs/pytorch_differences.md)
it("match PyTorch with zeros, infinities, NaN and large values, gradients included", function()
  local inf, nan = math.huge, 0 / 0
  local edge = ddp.tensor({ { -inf, -inf, 1, inf, 2 }, { nan, 1, 2, 3, 4 }, { 3, -inf, -1000, 1000, 5 },
    { 0, 0, 2, -3, 0.5 } }, { dtype = "float64" })
  local x = with_zeros({ 33, 18 }, 11)
  local out = TR.run([[
def both(t, dim, tp=None):
    a = (t if tp is None else tp).clone().requires_grad_(); ya = a.cumprod(dim); ya.sum().backward()
    b = t.clone().requires_grad_(); yb = b.logcumsumexp(dim); (yb * 0.5).sum().backward()
    return ya.detach(), a.grad, yb.detach(), b.grad
OUT['p'], OUT['pg'], OUT['l'], OUT['lg'] = both(T['x'], 1)
OUT['p1'], OUT['pg1'], OUT['l1'], OUT['lg1'] = both(T['x'], 0)
OUT['e'], OUT['eg'], OUT['le'], OUT['leg'] = both(T['edge'], 1, T['edge'][3:4])
OUT['f'], OUT['fg'], OUT['lf'], OUT['lfg'] = both(T['x'].float(), 1)
]], { x = x, edge = edge })
  local got = {}
  local function both(t, d, a, b, c, e, tp)
    local ta = (tp or t):clone():requires_grad_()
    local ya = ta:cumprod(d)
    ya:sum():backward()
    local tb = t:clone():requires_grad_()
    local yb = tb:logcumsumexp(d)
    ;(yb * 0.5):sum():backward()
    got[a], got[b], got[c], got[e] = ya:detach(), ta.grad, yb:detach(), tb.grad
  end
  both(x, 2, "p", "pg", "l", "lg")
  both(x, 1, "p1", "pg1", "l1", "lg1")
  both(edge, 2, "e", "eg", "le", "leg", edge:narrow(1, 4, 1))
  both(x:float(), 2, "f", "fg", "lf", "lfg")
  R.assert_same_results(got, out, 1e-5)
end)

it("empty and 0-dim tensors, and the errors", function()
  local e = ddp.zeros({ 2, 0, 3 })
  assert.same({ 2, 0, 3 }, e:cumprod(2):size())
  assert.same({ 2, 0, 3 }, e:logcumsumexp(3):size())
  local s = ddp.tensor(2.5, { requires_grad = true })
  local y = s:cumprod(1)
  assert.equal(2.5, y:item())
  y:backward()
  assert.equal(1, s.grad:item())
  assert.equal(2.5, ddp.tensor(2.5):logcumsumexp(-1):item())
  R.assert_error(function() ddp.zeros({ 3 }, { dtype = "int64" }):logcumsumexp(1) end, "logcumsumexp",
    "floating-point")
  R.assert_error(function() ddp.core.logcumsumexp(ddp.zeros({ 3 }, { dtype = "uint8" }), 1) end, "logcumsumexp",
    "floating-point", "uint8")
  R.assert_error(function() ddp.core.cumprod(ddp.zeros({ 3 }, { dtype = "uint8" }), 1) end, "cumprod",
    "floating-point tensor or int64", "uint8")
  R.assert_error(function() ddp.zeros({ 3, 4 }):cumprod(3) end, "cumprod", "dim 3")
  R.assert_error(function() ddp.zeros({ 3, 4 }):logcumsumexp(-3) end, "logcumsumexp", "dim -3")
  -- a second argument (torch's dtype= has no place here) is an error, not silently dropped
  R.assert_error(function() ddp.zeros({ 3, 4 }):cumprod(1, "float64") end, "cumprod", "only dim", "3 arguments")
  R.assert_error(function() ddp.zeros({ 3, 4 }):logcumsumexp(1, 2) end, "logcumsumexp", "only dim")
  R.assert_error(function() ddp.zeros({ 3, 4 }):cumsum(1, true) end, "cumsum", "only dim", "3 arguments")
end)
