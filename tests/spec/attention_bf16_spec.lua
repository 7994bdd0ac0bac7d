-- bfloat16 attention's products in bfloat16 (backends/cpu/cpu_attn_bf16.h):
-- with bfloat16 q, k, v whose head dims are multiples of 32, every product
-- (S = Q K^T, O += P V; S again, dZ = dO V^T, dQ, dK, dV in the backward)
-- multiplies bfloat16 operands, accumulating in float32, with P and dS
-- rounded to bfloat16, as PyTorch's bfloat16 matmuls: on AMX tiles
-- (cpu_attn_amx.c) where the CPU has AMX-BF16, with AVX512-BF16 dot
-- products (cpu_attn_dot.c) where it has that; each kernel this CPU runs is
-- checked. Results must stay within bfloat16 rounding of the float64
-- reference, as the float32-widening path does (whose bits
-- bf16_cpu_kernels_spec.lua pins, with the kernel "widen"). On a CPU with
-- neither, "auto" must be the widening path bit for bit.
local ddp = require "ddplua"
local F = ddp.nn.F
local bits = require "helpers.bits"

local cpu = ddp.core.cpu_info()
local has = { amx = cpu:find("amx_bf16", 1, true) ~= nil, avx512_bf16 = cpu:find("avx512_bf16", 1, true) ~= nil }
local kernels = {}
for _, k in ipairs({ "amx", "avx512_bf16" }) do
  if has[k] then kernels[#kernels + 1] = k end
end

local function bf(t) return t:to("bfloat16") end

-- out and the three gradients of bfloat16 attention with the products' kernel `kind`
local function attend(q, k, v, go, opts, kind)
  local prev = ddp.core.attention_bf16(kind)
  local qb, kb, vb = q:clone():requires_grad_(), k:clone():requires_grad_(), v:clone():requires_grad_()
  local o
  if opts.seed then
    ddp.manual_seed(opts.seed)
    o = F.scaled_dot_product_attention(qb, kb, vb, { dropout_p = opts.dropout_p })
  else
    o = F.scaled_dot_product_attention(qb, kb, vb, opts)
  end
  o:backward(go)
  ddp.core.attention_bf16(prev)
  return { o, qb.grad, kb.grad, vb.grad }
end

local function reference(q, k, v, go, opts)
  local qd, kd, vd = q:double():requires_grad_(), k:double():requires_grad_(), v:double():requires_grad_()
  local o = F.scaled_dot_product_attention(qd, kd, vd, opts)
  o:backward(go:double())
  return { o, qd.grad, kd.grad, vd.grad }
end

local names = { "output", "query gradient", "key gradient", "value gradient" }
-- within 2^-7 of the largest reference value: bfloat16 keeps 8 bits; the float32-widening path measured ~0.003
local function near(got, want, what)
  for i = 1, 4 do
    local scale = want[i]:abs():max():item()
    local err = (got[i]:double() - want[i]):abs():max():item()
    assert(err <= 2 ^ -7 * scale + 1e-6,
      string.format("%s, %s: off by %.3g of %.3g (more than bfloat16 rounding)", what, names[i], err, scale))
  end
end

local function same(a, b, what)
  for i = 1, 4 do bits.same_bits(a[i], b[i], what .. ", " .. names[i], "widening path") end
end

local function differs(a, b)
  for i = 1, 4 do
    if a[i]:ne(b[i]):sum():item() > 0 then return true end
  end
  return false
end

describe("bfloat16 attention products in bfloat16", function()
  local cases = {
    { 2, 3, 128, 32, true }, -- the GPT example's shape: one tile per head
    { 1, 2, 37, 32, true },  -- a last strip of 5 queries, odd keys
    { 1, 2, 300, 64, false }, -- several query and key blocks, two tile steps per head dim
    { 2, 1, 300, 64, true },
    { 1, 1, 1, 32, false },
  }
  for _, c in ipairs(cases) do
    local B, H, T, E, causal = c[1], c[2], c[3], c[4], c[5]
    it(string.format("B=%d H=%d T=%d head dim %d causal=%s: within bfloat16 rounding of float64", B, H, T, E,
      tostring(causal)), function()
      ddp.manual_seed(T + E)
      local q, k, v = bf(ddp.randn(B, H, T, E)), bf(ddp.randn(B, H, T, E)), bf(ddp.randn(B, H, T, E) * 2)
      local go = bf(ddp.randn(B, H, T, E))
      local opts = { is_causal = causal }
      local want = reference(q, k, v, go, opts)
      local off = attend(q, k, v, go, opts, "widen")
      near(off, want, "widened")
      for _, kind in ipairs(kernels) do
        local on = attend(q, k, v, go, opts, kind)
        near(on, want, kind)
        if T > 1 then -- (one key: P = 1, O = V and dS = 0 exactly on both paths)
          assert.is_true(differs(on, off), kind .. " rounds P to bfloat16: some bits must differ from the widening path")
        else
          same(on, off, kind .. " with one key: exact")
        end
      end
      local auto = attend(q, k, v, go, opts, "auto")
      if #kernels == 0 then
        same(auto, off, "neither kernel: auto is the widening path")
      else
        same(auto, attend(q, k, v, go, opts, kernels[1]), "auto is " .. kernels[1])
      end
    end)
  end

  it("masks (boolean and additive) and dropout, on two threads", function()
    ddp.manual_seed(3)
    local threads0 = ddp.get_num_threads()
    local q, k, v = bf(ddp.randn(2, 2, 70, 32)), bf(ddp.randn(2, 2, 90, 32)), bf(ddp.randn(2, 2, 90, 32))
    local go = bf(ddp.randn(2, 2, 70, 32))
    local keep = ddp.randn(70, 90):gt(-1)
    local add = bf(ddp.randn(70, 90))
    for _, kind in ipairs(kernels) do
      for _, threads in ipairs({ 1, 2 }) do
        ddp.set_num_threads(threads)
        for _, opts in ipairs({ { attn_mask = keep }, { attn_mask = add } }) do
          local want = reference(q, k, v, go, { attn_mask = opts.attn_mask:dtype() == "bfloat16" and
            opts.attn_mask:double() or opts.attn_mask })
          near(attend(q, k, v, go, opts, kind), want, kind .. ", threads=" .. threads .. ", mask " ..
            opts.attn_mask:dtype())
        end
        -- dropout: the same kept weights with the kernel and widened (the same seed), results within rounding
        local d = { dropout_p = 0.3, seed = 11 }
        local on, off = attend(q, k, v, go, d, kind), attend(q, k, v, go, d, "widen")
        for i = 1, 4 do
          local scale = off[i]:double():abs():max():item()
          local err = (on[i]:double() - off[i]:double()):abs():max():item()
          assert(err <= 2 ^ -6 * scale, string.format("%s dropout, threads=%d, %s: %.3g of %.3g", kind, threads,
            names[i], err, scale))
        end
      end
    end
    ddp.set_num_threads(threads0)
  end)

  it("views at an odd element offset with odd row strides: the contiguous copies' results", function()
    ddp.manual_seed(4)
    -- q, k, v as views one bfloat16 into rows of 65 (the op attends contiguous copies; the kernel itself
    -- widens what it cannot read as whole 32-bit pairs)
    local base = bf(ddp.randn(3, 1, 2, 64, 65))
    local q, k, v = base[1]:narrow(4, 2, 64), base[2]:narrow(4, 2, 64), base[3]:narrow(4, 2, 64)
    local go = bf(ddp.randn(1, 2, 64, 64))
    local opts = { is_causal = true }
    for _, kind in ipairs(kernels) do
      local views = attend(q, k, v, go, opts, kind)
      same(views, attend(q:contiguous(), k:contiguous(), v:contiguous(), go, opts, kind), "odd views, " .. kind)
      near(views, reference(q, k, v, go, opts), "odd views, " .. kind)
    end
  end)

  it("the kernel setting: names, the CPU's kernels only, the older boolean switch", function()
    local prev = ddp.core.attention_bf16("widen")
    assert.equal("widen", ddp.core.attention_bf16())
    assert.is_false(ddp.core.set_attention_amx(true)) -- "widen" was off; on is "auto"
    assert.equal("auto", ddp.core.attention_bf16())
    assert.is_true(ddp.core.set_attention_amx(false))
    assert.equal("widen", ddp.core.attention_bf16("auto"))
    assert.has_error(function() ddp.core.set_attention_amx(1) end)
    assert.has_error(function() ddp.core.attention_bf16("fast") end, "bad argument #1 to 'attention_bf16' " ..
      "(invalid option 'fast')")
    for _, kind in ipairs({ "amx", "avx512_bf16" }) do
      if has[kind] then
        assert.equal("auto", ddp.core.attention_bf16(kind))
        assert.equal(kind, ddp.core.attention_bf16("auto"))
      else
        local want = kind == "amx" and "AMX-BF16" or "AVX512-BF16"
        assert.has_error(function() ddp.core.attention_bf16(kind) end, "core.attention_bf16: this CPU has no " .. want)
        assert.equal("auto", ddp.core.attention_bf16()) -- unchanged
      end
    end
    ddp.core.attention_bf16(prev)
  end)
end)
