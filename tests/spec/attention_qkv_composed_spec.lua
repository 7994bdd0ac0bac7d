-- nn.F.self_attention_qkv_composed, the composition F.self_attention_qkv
-- runs off the CPU (split, heads as views, scaled_dot_product_attention,
-- merge): on the CPU it gives the fused op's numbers bit for bit, forward
-- and backward, dropout included, and refuses what the fused op refuses.
local ddp = require "ddplua"
local R = require "helpers.ref"
local F = ddp.nn.F

local function run(f, x, gy)
  local xx = x:clone():requires_grad_()
  local y = f(xx)
  y:backward(gy)
  return y, xx.grad
end

describe("self_attention_qkv_composed", function()
  it("equals the fused CPU op bit for bit, forward and backward", function()
    for _, c in ipairs({ { 2, 7, 3, 12 }, { 1, 65, 2, 34 }, { 1, 1, 1, 6 } }) do
      local B, T, H, C = c[1], c[2], c[3], c[4]
      for _, dt in ipairs({ "float32", "float64" }) do
        local x, gy = R.randn({ B, T, 3 * C }, 5):to(dt), R.randn({ B, T, C }, 6):to(dt)
        for _, o in ipairs({ { is_causal = true }, {}, { is_causal = true, dropout_p = 0.3 }, { scale = 0.5 } }) do
          ddp.manual_seed(9)
          local y1, g1 = run(function(t) return F.self_attention_qkv(t, H, o) end, x, gy)
          ddp.manual_seed(9)
          local y2, g2 = run(function(t) return F.self_attention_qkv_composed(t, H, o) end, x, gy)
          local what = string.format("B=%d T=%d H=%d C=%d %s", B, T, H, C, dt)
          R.assert_close(y2, R.from(y1), 0, 0, "output " .. what)
          R.assert_close(g2, R.from(g1), 0, 0, "gradient " .. what)
        end
      end
    end
  end)

  it("refuses a qkv that is not [B, T, 3C] and an n_head that does not divide C, as the fused op does", function()
    local x = ddp.randn(2, 4, 12)
    for _, f in ipairs({ F.self_attention_qkv, F.self_attention_qkv_composed }) do
      assert.has_error(function() f(ddp.randn(2, 4, 10), 2) end,
        "self_attention_qkv: qkv must be [batch, length, 3 * embed] (q, k and v side by side), got shape [2, 4, 10]")
      assert.has_error(function() f(ddp.randn(8, 12), 2) end,
        "self_attention_qkv: qkv must be [batch, length, 3 * embed] (q, k and v side by side), got shape [8, 12]")
      assert.has_error(function() f(x, 3) end,
        "self_attention_qkv: n_head must be a positive divisor of the embedding size 4, got 3")
      assert.has_error(function() f(x, 0) end,
        "self_attention_qkv: n_head must be a positive divisor of the embedding size 4, got 0")
    end
    assert.has_error(function() F.self_attention_qkv_composed(x, 2, { is_causal = 1 }) end)
    assert.has_error(function() F.self_attention_qkv_composed(x, 2, { dropout_p = 1 }) end)
  end)
end)
