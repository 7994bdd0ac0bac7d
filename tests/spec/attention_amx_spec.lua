-- bfloat16 attention on AMX tiles (backends/cpu/cpu_attn_amx.c): with
-- bfloat16 q, k, v whose head dims are multiples of 32, on a CPU with
-- AMX-BF16, every product (S = Q K^T, O += P V; S again, dZ = dO V^T,
-- dQ, dK, dV in the backward) multiplies bfloat16 operands on the tiles,
-- accumulating in float32, with P and dS rounded to bfloat16, as
-- PyTorch's bfloat16 matmuls. Results must stay within bfloat16 rounding of the
-- float64 reference, as the float32-widening path does (whose bits
-- bf16_cpu_kernels_spec.lua pins, with the switch off). Without AMX the
-- switch must change nothing.
local ddp = require "ddplua"
local F = ddp.nn.F
local bits = require "helpers.bits"

local amx = ddp.core.cpu_info():find("amx_bf16", 1, true) ~= nil

local function bf(t) return t:to("bfloat16") end

-- out and the three gradients of bfloat16 attention, with the AMX tiles on or off
local function attend(q, k, v, go, opts, on)
  local prev = ddp.core.set_attention_amx(on)
  local qb, kb, vb = q:clone():requires_grad_(), k:clone():requires_grad_(), v:clone():requires_grad_()
  local o
  if opts.seed then
    ddp.manual_seed(opts.seed)
    o = F.scaled_dot_product_attention(qb, kb, vb, { dropout_p = opts.dropout_p })
  else
    o = F.scaled_dot_product_attention(qb, kb, vb, opts)
  end
  o:backward(go)
  ddp.core.set_attention_amx(prev)
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

describe("bfloat16 attention on AMX tiles", function()
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
      local on, off = attend(q, k, v, go, opts, true), attend(q, k, v, go, opts, false)
      near(on, want, "tiles on")
      near(off, want, "tiles off")
      if amx then
        assert.is_true(differs(on, off), "the tiles round P to bfloat16: some bits must differ from the widening path")
      else
        same(on, off, "no AMX: the switch changes nothing")
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
    for _, threads in ipairs({ 1, 2 }) do
      ddp.set_num_threads(threads)
      for _, opts in ipairs({ { attn_mask = keep }, { attn_mask = add } }) do
        local want = reference(q, k, v, go, { attn_mask = opts.attn_mask:dtype() == "bfloat16" and opts.attn_mask:double()
          or opts.attn_mask })
        near(attend(q, k, v, go, opts, true), want, "threads=" .. threads .. ", mask " .. opts.attn_mask:dtype())
      end
      -- dropout: the same kept weights with the tiles on and off (the same seed), results within rounding
      local d = { dropout_p = 0.3, seed = 11 }
      local on, off = attend(q, k, v, go, d, true), attend(q, k, v, go, d, false)
      for i = 1, 4 do
        local scale = off[i]:double():abs():max():item()
        local err = (on[i]:double() - off[i]:double()):abs():max():item()
        assert(err <= 2 ^ -6 * scale, string.format("dropout, threads=%d, %s: %.3g of %.3g", threads, names[i], err,
          scale))
      end
    end
    ddp.set_num_threads(threads0)
  end)

  it("views at an odd element offset with odd row strides: the contiguous copies' results", function()
      ddp.manual_seed(4)
      -- q, k, v as views one bfloat16 into rows of 65 (the op attends contiguous copies; the kernel itself
      -- widens what its tiles cannot read as whole 32-bit pairs)
      local base = bf(ddp.randn(3, 1, 2, 64, 65))
      local q, k, v = base[1]:narrow(4, 2, 64), base[2]:narrow(4, 2, 64), base[3]:narrow(4, 2, 64)
      local go = bf(ddp.randn(1, 2, 64, 64))
      local opts = { is_causal = true }
      local views = attend(q, k, v, go, opts, true)
      same(views, attend(q:contiguous(), k:contiguous(), v:contiguous(), go, opts, true), "odd views, tiles on")
      near(views, reference(q, k, v, go, opts), "odd views")
    end)

  it("the switch takes booleans only and reports the previous setting", function()
    local prev = ddp.core.set_attention_amx(false)
    assert.is_false(ddp.core.set_attention_amx(prev))
    assert.has_error(function() ddp.core.set_attention_amx(1) end)
  end)
end)
