-- nn.F.scaled_dot_product_attention, the fused op: forward and gradients
-- against the composed float64 math (softmax(q k^T * scale + mask) v, by
-- matmul and softmax), the float32 tiled kernel against the float64
-- reference path at sizes around its tile edges (1, 63, 64, 65, 129, 130
-- rows; 257 keys: three key blocks of 128), boolean and float masks broadcast from smaller shapes, is_causal
-- with L != S, rows with no key (0, as PyTorch >= 2.5), dropout (the same
-- mask in forward and backward, and on both paths), strided q/k/v as MHA
-- makes them, finite differences, PyTorch, memory (no [L, S] matrix), and
-- bad arguments.
local ddp = require "ddplua"
local gc = require "helpers.gradcheck"
local R = require "helpers.ref"
local TR = require "helpers.torch_ref"
local U = require "helpers.io_util"
local F = ddp.nn.F

-- the composed reference (any dtype): scores, mask, softmax (0 for a row
-- with no key), weights times v
local function composed(q, k, v, o)
  o = o or {}
  local E = q:size(-1)
  local s = q:matmul(k:transpose(-2, -1)) * (o.scale or 1 / math.sqrt(E))
  local L, S = q:size(-2), k:size(-2)
  if o.is_causal then
    local keep = ddp.ones(L, S, { dtype = "float64" }):tril():gt(0)
    s = s:masked_fill(keep:eq(0), -math.huge)
  end
  local m = o.attn_mask
  if m and m:dtype() == "uint8" then s = s:masked_fill(m:eq(0), -math.huge) elseif m then s = s + m end
  local mx = s:max(-1, true)
  local none = mx:eq(-math.huge)
  local p = (s - ddp.where(none, 0, mx)):exp()
  local w = p / ddp.where(none, 1, p:sum(-1, true))
  return w:matmul(v)
end

local function rnd(shape, seed) return R.randn(shape, seed) end

