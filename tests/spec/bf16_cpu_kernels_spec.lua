-- bfloat16 on the CPU computes in float32 and rounds once (as PyTorch's CPU
-- kernels): the elementwise ops (cpu_elementwise.c, widening blocks of
-- 16-bit operands into the float32 vector kernels), attention
-- (ops/attention.c and attention_qkv.c attend bfloat16 operands in
-- float32), a linear's bias (added in the GEMM's float32 accumulator,
-- cpu_blas.c / cpu_dnnl.c) and its gradient (cpu_nn.c's column sums).
-- Each bfloat16 result must equal, bit for bit, the float32 computation on
-- the widened operands rounded to bfloat16; the old double-per-element
-- paths gave the same values ~30x slower, and the bias was rounded twice.
local ddp = require "ddplua"
local F = ddp.nn.F

local function same_bits(a, b, what)
  assert.equal(b:dtype(), a:dtype(), what)
  require("helpers.bits").same_bits(a, b, what, "float32 rounded")
end

-- n values: specials first (NaN, +-inf, +-0, a bfloat16 subnormal-free tiny), then a spread of magnitudes
local function values(n, seed)
  ddp.manual_seed(seed)
  local x = ddp.randn(n) * 3
  local special = { 0 / 0, math.huge, -math.huge, 0, -0.0, 1e-30, 65504, -7.25 }
  for i = 1, #special do x[i] = special[i] end
  return x:to("bfloat16")
end

local function bf(t) return t:to("bfloat16") end

describe("bfloat16 CPU kernels", function()
  local unary = { "gelu", "tanh", "sigmoid", "exp", "relu", "silu", "abs", "neg", "softplus", "elu" }

  for _, n in ipairs({ 0, 1, 37, 511, 512, 513, 1500 }) do
    it("unary ops over " .. n .. " values: float32 math rounded once", function()
      local x = values(math.max(n, 8), n + 1):narrow(1, 1, n)
      for _, op in ipairs(unary) do
        same_bits(x[op](x), bf(x:float()[op](x:float())), op)
      end
    end)
  end

  it("GELU forward and backward at every one of the 65536 bfloat16 values (the table cpu_gelu_table.c keeps)",
    function()
      local codes = {}
      for c = 0, 65535 do codes[#codes + 1] = string.pack("<I2", c) end
      local x = ddp.core.frombuffer(table.concat(codes), { dtype = "bfloat16" })
      ddp.manual_seed(21)
      local gy = bf(ddp.randn(65536) * 4)
      for _, flush in ipairs({ true, false }) do -- a table per denormal setting: subnormal inputs differ
        ddp.set_flush_denormal(flush)
        same_bits(x:gelu(), bf(x:float():gelu()), "gelu forward, flush " .. tostring(flush))
        local xb = x:clone():requires_grad_()
        xb:gelu():backward(gy)
        local xf = x:float():requires_grad_()
        xf:gelu():backward(gy:float())
        same_bits(xb.grad, bf(xf.grad), "gelu backward, flush " .. tostring(flush))
      end
      ddp.set_flush_denormal(true)
      -- under no_grad (evaluation), and on a strided view (the widening path)
      ddp.no_grad(function() same_bits(x:gelu(), bf(x:float():gelu()), "gelu under no_grad") end)
      local t = x:view(256, 256):t()
      same_bits(t:gelu(), bf(t:float():gelu()), "gelu of a transposed view")
    end)

  it("unary ops on strided and broadcast bfloat16 views", function()
    local x = values(40 * 30, 3):view(40, 30)
    local t = x:t() -- a transposed view: gathered, then widened
    same_bits(t:gelu(), bf(t:float():gelu()), "gelu of a transposed view")
    local s = x:narrow(2, 3, 17)
    same_bits(s:tanh(), bf(s:float():tanh()), "tanh of a column slice")
    local e = x:narrow(1, 1, 1):expand(5, 30)
    same_bits(e:sigmoid(), bf(e:float():sigmoid()), "sigmoid of an expanded row")
  end)

  it("unary backward (GELU, SiLU from x; tanh, sigmoid from their bfloat16 output) in bfloat16", function()
    local x, gy = values(1100, 4), values(1100, 5)
    for _, op in ipairs({ "gelu", "silu" }) do
      local xb = x:clone():requires_grad_()
      xb[op](xb):backward(gy)
      local xf = x:float():requires_grad_()
      xf[op](xf):backward(gy:float())
      same_bits(xb.grad, bf(xf.grad), op .. " backward")
    end
    -- tanh and sigmoid differentiate through their (rounded) output, as PyTorch's: tanh(-7.25) is -1 in
    -- bfloat16, so its gradient there is 0, not float32's 1.5e-5
    local formulas = {
      tanh = function(g, y) return g * (1 - y * y) end,
      sigmoid = function(g, y) return g * y * (1 - y) end,
    }
    for op, f in pairs(formulas) do
      local xb = x:clone():requires_grad_()
      local y = xb[op](xb)
      y:backward(gy)
      local want = bf(f(gy:double(), y:double())):double()
      local got = xb.grad:double()
      local err = (got - want):abs() - (want:abs() * 2 ^ -8 + 1e-30)
      local finite = want:eq(want)
      assert(err:masked_fill(finite:eq(0), -1):max():item() <= 0, op .. " backward beyond one rounding")
      assert.same(finite:totable(), got:eq(got):totable(), op .. " backward's NaNs")
      if op == "tanh" then assert.equal(0, got[8]:item(), "tanh backward where the output rounds to -1") end
    end
  end)

  it("binary ops: bfloat16 with bfloat16, with float32 (promoting), with a scalar, broadcast", function()
    local a, b = values(700, 6), values(700, 7)
    local af, bf32 = a:float(), ddp.randn(700)
    for _, op in ipairs({ "add", "sub", "mul", "div", "maximum", "minimum" }) do
      same_bits(a[op](a, b), bf(af[op](af, b:float())), op .. " bf16 bf16")
      same_bits(a[op](a, bf32), af[op](af, bf32), op .. " bf16 f32 -> f32")
    end
    -- the scalar in the tensor's dtype first, as PyTorch 1.13 (bfloat16 x * 0.3 multiplies by 0.30078125)
    local s = ddp.tensor({ 0.3 }):to("bfloat16"):item()
    same_bits(a + 1.5, bf(af + 1.5), "add a scalar")
    same_bits(a * 0.3, bf(af * s), "mul a scalar")
    same_bits(0.3 - a, bf(s - af), "a scalar minus")
    local m, row = values(30 * 23, 8):view(30, 23), values(23, 9)
    same_bits(m + row, bf(m:float() + row:float()), "a broadcast row")
    same_bits(m:t() * m:t(), bf(m:float():t() * m:float():t()), "transposed views")
    -- mixed operands widened inside the kernel (no promoting copy): broadcast and transposed, and the
    -- gradients in each operand's own dtype
    local big = ddp.randn(30, 23)
    same_bits(row + big, row:float() + big, "a bfloat16 row broadcast onto a float32 matrix")
    same_bits(m:t() * big:t(), m:float():t() * big:t(), "a transposed bfloat16 view times a float32 one")
    local ra, rb = row:clone():requires_grad_(), big:clone():requires_grad_()
    local y = ra * rb
    y:backward(ddp.ones(30, 23))
    assert.equal("float32", y:dtype())
    same_bits(ra.grad, bf(big:sum(1)), "the bfloat16 operand's gradient, summed over the broadcast")
    same_bits(rb.grad, row:float():view(1, 23):expand(30, 23), "the float32 operand's gradient")
  end)

  -- comparisons of 16-bit floats widen blocks into the float32 compare kernels (exact: the double path's results)
  it("compares bfloat16 with bfloat16, float32, a scalar, views: the float32 compares of the widened values", function()
    local a, b = values(1300, 10), values(1300, 11)
    b[20], b[21] = a[20]:item(), a[21]:item() -- equal pairs
    local ad, bf32 = a:double(), ddp.randn(1300) -- references: the double path
    local m, row = values(30 * 23, 12):view(30, 23), values(23, 13)
    for _, op in ipairs({ "eq", "ne", "lt", "le", "gt", "ge" }) do
      local cases = {
        { a[op](a, b), ad[op](ad, b:double()), "bf16 bf16" },
        { a[op](a, bf32), ad[op](ad, bf32:double()), "bf16 f32" },
        { a[op](a, 0.25), ad[op](ad, 0.25), "a scalar" },
        { a[op](a, 1 / 0), ad[op](ad, 1 / 0), "inf" },
        { m:t()[op](m:t(), row:view(23, 1)), m:double():t()[op](m:double():t(), row:double():view(23, 1)),
          "a transposed view with a broadcast column" },
        { m:t()[op](m:t(), -0.5), m:double():t()[op](m:double():t(), -0.5), "a transposed view with a scalar" },
      }
      for _, c in ipairs(cases) do
        assert.equal("uint8", c[1]:dtype())
        assert.same(c[2]:totable(), c[1]:totable(), op .. " " .. c[3])
      end
    end
  end)

  -- a bfloat16 model's softmax outside autocast: the float32 row kernels on widened rows, rounded once
  it("softmax and log_softmax of bfloat16 rows: float32 rounded once; gradients within a rounding of float64", function()
    -- 100 x 53: blocks of 38 rows widened a call (cpu_nn.c softmax_bf16_rows), the last one short
    for _, shape in ipairs({ { 37, 53 }, { 100, 53 }, { 5, 1 }, { 3, 4100 }, { 0, 7 } }) do
      ddp.manual_seed(14)
      local x = (ddp.randn(shape[1], shape[2]) * 4):to("bfloat16")
      if shape[1] * shape[2] > 8 then x[1][1], x[2][2] = 0 / 0, math.huge end -- a NaN row, an inf row
      for _, log in ipairs({ false, true }) do
        local what = string.format("%s [%d, %d]", log and "log_softmax" or "softmax", shape[1], shape[2])
        local fn = log and ddp.log_softmax or ddp.softmax
        local xb = x:clone():requires_grad_()
        local y = fn(xb, 2)
        same_bits(y, bf(fn(x:float(), 2)), what)
        local g = ddp.randn(shape[1], shape[2]):to("bfloat16")
        y:backward(g)
        -- float64 from the rounded y and g: log_softmax gx = g - exp(y) sum(g); softmax gx = y (g - sum(g y))
        local yd, gd = y:detach():double(), g:double()
        local want = log and gd - yd:exp() * gd:sum(2, true) or yd * (gd - (gd * yd):sum(2, true))
        local got = xb.grad:double()
        -- rows with a NaN are NaN on both sides (want:eq(want) is 0 there)
        local bad = ((got - want):abs() - (want:abs() * 2 ^ -7 + 1e-6)):gt(0):double() * want:eq(want):double()
        assert.equal(0, bad:sum():item(), what .. " gradient")
        assert.equal(want:eq(want):sum():item(), got:eq(got):sum():item(), what .. " NaN gradients")
      end
    end
  end)

  -- max / min / argmax / argmin along a dim widen each outer row into the float32 kernels: the double path's
  -- winners (ties: the first; NaN wins) and values
  it("max, min, argmax and argmin of bfloat16 along each dim: the float64 path's values and positions", function()
    local x = values(6 * 7 * 9, 15):view(6, 7, 9)
    x[2][3][4], x[2][5][4] = 1.5, 1.5 -- a tie along dim 2
    x[3][1][1], x[3][1][2] = -math.huge, -math.huge
    local xd = x:double()
    for dim = 1, 3 do
      for _, op in ipairs({ "max", "min" }) do
        local v, i = x[op](x, dim)
        local vd, id = xd[op](xd, dim)
        assert.equal("bfloat16", v:dtype())
        same_bits(v:double(), vd, op .. " values along " .. dim)
        assert.same(id:totable(), i:totable(), op .. " positions along " .. dim)
      end
      for _, op in ipairs({ "argmax", "argmin" }) do
        assert.same(xd[op](xd, dim):totable(), x[op](x, dim):totable(), op .. " along " .. dim)
      end
    end
  end)

  it("attention on bfloat16 operands is float32 attention of the widened operands, rounded", function()
    ddp.manual_seed(10)
    -- the widening path, also at the bfloat16 kernels' head dims (32: attention_bf16_spec.lua has them on)
    local amx0 = ddp.core.set_attention_amx(false)
    for _, c in ipairs({ { 1, 24 }, { 65, 24 }, { 130, 24 }, { 128, 64 } }) do
      local T, C = c[1], c[2]
      local x, gy = bf(ddp.randn(2, T, 3 * C)), bf(ddp.randn(2, T, C))
      local xb = x:clone():requires_grad_()
      local yb = F.self_attention_qkv(xb, C == 64 and 2 or 3, { is_causal = true })
      yb:backward(gy)
      local xf = x:float():requires_grad_()
      local yf = F.self_attention_qkv(xf, C == 64 and 2 or 3, { is_causal = true })
      yf:backward(gy:float())
      same_bits(yb, bf(yf), "self_attention_qkv T=" .. T)
      same_bits(xb.grad, bf(xf.grad), "self_attention_qkv backward T=" .. T)
    end
    -- several query and key blocks, no causal cut, and two threads (the staging buffers are per thread)
    local threads0 = ddp.get_num_threads()
    for _, threads in ipairs({ 1, 2 }) do
      ddp.set_num_threads(threads)
      local x, gy = bf(ddp.randn(1, 300, 3 * 40)), bf(ddp.randn(1, 300, 40))
      local xb = x:clone():requires_grad_()
      local yb = F.self_attention_qkv(xb, 2)
      yb:backward(gy)
      local xf = x:float():requires_grad_()
      local yf = F.self_attention_qkv(xf, 2)
      yf:backward(gy:float())
      same_bits(yb, bf(yf), "non-causal T=300, threads=" .. threads)
      same_bits(xb.grad, bf(xf.grad), "its backward, threads=" .. threads)
    end
    ddp.set_num_threads(threads0)
    local q, k, v = bf(ddp.randn(2, 3, 9, 8)), bf(ddp.randn(2, 3, 11, 8)), bf(ddp.randn(2, 3, 11, 5))
    local mask = bf(ddp.randn(9, 11))
    local qb, kb, vb = q:clone():requires_grad_(), k:clone():requires_grad_(), v:clone():requires_grad_()
    local y = F.scaled_dot_product_attention(qb, kb, vb, { attn_mask = mask })
    y:sum():backward()
    local qf, kf, vf = q:float():requires_grad_(), k:float():requires_grad_(), v:float():requires_grad_()
    local yf = F.scaled_dot_product_attention(qf, kf, vf, { attn_mask = mask:float() })
    yf:sum():backward()
    same_bits(y, bf(yf), "scaled_dot_product_attention with a bfloat16 mask")
    same_bits(kb.grad, bf(kf.grad), "its key gradient")
    same_bits(vb.grad, bf(vf.grad), "its value gradient")
    local keep = ddp.randn(9, 11):gt(-1)
    same_bits(F.scaled_dot_product_attention(q, k, v, { attn_mask = keep }),
      bf(F.scaled_dot_product_attention(q:float(), k:float(), v:float(), { attn_mask = keep })), "a boolean mask")
    assert.has_error(function() F.scaled_dot_product_attention(q, k, v, { attn_mask = mask:float() }) end,
      "scaled_dot_product_attention: attn_mask must be boolean (uint8) or of the query's dtype bfloat16, got float32")
    ddp.core.set_attention_amx(amx0)
  end)

  it("adds a linear's bias before the one rounding, with oneDNN and without", function()
    ddp.manual_seed(11)
    local x, w, b = bf(ddp.randn(33, 70)), bf(ddp.randn(20, 70)), bf(ddp.randn(20) * 100)
    local want = bf(ddp.linear(x:double(), w:double(), b:double()))
    for _, dnnl in ipairs({ true, false }) do
      local prev = ddp.core.set_onednn(dnnl)
      local got = ddp.linear(x, w, b)
      ddp.core.set_onednn(prev)
      -- one rounding of the float32 sum (whose own error is ~1e-5 here); rounding the ~8-sized product to
      -- bfloat16 before adding the ~100-sized bias would be off by up to 8 * 2^-9 = 0.016
      local excess = ((got:double() - want:double()):abs() - want:double():abs() * 2 ^ -8):max():item()
      assert(excess <= 1e-3, string.format("onednn=%s: %.3g beyond one rounding", tostring(dnnl), excess))
    end
  end)

  it("sums a linear's bias gradient over bfloat16 gradients (odd sizes, more columns than a block)", function()
    ddp.manual_seed(12)
    for _, sz in ipairs({ { 1, 5 }, { 37, 1100 }, { 6, 513 } }) do
      local rows, cols = sz[1], sz[2]
      local x, w = bf(ddp.randn(rows, 9)), bf(ddp.randn(cols, 9))
      local b = bf(ddp.randn(cols)):requires_grad_()
      local gy = bf(ddp.randn(rows, cols))
      ddp.linear(x, w, b):backward(gy)
      same_bits(b.grad, bf(gy:double():sum(1)), string.format("bias gradient [%d, %d]", rows, cols))
    end
  end)

  it("sums and means bfloat16 tensors in blocks through the float32 kernel, rounded once", function()
    ddp.manual_seed(13)
    -- randn values span few binades, so every double sum of them is exact: the same bits in any order
    for _, sz in ipairs({ { 0, 7 }, { 1, 1 }, { 3, 511 }, { 5, 513 }, { 2, 1500 }, { 1030, 3 } }) do
      local x = bf(ddp.randn(sz[1], sz[2]) * 3)
      same_bits(x:sum(), bf(x:double():sum()), "sum of [" .. sz[1] .. ", " .. sz[2] .. "]")
      for d = 1, 2 do
        same_bits(x:sum(d), bf(x:double():sum(d)), "sum over dim " .. d)
        if sz[1] * sz[2] > 0 then same_bits(x:mean(d), bf(x:float():mean(d)), "mean over dim " .. d) end
      end
    end
    -- over two dims at once and the mean: accumulated in float32 and rounded once, not once per dim
    local x3 = bf(ddp.randn(6, 7, 130) * 3)
    same_bits(x3:sum({ 1, 3 }), bf(x3:double():sum({ 1, 3 })), "sum over dims 1 and 3")
    same_bits(x3:mean({ 1, 3 }), bf(x3:float():mean({ 1, 3 })), "mean over dims 1 and 3")
    same_bits(x3:mean(), bf(x3:float():mean()), "mean of all")
    local xf = ddp.randn(4 * 600)
    xf[600 + 77], xf[1200 + 599] = 0 / 0, math.huge
    local x = bf(xf:view(4, 600))
    local s = x:sum(2):float()
    assert.is_true(s[2]:item() ~= s[2]:item(), "a NaN in the row makes its sum NaN")
    assert.equal(math.huge, s[3]:item())
    assert.equal(s[1]:item(), bf(x:double():sum(2))[1]:item())
  end)

  it("copies and casts an expanded value (a gradient's broadcast scalar) into every element", function()
    local one = bf(ddp.tensor({ 1.5 }))
    local e = one:expand(700, 3)
    same_bits(e:contiguous(), bf(ddp.full({ 700, 3 }, 1.5)), "bfloat16 expand, made contiguous")
    same_bits(e:float():to("bfloat16"), bf(ddp.full({ 700, 3 }, 1.5)), "cast of an expanded bfloat16")
    local f = ddp.tensor({ -2.75 }):expand(3, 513):to("bfloat16")
    same_bits(f, bf(ddp.full({ 3, 513 }, -2.75)), "float32 expanded value cast to bfloat16")
    local i = ddp.tensor({ 7 }, { dtype = "int64" }):expand(2, 9):float()
    assert.equal(126, i:sum():item())
    local t = bf(ddp.randn(40, 30)):t():contiguous() -- a strided 2-byte copy (the transposed view)
    assert.equal(30, t:size(1))
  end)
end)

