-- nn.Bilinear, nn.LocalResponseNorm and nn.ChannelShuffle (nn/bilinear_lrn_shuffle.lua) against PyTorch 1.13:
-- forward values and input / weight gradients in float64 on odd shapes (leading dims, one channel, a window wider
-- than the channels, 3-D and 5-D inputs, empty batches), the modules' parameters, reprs and bad arguments.
local ddp = require "ddplua"
local R = require "helpers.ref"
local TR = require "helpers.torch_ref"
local nn, F = ddp.nn, ddp.nn.F

local function f64(...) return ddp.randn({ ... }, { dtype = "float64" }) end

describe("Bilinear, LocalResponseNorm, ChannelShuffle", function()
  it("Bilinear gives PyTorch's values and gradients", function()
    ddp.manual_seed(31)
    local x1, x2, w, b, gy = f64(2, 3, 4), f64(2, 3, 5), f64(6, 4, 5), f64(6), f64(2, 3, 6)
    local ref = TR.run([[
import torch, torch.nn.functional as F
x1 = T['x1'].clone().requires_grad_(); x2 = T['x2'].clone().requires_grad_()
w = T['w'].clone().requires_grad_(); b = T['b'].clone().requires_grad_()
y = F.bilinear(x1, x2, w, b); y.backward(T['gy'])
OUT['y'], OUT['g1'], OUT['g2'], OUT['gw'], OUT['gb'] = y, x1.grad, x2.grad, w.grad, b.grad
OUT['y0'] = F.bilinear(T['x1'][0], T['x2'][0], T['w'])
]], { x1 = x1, x2 = x2, w = w, b = b, gy = gy })
    local l1, l2, lw, lb = x1:clone():requires_grad_(), x2:clone():requires_grad_(), w:clone():requires_grad_(),
      b:clone():requires_grad_()
    local y = F.bilinear(l1, l2, lw, lb)
    y:backward(gy)
    R.assert_close(y, R.from(ref.y), 1e-12, 1e-12, "y")
    R.assert_close(l1.grad, R.from(ref.g1), 1e-12, 1e-12, "x1")
    R.assert_close(l2.grad, R.from(ref.g2), 1e-12, 1e-12, "x2")
    R.assert_close(lw.grad, R.from(ref.gw), 1e-12, 1e-12, "weight")
    R.assert_close(lb.grad, R.from(ref.gb), 1e-12, 1e-12, "bias")
    R.assert_close(F.bilinear(x1[1], x2[1], w), R.from(ref.y0), 1e-12, 1e-12, "no bias")
    local m = nn.Bilinear(4, 5, 6)
    assert.same({ 6, 4, 5 }, m.weight:size())
    assert.is_true(m.weight:abs():max():item() <= 0.5) -- U(-1/sqrt(4), 1/sqrt(4))
    assert.same({ 7, 6 }, m(ddp.randn(7, 4), ddp.randn(7, 5)):size())
    assert.is_nil(nn.Bilinear(4, 5, 6, false).bias)
    assert.equal("Bilinear(in1_features=4, in2_features=5, out_features=6, bias=True)", tostring(m))
  end)

  it("LocalResponseNorm gives PyTorch's values and gradients", function()
    ddp.manual_seed(32)
    local cases = { { { 2, 5, 3, 4 }, 3, {} }, { { 2, 4, 6 }, 2, { alpha = 0.5, beta = 0.6, k = 2.0 } },
      { { 1, 3, 2, 2, 3 }, 7, {} }, { { 2, 1, 5 }, 4, { alpha = 1.0 } } }
    local inputs, script = {}, { "import torch, torch.nn.functional as F" }
    for i, c in ipairs(cases) do
      inputs["x" .. i] = f64(table.unpack(c[1]))
      script[#script + 1] = string.format([[
x = T['x%d'].clone().requires_grad_()
y = F.local_response_norm(x, %d, alpha=%s, beta=%s, k=%s); (y * y).sum().backward()
OUT['y%d'], OUT['g%d'] = y, x.grad]], i, c[2], c[3].alpha or 1e-4, c[3].beta or 0.75, c[3].k or 1.0, i, i)
    end
    local ref = TR.run(table.concat(script, "\n"), inputs)
    for i, c in ipairs(cases) do
      local x = inputs["x" .. i]:clone():requires_grad_()
      local y = nn.LocalResponseNorm(c[2], c[3])(x)
      ;(y * y):sum():backward()
      R.assert_close(y, R.from(ref["y" .. i]), 1e-12, 1e-12, "y " .. i)
      R.assert_close(x.grad, R.from(ref["g" .. i]), 1e-11, 1e-11, "gradient " .. i)
    end
    assert.same({ 0, 3, 4 }, F.local_response_norm(ddp.randn(0, 3, 4), 2):size())
    assert.equal("LocalResponseNorm(3, alpha=0.0001, beta=0.75, k=1.0)", tostring(nn.LocalResponseNorm(3)))
  end)

  it("ChannelShuffle gives PyTorch's order, and the inverse order as its gradient", function()
    -- PyTorch 1.13's channel_shuffle has no backward ("derivative for channel_shuffle is not implemented"); the
    -- gradient of sum(y * x) is x in the inverse order: a shuffle of 6 channels in 3 groups undone by one in 2
    local x, x5 = f64(2, 6, 3), f64(1, 4, 2, 1, 2)
    local ref = TR.run([[
import torch
OUT['y'] = torch.nn.ChannelShuffle(3)(T['x'])
OUT['inv'] = torch.nn.ChannelShuffle(2)(T['x'])
OUT['y5'] = torch.nn.ChannelShuffle(2)(T['x5'])
]], { x = x, x5 = x5 })
    local xl = x:clone():requires_grad_()
    local y = nn.ChannelShuffle(3)(xl)
    ;(y * x):sum():backward()
    R.assert_close(y, R.from(ref.y), 0, 0, "y")
    R.assert_close(xl.grad, R.from(ref.inv), 0, 0, "gradient")
    R.assert_close(F.channel_shuffle(x5, 2), R.from(ref.y5), 0, 0, "5-D")
    assert.equal("ChannelShuffle(groups=2)", tostring(nn.ChannelShuffle(2)))
  end)

  it("name bad arguments", function()
    R.assert_errors({
      { function() return F.bilinear(ddp.randn(2, 3), ddp.randn(2, 4), ddp.randn(5, 3, 5)) end,
        "bilinear: inputs of 3 and 5 features" },
      { function() return F.bilinear(ddp.randn(2, 3), ddp.randn(3, 4), ddp.randn(5, 3, 4)) end, "same leading dims" },
      { function() return F.bilinear(ddp.randn(2, 3), ddp.randn(2, 4), ddp.randn(3, 4)) end, "weight must be [out" },
      { function() return F.bilinear(ddp.randn(2, 3), ddp.randn(2, 4), ddp.randn(5, 3, 4), ddp.randn(4)) end,
        "bias must be [5]" },
      { function() return nn.Bilinear(1 << 30, 1 << 30, 1 << 30) end, "too large" },
      { function() return nn.Bilinear(0, 2, 3) end, "in1_features must be a positive integer" },
      { function() return F.local_response_norm(ddp.randn(2, 3), 2) end, "3 or more dims" },
      { function() return nn.LocalResponseNorm(0) end, "size must be a positive integer" },
      { function() return nn.LocalResponseNorm(2, 0 / 0) end, "alpha must be a number" },
      { function() return nn.ChannelShuffle(4)(ddp.randn(1, 6, 2)) end, "6 must be divisible by groups 4" },
      { function() return F.channel_shuffle(ddp.randn(6, 2), 2) end, "3 or more dims" },
      { function() return nn.ChannelShuffle(-1) end, "groups must be a positive integer" },
    })
  end)
end)