describe("scaled_dot_product_attention", function()
  it("float64 equals the composed math: masks, causal, scale, broadcast masks, empty rows", function()
    local q, k, v = rnd({ 2, 3, 5, 4 }, 1), rnd({ 2, 3, 7, 4 }, 2), rnd({ 2, 3, 7, 6 }, 3)
    local bool = rnd({ 1, 3, 5, 7 }, 4):gt(-0.3)
    local float = rnd({ 5, 7 }, 5)
    local pad = ddp.tensor({ { 1, 1, 1, 1, 0, 0, 0 }, { 1, 1, 1, 1, 1, 1, 1 } }):byte():view(2, 1, 1, 7)
    for _, o in ipairs({ {}, { is_causal = true }, { attn_mask = bool }, { attn_mask = float }, { attn_mask = pad },
      { scale = 0.3 }, { is_causal = true, scale = 2 } }) do
      local y = F.scaled_dot_product_attention(q, k, v, o)
      R.assert_close(y, R.from(composed(q, k, v, o)), 1e-12, 1e-12, "options")
    end
    local none = ddp.zeros(5, 7):byte()
    none[2] = ddp.ones(7):byte() -- only row 2 has keys
    local y = F.scaled_dot_product_attention(q, k, v, { attn_mask = none })
    assert.are.same({ 0, 0, 0, 0, 0, 0 }, gc.flat_values(y[1][1][1]))
    R.assert_close(y, R.from(composed(q, k, v, { attn_mask = none })), 1e-12, 1e-12, "rows with no key")
    -- no batch dims, and three of them
    R.assert_close(F.scaled_dot_product_attention(q[1][1], k[1][1], v[1][1]), R.from(composed(q[1][1], k[1][1],
      v[1][1])), 1e-12, 1e-12, "2-d")
    local q3, k3, v3 = q:view(2, 3, 1, 5, 4), k:view(2, 3, 1, 7, 4), v:view(2, 3, 1, 7, 6)
    R.assert_close(F.scaled_dot_product_attention(q3, k3, v3, { attn_mask = bool:view(1, 3, 1, 5, 7) }),
      R.from(composed(q3, k3, v3, { attn_mask = bool:view(1, 3, 1, 5, 7) })), 1e-12, 1e-12, "3 batch dims")
  end)

  it("float32's tiled kernel matches the float64 path across tile edges, forward and backward", function()
    for _, sz in ipairs({ { 1, 1, 32 }, { 63, 65, 32 }, { 64, 64, 64 }, { 130, 70, 17 }, { 65, 130, 40 },
      { 129, 257, 24 } }) do
      local L, S, E = sz[1], sz[2], sz[3]
      for _, o in ipairs({ {}, { is_causal = true }, { attn_mask = rnd({ L, S }, 6):gt(0.5) },
        { attn_mask = rnd({ 2, 1, L, S }, 7) } }) do
        local q, k, v = rnd({ 2, 2, L, E }, 8), rnd({ 2, 2, S, E }, 9), rnd({ 2, 2, S, E + 3 }, 10)
        local gy = rnd({ 2, 2, L, E + 3 }, 11)
        local function run(dt)
          local qq, kk, vv = q:to(dt):clone():requires_grad_(), k:to(dt):clone():requires_grad_(), v:to(dt):clone():requires_grad_()
          local oo = {}
          for key, val in pairs(o) do oo[key] = ddp.is_tensor(val) and val:dtype() ~= "uint8" and val:to(dt) or val end
          local y = F.scaled_dot_product_attention(qq, kk, vv, oo)
          y:backward(gy:to(dt))
          return y, qq.grad, kk.grad, vv.grad
        end
        local r64, r32 = { run("float64") }, { run("float32") }
        for i, what in ipairs({ "output", "dq", "dk", "dv" }) do
          R.assert_close(r32[i], R.from(r64[i]), 2e-5, 2e-4, string.format("%s at L=%d S=%d E=%d", what, L, S, E))
        end
      end
    end
  end)

  it("float32 gradients are whole in reused memory: keys no query sees get 0, every dq row is written", function()
    -- the kernel writes its gradient tensors without zeroing them first (the first tile that reaches a row writes
    -- it); the allocator hands back blocks that held NaN here, so a row left unwritten would show
    -- (no keys at all; and a boolean mask whose row 2 has no key: output rows the first key block writes as 0)
    local nokey = ddp.ones(7, 3):byte()
    nokey[2] = ddp.zeros(3):byte()
    for _, sz in ipairs({ { 20, 150, 32, true }, { 5, 40, 8, true }, { 7, 3, 16, false }, { 130, 140, 32, true },
      { 7, 0, 16, false }, { 7, 3, 16, false, nokey } }) do
      local L, S, E, causal, mask = sz[1], sz[2], sz[3], sz[4], sz[5]
      local q, k, v = rnd({ 2, 2, L, E }, 40), rnd({ 2, 2, S, E }, 41), rnd({ 2, 2, S, E + 3 }, 42)
      local gy = rnd({ 2, 2, L, E + 3 }, 43)
      local function run(dt)
        local qq, kk, vv = q:to(dt):clone():requires_grad_(), k:to(dt):clone():requires_grad_(), v:to(dt):clone():requires_grad_()
        local y = F.scaled_dot_product_attention(qq, kk, vv, { is_causal = causal, attn_mask = mask })
        y:backward(gy:to(dt))
        return { y, qq.grad, kk.grad, vv.grad }
      end
      local r64 = run("float64")
      for rep = 1, 3 do
        do -- blocks of every size involved, full of NaN, back into the allocator's cache
          local junk = {}
          for i, n in ipairs({ 2 * 2 * L * E, 2 * 2 * S * E, 2 * 2 * S * (E + 3), 2 * 2 * L * (E + 3) }) do
            junk[i] = ddp.ones(n) * (0 / 0)
          end
        end
        collectgarbage()
        local r32 = run("float32")
        for i, what in ipairs({ "output", "dq", "dk", "dv" }) do
          R.assert_close(r32[i], R.from(r64[i]), 2e-5, 2e-4, string.format("%s at L=%d S=%d E=%d causal=%s rep %d",
            what, L, S, E, tostring(causal), rep))
        end
        if S == 0 or mask then
          local y, dq = S == 0 and r32[1] or r32[1]:narrow(3, 2, 1), S == 0 and r32[2] or r32[2]:narrow(3, 2, 1)
          assert.are.equal(0, y:abs():max():item(), "output of a row with no key")
          assert.are.equal(0, dq:abs():max():item(), "dq of a row with no key")
        end
        if causal and S > L then
          assert.are.equal(0, r32[3]:narrow(3, L + 1, S - L):abs():max():item(), "dk of unseen keys")
          assert.are.equal(0, r32[4]:narrow(3, L + 1, S - L):abs():max():item(), "dv of unseen keys")
        end
      end
    end
  end)

  it("float32 gives the same bits on 2 threads as on 1 (heads and query blocks split over the pool)", function()
    local before = ddp.get_num_threads()
    for _, sz in ipairs({ { 130, 130, 32, true }, { 70, 200, 24, false }, { 9, 9, 8, true } }) do
      local L, S, E, causal = sz[1], sz[2], sz[3], sz[4]
      local q, k, v = rnd({ 2, 3, L, E }, 50):float(), rnd({ 2, 3, S, E }, 51):float(), rnd({ 2, 3, S, E + 2 }, 52):float()
      local gy = rnd({ 2, 3, L, E + 2 }, 53):float()
      local function run(threads)
        ddp.set_num_threads(threads)
        local qq, kk, vv = q:clone():requires_grad_(), k:clone():requires_grad_(), v:clone():requires_grad_()
        local y = F.scaled_dot_product_attention(qq, kk, vv, { is_causal = causal })
        y:backward(gy)
        return { y, qq.grad, kk.grad, vv.grad }
      end
      local one, two = run(1), run(2)
      ddp.set_num_threads(before)
      for i, what in ipairs({ "output", "dq", "dk", "dv" }) do
        R.assert_close(two[i], R.from(one[i]), 0, 0, string.format("%s at L=%d S=%d E=%d", what, L, S, E))
      end
    end
  end)

  it("has the finite-difference gradient for q, k, v and a float mask, strided inputs included", function()
    local mask = rnd({ 3, 4 }, 12):gt(-0.5)
    gc.assert_gradcheck(function(q, k, v) return F.scaled_dot_product_attention(q, k, v, { attn_mask = mask }) end,
      { gc.smooth_input({ 2, 3, 5 }, 13), gc.smooth_input({ 2, 4, 5 }, 14), gc.smooth_input({ 2, 4, 3 }, 15) })
    gc.assert_gradcheck(function(q, k, v, m)
      return F.scaled_dot_product_attention(q:transpose(2, 3), k:transpose(2, 3), v:transpose(2, 3), { attn_mask = m })
    end, { gc.smooth_input({ 1, 3, 2, 4 }, 16), gc.smooth_input({ 1, 5, 2, 4 }, 17), gc.smooth_input({ 1, 5, 2, 2 }, 18),
      gc.smooth_input({ 3, 5 }, 19) })
    gc.assert_gradcheck(function(q, k, v) return F.scaled_dot_product_attention(q, k, v, { is_causal = true }) end,
      { gc.smooth_input({ 4, 3 }, 20), gc.smooth_input({ 6, 3 }, 21), gc.smooth_input({ 6, 2 }, 22) })
  end)

  it("reads q, k, v as MHA's transposed views without changing the result", function()
    local x = rnd({ 2, 70, 3, 32 }, 23) -- [B, T, H, D]
    local q = x:float():transpose(2, 3)   -- [B, H, T, D], not contiguous
    local y1 = F.scaled_dot_product_attention(q, q, q, { is_causal = true })
    local y2 = F.scaled_dot_product_attention(q:contiguous(), q:contiguous(), q:contiguous(), { is_causal = true })
    R.assert_close(y1, R.from(y2), 0, 0, "strided")
  end)

  it("drops weights with dropout_p, the same mask in forward and backward and on both paths", function()
    local q, k, v = rnd({ 2, 70, 16 }, 24), rnd({ 2, 80, 16 }, 25), rnd({ 2, 80, 8 }, 26)
    local function run(dt, seed)
      ddp.manual_seed(seed)
      local qq, kk, vv = q:to(dt):clone():requires_grad_(), k:to(dt):clone():requires_grad_(), v:to(dt):clone():requires_grad_()
      local y = F.scaled_dot_product_attention(qq, kk, vv, { dropout_p = 0.3 })
      y:sum():backward()
      return y, qq.grad, kk.grad, vv.grad
    end
    local a, b, c = { run("float64", 5) }, { run("float32", 5) }, { run("float64", 6) }
    for i = 1, 4 do R.assert_close(b[i], R.from(a[i]), 2e-5, 2e-4, "float32 vs float64 with dropout " .. i) end
    assert.is_true((a[1] - c[1]):abs():max():item() > 1e-3) -- another seed, another mask
    -- the expectation is kept: the mean output over many seeds approaches the undropped one
    local plain = F.scaled_dot_product_attention(q, k, v)
    local acc = plain * 0
    for s = 1, 200 do
      ddp.manual_seed(100 + s)
      acc = acc + F.scaled_dot_product_attention(q, k, v, { dropout_p = 0.3 })
    end
    assert.is_true(((acc / 200) - plain):abs():mean():item() < 0.02)
    gc.assert_gradcheck(function(qq, kk, vv)
      ddp.manual_seed(77) -- each call draws the same mask
      return F.scaled_dot_product_attention(qq, kk, vv, { dropout_p = 0.4 })
    end, { gc.smooth_input({ 3, 4 }, 27), gc.smooth_input({ 5, 4 }, 28), gc.smooth_input({ 5, 3 }, 29) })
  end)

  it("gives a saturated softmax row the composed math's exact zero gradient in float32", function()
    -- one key wins every row by 1e4 (the weights are one-hot in float32): dS = P (dO V^T - D) must cancel
    -- exactly, as softmax's backward does; with D = rowsum(dO O) summed in another order than dO V^T it was a
    -- rounding difference times |K| (about 1e-3; found by the differential suite)
    local q = ddp.tensor({ { 1, 0, 2 }, { 2, 1, 1 }, { 3, -1, 1 } }, { dtype = "float32" }):view(1, 1, 3, 3)
      :requires_grad_()
    local k = ddp.tensor({ { 9000, 0, 7000 }, { 0, 0, 0 }, { -5000, 1, 0 }, { 1, 2, 3 } }, { dtype = "float32" })
      :view(1, 1, 4, 3)
      :requires_grad_()
    ddp.manual_seed(5)
    for _ = 1, 4 do
      q.grad, k.grad = nil, nil
      local v = ddp.randn(1, 1, 4, 24):requires_grad_()
      local y = F.scaled_dot_product_attention(q, k, v)
      local first = v:detach():view(4, 24)[1]:totable()
      assert.are.same({ first, first, first }, y:detach():view(3, 24):totable()) -- key 1's value row, bit for bit
      local loss = (y * ddp.randn(1, 1, 3, 24)):sum()
      loss:backward()
      for _, t in ipairs({ q.grad, k.grad }) do
        for _, g in ipairs(gc.flat_values(t)) do assert.are.equal(0, g) end
      end
    end
  end)

  it("takes the row term D from the tile for heads of up to 128 keys: identical keys exact, large inputs near float64",
    function()
      -- identical keys and values (expanded): every dZ of a row is equal, so dS = P (dZ - D) is exactly 0; D = sum P dZ
      -- over weights that sum to 1 only to rounding left 3.8e-4 in q's gradient (the division by sum P takes it out)
      local q = ddp.tensor({ 1.5, -2, 0.25, 3, -1, 0.5, 2, -0.75 }, { dtype = "float32" }):view(1, 4, 2):requires_grad_()
      local k = ddp.tensor({ 40.2, -17.5 }, { dtype = "float32" }):view(1, 1, 2):expand(1, 3, 2)
      local v = ddp.tensor({ 0.3, -1.1, 2.5 }, { dtype = "float32" }):view(1, 1, 3):expand(1, 3, 3)
      local kl, vl = k:contiguous():requires_grad_(), v:contiguous():requires_grad_()
      F.scaled_dot_product_attention(q, kl, vl):backward(ddp.randn(1, 4, 3))
      for _, g in ipairs(gc.flat_values(q.grad)) do assert.are.equal(0, g) end
      for _, g in ipairs(gc.flat_values(kl.grad)) do assert.are.equal(0, g) end
      -- the differential suite's SEED=20261227 case 15570 (q to 77, v to 44, a float mask): with D = rowsum(dO O)
      -- the gradient of k was 1.2e-4 off float64, 15x the composed float32's error (7.7e-6)
      local qv = { -10.586028099060059, 21.360162734985352, 31.707555770874023, -1.8501629829406738, -77.48675537109375,
        43.817901611328125, -19.5596923828125, -39.975444793701172 }
      local kv = { -0.29978427290916443, -1.5537056922912598, -0.80928963422775269, -0.95867985486984253,
        -0.01041041873395443, -1.1901264190673828, 0.49797818064689636, -0.11320406198501587, 1.5866919755935669,
        -0.46929389238357544 }
      local vv = { -6.1068010330200195, 43.197822570800781, 41.459903717041016, 0.77356040477752686, 39.195907592773438,
        -32.280075073242188, 10.50629711151123, 21.029018402099609, -10.924763679504395, 18.670913696289062,
        32.56671142578125, -5.8148255348205566, 2.3535795211791992, -16.785209655761719, 36.071781158447266,
        42.439037322998047, -24.077592849731445, -24.625930786132812, 44.319522857666016, -25.678350448608398 }
      local mv = { -0.62420052289962769, -0.019680595025420189, -1.418932318687439, 1.8243353366851807, 0.7046247124671936,
        -0.027754258364439011, 0.21255147457122803, -0.5835188627243042, -1.645237922668457, 1.2899372577667236,
        0.11059363186359406, -0.10589464008808136, -0.53232765197753906, 1.2773052453994751, -0.37275251746177673,
        -0.18291464447975159, 0.71554577350616455, -1.5466173887252808, -1.3301082849502563, -0.25737100839614868 }
      local function grads(dt, f)
        local qq = ddp.tensor(qv, { dtype = dt }):view(1, 4, 2):requires_grad_()
        local kk = ddp.tensor(kv, { dtype = dt }):view(1, 5, 2):requires_grad_()
        local vv2 = ddp.tensor(vv, { dtype = dt }):view(1, 5, 4):requires_grad_()
        local y = f(qq, kk, vv2, { attn_mask = ddp.tensor(mv, { dtype = dt }):view(4, 5) })
        local w = {}
        for i = 0, 15 do w[i + 1] = ((i * 7) % 11 - 5) / 4 end
        (y * ddp.tensor(w, { dtype = dt }):view(1, 4, 4)):sum():backward()
        return kk.grad:double()
      end
      local exact = grads("float64", composed)
      local e_fused = (grads("float32", F.scaled_dot_product_attention) - exact):abs():max():item()
      local e_comp = (grads("float32", composed) - exact):abs():max():item()
      assert.is_true(e_fused <= 2 * e_comp + 1e-6, string.format("gradient of k: fused %g, composed %g", e_fused, e_comp))
    end)

  it("keeps float32's precision in the backward when the scores are large (the lse is saved in float64)", function()
    -- a float mask lifting every score by 3000: a float32 lse is rounded by 3000 * 2^-24 = 2e-4, and every weight the
    -- backward recomputed as exp(S - lse) was off by that much, twice the composed float32 math's error (which comes
    -- from the scores' own rounding at 3000); found by the differential suite
    ddp.manual_seed(7)
    local q, k, v = ddp.randn(2, 5, 4), ddp.randn(2, 7, 4), ddp.randn(2, 7, 3)
    local mask = ddp.randn(5, 7) + 3000
    local w = ddp.randn(2, 5, 3)
    local function grads(dt, f)
      local function leaf(t) return t:to(dt):clone():requires_grad_() end
      local qq, kk, vv = leaf(q), leaf(k), leaf(v)
      local loss = (f(qq, kk, vv, { attn_mask = mask:to(dt) }) * w:to(dt)):sum()
      loss:backward()
      return { qq.grad:double(), kk.grad:double(), vv.grad:double() }
    end
    local fused, comp = grads("float32", F.scaled_dot_product_attention), grads("float32", composed)
    local exact = grads("float64", composed)
    for i = 1, 3 do
      local e_fused = (fused[i] - exact[i]):abs():max():item()
      local e_comp = (comp[i] - exact[i]):abs():max():item()
      assert.is_true(e_fused <= 1.5 * e_comp + 1e-6, string.format("gradient %d: fused %g, composed %g", i, e_fused,
        e_comp))
    end
  end)

  it("matches PyTorch's math in float32 and float64, values and gradients", function()
    if not TR.available() then return pending("skipped: /usr/bin/python3 cannot import torch") end
    local q, k, v, m = rnd({ 2, 2, 70, 32 }, 30), rnd({ 2, 2, 90, 32 }, 31), rnd({ 2, 2, 90, 16 }, 32), rnd({ 70, 90 }, 33)
    local g = rnd({ 2, 2, 70, 16 }, 34)
    local ref = TR.run([[
for dt, name in ((torch.float64, "64"), (torch.float32, "32")):
    q, k, v = [T[n].to(dt).clone().requires_grad_() for n in ("q", "k", "v")]
    causal = torch.ones(70, 90, dtype=torch.bool).tril()
    s = (q @ k.transpose(-2, -1)) / math.sqrt(32) + T["m"].to(dt)
    y = torch.softmax(s.masked_fill(~causal, float("-inf")), -1) @ v
    y.backward(T["g"].to(dt))
    OUT["y" + name], OUT["q" + name], OUT["k" + name], OUT["v" + name] = y, q.grad, k.grad, v.grad
]], { q = q, k = k, v = v, m = m, g = g })
    local causal = ddp.ones(70, 90):tril():gt(0)
    for _, dt in ipairs({ "64", "32" }) do
      local d = dt == "64" and "float64" or "float32"
      local qq, kk, vv = q:to(d):clone():requires_grad_(), k:to(d):clone():requires_grad_(), v:to(d):clone():requires_grad_()
      local mask = m:to(d):masked_fill(causal:eq(0), -math.huge)
      local y = F.scaled_dot_product_attention(qq, kk, vv, { attn_mask = mask })
      y:backward(g:to(d))
      local tol = dt == "64" and { 1e-12, 1e-10 } or { 3e-6, 3e-5 }
      R.assert_close(y, R.from(ref["y" .. dt]), tol[1], tol[2], d .. " output")
      R.assert_close(qq.grad, R.from(ref["q" .. dt]), tol[1], tol[2], d .. " dq")
      R.assert_close(kk.grad, R.from(ref["k" .. dt]), tol[1], tol[2], d .. " dk")
      R.assert_close(vv.grad, R.from(ref["v" .. dt]), tol[1], tol[2], d .. " dv")
    end
  end)

  it("keeps no [L, S] matrix: 4096 x 4096 scores would be 64 MiB, the op's peak stays a few MiB", function()
    local dir = U.tmpdir()
    local script = dir .. "/mem.lua"
    U.write(script, [[
local ddp = require "ddplua"
local q = ddp.randn(1, 1, 4096, 8):requires_grad_()
local base = ddp.memory_stats().live_bytes
local y = ddp.nn.F.scaled_dot_product_attention(q, q, q, { is_causal = true })
y:sum():backward()
print(string.format("PEAK %d", ddp.memory_stats().peak_bytes - base))
]])
    local ok, out = U.run_ddplua(script, {})
    U.rm_rf(dir)
    assert(ok, out)
    local peak = tonumber(out:match("PEAK (%d+)"))
    assert.is_true(peak < 4 * 1024 * 1024, "peak above the inputs: " .. tostring(peak))
  end)

  it("rejects bad arguments, naming them", function()
    local q = ddp.randn(2, 3, 4)
    R.assert_error(function() F.scaled_dot_product_attention(q, ddp.randn(2, 3, 5), q) end,
      "query [2, 3, 4] and key [2, 3, 5] must have the same last dimension")
    R.assert_error(function() F.scaled_dot_product_attention(q, q, ddp.randn(2, 4, 4)) end,
      "key [2, 3, 4] and value [2, 4, 4] must have the same length")
    R.assert_error(function() F.scaled_dot_product_attention(q, ddp.randn(3, 3, 4), q) end,
      "must have the same leading (batch) dimensions")
    R.assert_error(function() F.scaled_dot_product_attention(q, q:double(), q) end, "one dtype")
    R.assert_error(function() F.scaled_dot_product_attention(ddp.randn(4), q, q) end, "at least 2 dimensions")
    R.assert_error(function() F.scaled_dot_product_attention(q, q, q, { attn_mask = ddp.ones(3, 3):byte(), is_causal = true }) end,
      "pass attn_mask or is_causal=true, not both")
    R.assert_error(function() F.scaled_dot_product_attention(q, q, q, { attn_mask = ddp.ones(2, 3) }) end,
      "cannot be broadcast to the scores' shape [2, 3, 3]")
    R.assert_error(function() F.scaled_dot_product_attention(q, q, q, { attn_mask = ddp.ones(3, 3, { dtype = "float64" }) }) end,
      "attn_mask must be boolean (uint8) or of the query's dtype float32")
    R.assert_error(function() F.scaled_dot_product_attention(q, q, q, { dropout_p = 1 }) end, "dropout_p must be in [0, 1)")
    R.assert_error(function() F.scaled_dot_product_attention(q, q, q, { causal = true }) end, "unknown option 'causal'")
    R.assert_error(function() F.scaled_dot_product_attention(q, q, q, { is_causal = 1 }) end, "is_causal must be a boolean")
    R.assert_error(function() F.scaled_dot_product_attention(q:long(), q:long(), q:long()) end, "must be floating point")
  end)
end)
