-- nn.F.self_attention_qkv, nanoGPT's attention over a packed qkv [B, T, 3C]
-- as one op (ops/attention_qkv.c): the same numbers as its composition
-- (split, heads as transposed views, scaled_dot_product_attention, merge),
-- bit for bit, forward and backward, dropout included; the float64 path
-- against the float64 composed math; float32 against float64 across the
-- tiles' edges (T = 1, 63, 64, 65, 130) and head dims (5, 17, 32, 40);
-- causal dropout in float32 against float64; finite differences; the
-- scaled_dot_product_attention kernels' strided
-- output gradient; bad arguments.
local ddp = require "ddplua"
local gc = require "helpers.gradcheck"
local R = require "helpers.ref"
local F = ddp.nn.F

local function heads(t, B, T, H, C) return t:view(B, T, H, C // H):transpose(2, 3) end

-- the unfused composition (nanoGPT's code) through scaled_dot_product_attention
local function composed(x, H, o)
  local B, T, C = x:size(1), x:size(2), x:size(3) // 3
  local q, k, v = x:split(C, 3)
  local y = F.scaled_dot_product_attention(heads(q, B, T, H, C), heads(k, B, T, H, C), heads(v, B, T, H, C), o)
  return y:transpose(2, 3):reshape(B, T, C)
end

-- the math by matmul and softmax (float64 reference)
local function math_ref(x, H, causal)
  local B, T, C = x:size(1), x:size(2), x:size(3) // 3
  local q, k, v = x:split(C, 3)
  q, k, v = heads(q, B, T, H, C), heads(k, B, T, H, C), heads(v, B, T, H, C)
  local s = q:matmul(k:transpose(-2, -1)) * (1 / math.sqrt(C // H))
  if causal then s = s:masked_fill(ddp.ones(T, T, { dtype = "float64" }):tril():eq(0), -math.huge) end
  return s:softmax(-1):matmul(v):transpose(2, 3):reshape(B, T, C)
end

local function run(f, x, gy)
  local xx = x:clone():requires_grad_()
  local y = f(xx)
  y:backward(gy)
  return y, xx.grad
end

describe("self_attention_qkv", function()
  it("gives its composition's numbers bit for bit, forward and backward, odd shapes and dropout", function()
    for _, c in ipairs({ { 2, 7, 3, 12 }, { 2, 130, 4, 128 }, { 1, 1, 2, 10 }, { 3, 65, 2, 34 }, { 1, 64, 1, 40 } }) do
      local B, T, H, C = c[1], c[2], c[3], c[4]
      for _, dt in ipairs({ "float32", "float64" }) do
        local x, gy = R.randn({ B, T, 3 * C }, 1):to(dt), R.randn({ B, T, C }, 2):to(dt)
        for _, o in ipairs({ { is_causal = true }, {}, { is_causal = true, dropout_p = 0.25 }, { scale = 0.7 } }) do
          ddp.manual_seed(3)
          local y1, g1 = run(function(t) return F.self_attention_qkv(t, H, o) end, x, gy)
          ddp.manual_seed(3)
          local y2, g2 = run(function(t) return composed(t, H, o) end, x, gy)
          local what = string.format("B=%d T=%d H=%d C=%d %s causal=%s p=%s", B, T, H, C, dt, tostring(o.is_causal),
            tostring(o.dropout_p))
          R.assert_close(y1, R.from(y2), 0, 0, "output " .. what)
          R.assert_close(g1, R.from(g2), 0, 0, "gradient " .. what)
        end
      end
    end
  end)

  it("float64 equals the composed math; float32 matches float64 across tile edges and head dims", function()
    for _, c in ipairs({ { 2, 1, 2, 10 }, { 1, 63, 3, 15 }, { 2, 64, 2, 64 }, { 1, 65, 1, 17 }, { 1, 130, 3, 120 } }) do
      local B, T, H, C = c[1], c[2], c[3], c[4]
      local x, gy = R.randn({ B, T, 3 * C }, 4), R.randn({ B, T, C }, 5)
      local what = string.format("B=%d T=%d H=%d C=%d", B, T, H, C)
      for _, causal in ipairs({ true, false }) do
        local y64, g64 = run(function(t) return F.self_attention_qkv(t, H, { is_causal = causal }) end, x, gy)
        local yr, gr = run(function(t) return math_ref(t, H, causal) end, x, gy)
        R.assert_close(y64, R.from(yr), 1e-12, 1e-12, "float64 output " .. what)
        R.assert_close(g64, R.from(gr), 1e-11, 1e-11, "float64 gradient " .. what)
        local y32, g32 = run(function(t) return F.self_attention_qkv(t, H, { is_causal = causal }) end, x:float(),
          gy:float())
        R.assert_close(y32, R.from(y64), 2e-5, 2e-4, "float32 output " .. what)
        R.assert_close(g32, R.from(g64), 2e-5, 2e-4, "float32 gradient " .. what)
      end
    end
  end)

  it("float32 with causal dropout matches float64 (the same mask) across the causal strips", function()
    -- the float32 kernels cut diagonal tiles into 16-row strips; the float64 path has no tiles
    for _, c in ipairs({ { 1, 130, 2, 64 }, { 2, 65, 1, 24 }, { 1, 17, 2, 6 } }) do
      local B, T, H, C = c[1], c[2], c[3], c[4]
      local x, gy = R.randn({ B, T, 3 * C }, 15), R.randn({ B, T, C }, 16)
      local o = { is_causal = true, dropout_p = 0.2 }
      ddp.manual_seed(17)
      local y64, g64 = run(function(t) return F.self_attention_qkv(t, H, o) end, x, gy)
      ddp.manual_seed(17)
      local y32, g32 = run(function(t) return F.self_attention_qkv(t, H, o) end, x:float(), gy:float())
      local what = string.format("B=%d T=%d H=%d C=%d", B, T, H, C)
      R.assert_close(y32, R.from(y64), 2e-5, 2e-4, "output " .. what)
      R.assert_close(g32, R.from(g64), 2e-5, 2e-4, "gradient " .. what)
      ddp.manual_seed(18)
      local y2 = F.self_attention_qkv(x, H, o)
      assert.is_true((y2 - y64):abs():max():item() > 1e-3) -- another seed, another mask
    end
  end)

  it("has the finite-difference gradient, causal or not, with dropout, from a strided qkv", function()
    gc.assert_gradcheck(function(x) return F.self_attention_qkv(x, 2, { is_causal = true }) end,
      { gc.smooth_input({ 2, 5, 12 }, 6) })
    gc.assert_gradcheck(function(x) return F.self_attention_qkv(x, 1, {}) end, { gc.smooth_input({ 1, 4, 9 }, 7) })
    gc.assert_gradcheck(function(x)
      ddp.manual_seed(8) -- each call draws the same mask
      return F.self_attention_qkv(x, 2, { is_causal = true, dropout_p = 0.3 })
    end, { gc.smooth_input({ 1, 6, 6 }, 9) })
    gc.assert_gradcheck(function(x) return F.self_attention_qkv(x:transpose(1, 2), 2, { is_causal = true }) end,
      { gc.smooth_input({ 3, 2, 6 }, 10) })
  end)

  it("lets scaled_dot_product_attention take a transposed output gradient as it is (no copy, same numbers)", function()
    local q, k, v = R.randn({ 2, 3, 70, 8 }, 11):float(), R.randn({ 2, 3, 70, 8 }, 12):float(),
        R.randn({ 2, 3, 70, 8 }, 13):float()
    local gy = R.randn({ 2, 70, 3, 8 }, 14):float() -- [B, T, H, D]: its transpose is a strided [B, H, T, D]
    local function grads(g)
      local qq, kk, vv = q:clone():requires_grad_(), k:clone():requires_grad_(), v:clone():requires_grad_()
      F.scaled_dot_product_attention(qq, kk, vv, { is_causal = true }):backward(g)
      return { qq.grad, kk.grad, vv.grad }
    end
    local a, b = grads(gy:transpose(2, 3)), grads(gy:transpose(2, 3):contiguous())
    for i = 1, 3 do R.assert_close(a[i], R.from(b[i]), 0, 0, "gradient " .. i) end
    local c = grads(gy:transpose(2, 3):double():float()) -- and against float64
    local function g64()
      local qq, kk, vv = q:double():requires_grad_(), k:double():requires_grad_(), v:double():requires_grad_()
      F.scaled_dot_product_attention(qq, kk, vv, { is_causal = true }):backward(gy:double():transpose(2, 3))
      return { qq.grad, kk.grad, vv.grad }
    end
    local d = g64()
    for i = 1, 3 do R.assert_close(c[i], R.from(d[i]), 2e-5, 2e-4, "float64 gradient " .. i) end
  end)

  it("rejects bad arguments with clear errors", function()
    local x = ddp.randn(2, 4, 12)
    assert.has_error(function() F.self_attention_qkv(ddp.randn(2, 4, 10), 2) end,
      "self_attention_qkv: qkv must be [batch, length, 3 * embed] (q, k and v side by side), got shape [2, 4, 10]")
    assert.has_error(function() F.self_attention_qkv(ddp.randn(8, 12), 2) end,
      "self_attention_qkv: qkv must be [batch, length, 3 * embed] (q, k and v side by side), got shape [8, 12]")
    assert.has_error(function() F.self_attention_qkv(x, 3) end,
      "self_attention_qkv: n_head must be a positive divisor of the embedding size 4, got 3")
    assert.has_error(function() F.self_attention_qkv(x, 0) end,
      "self_attention_qkv: n_head must be a positive divisor of the embedding size 4, got 0")
    assert.has_error(function() F.self_attention_qkv(x:long(), 2) end,
      "self_attention_qkv: qkv must be floating point, got int64")
    assert.has_error(function() F.self_attention_qkv(x, 2, { dropout_p = 1 }) end,
      "self_attention_qkv: dropout_p must be in [0, 1), got 1")
    assert.has_error(function() F.self_attention_qkv(x, 2, { causal = true }) end)
    assert.has_error(function() F.self_attention_qkv(x, 2, { is_causal = 1 }) end,
      "self_attention_qkv: is_causal must be a boolean, got number")
  end)
end)
