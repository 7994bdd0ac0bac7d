-- conv_transpose2d and nn.ConvTranspose2d (src/ops/conv_transpose.c: a convolution's input gradient, its own
-- gradients a convolution and a convolution's weight gradient): values and all three gradients against PyTorch on
-- strides, paddings, output paddings, groups and dilations that take each of conv.c's paths (oneDNN, im2col + GEMM,
-- one window), float32 and float64, unbatched, strided and empty inputs; finite differences; the module's shapes,
-- init, output_size and repr; autocast; the errors.
local ddp = require "ddplua"
local nn = ddp.nn
local R = require "helpers.ref"
local TR = require "helpers.torch_ref"
local gc = require "helpers.gradcheck"

local function maxdiff(a, b) return (a:double() - b:double()):abs():max():item() end

local CASES = {
  { x = { 2, 4, 5, 6 }, w = { 4, 3, 3, 3 }, s = { 2, 2 }, p = { 1, 1 }, op = { 1, 1 }, g = 1, d = { 1, 1 } },
  { x = { 2, 4, 5, 6 }, w = { 4, 3, 3, 2 }, s = { 2, 1 }, p = { 0, 1 }, op = { 1, 0 }, g = 2, d = { 1, 2 } },
  { x = { 1, 3, 1, 1 }, w = { 3, 5, 4, 4 }, s = { 1, 1 }, p = { 0, 0 }, op = { 0, 0 }, g = 1, d = { 1, 1 } },
  { x = { 3, 8, 7, 7 }, w = { 8, 16, 4, 4 }, s = { 2, 2 }, p = { 1, 1 }, op = { 0, 0 }, g = 1, d = { 1, 1 } },
  { x = { 2, 6, 4, 4 }, w = { 6, 1, 3, 3 }, s = { 3, 3 }, p = { 2, 2 }, op = { 2, 1 }, g = 6, d = { 2, 2 } },
  { x = { 2, 5, 3, 3 }, w = { 5, 4, 1, 1 }, s = { 1, 1 }, p = { 0, 0 }, op = { 0, 0 }, g = 1, d = { 1, 1 } },
}

describe("conv_transpose2d", function()
  it("matches PyTorch's values and gradients on every path, float32 and float64", function()
    if not TR.available() then return pending("skipped: /usr/bin/python3 cannot import torch") end
    ddp.manual_seed(7)
    -- every case in ddplua, then all of them in one PyTorch run
    local ins, got, py = {}, {}, {}
    for ci, c in ipairs(CASES) do
      for di, dt in ipairs({ "float32", "float64" }) do
        local key = ci .. "_" .. di
        local x = ddp.randn(c.x, { dtype = dt }):requires_grad_()
        local w = ddp.randn(c.w, { dtype = dt }):requires_grad_()
        local b = ddp.randn(c.w[2] * c.g, { dtype = dt }):requires_grad_()
        local y = ddp.conv_transpose2d(x, w, b, c.s, c.p, c.op, c.g, c.d)
        local gy = ddp.randn(y:size(), { dtype = dt })
        y:backward(gy)
        ins["x" .. key], ins["w" .. key], ins["b" .. key], ins["gy" .. key] = x, w, b, gy
        got[key] = { y = y, gx = x.grad, gw = w.grad, gb = b.grad, dt = dt }
        py[#py + 1] = string.format("run('%s', (%d, %d), (%d, %d), (%d, %d), %d, (%d, %d))", key, c.s[1], c.s[2],
          c.p[1], c.p[2], c.op[1], c.op[2], c.g, c.d[1], c.d[2])
      end
    end
    local r = TR.run([[
def run(k, s, p, op, g, d):
    x, w, b = T["x" + k].requires_grad_(), T["w" + k].requires_grad_(), T["b" + k].requires_grad_()
    y = torch.nn.functional.conv_transpose2d(x, w, b, stride=s, padding=p, output_padding=op, groups=g, dilation=d)
    y.backward(T["gy" + k])
    OUT.update({"y" + k: y, "gx" + k: x.grad, "gw" + k: w.grad, "gb" + k: b.grad})
]] .. table.concat(py, "\n") .. "\n", ins)
    for key, g in pairs(got) do
      local tol = g.dt == "float32" and 2e-4 or 1e-10
      for _, k in ipairs({ "y", "gx", "gw", "gb" }) do
        local want = r[k .. key]
        assert.are.same(want:size(), g[k]:size(), string.format("case %s %s: shape", key, k))
        local d = maxdiff(g[k], want)
        assert.is_true(d <= tol * (1 + want:double():abs():max():item()),
          string.format("case %s %s %s: max difference %g", key, g.dt, k, d))
      end
    end
  end)

  it("has the gradients of finite differences", function()
    gc.assert_gradcheck(function(x, w, b) return ddp.conv_transpose2d(x, w, b, 2, 1, 1) end,
      { gc.smooth_input({ 2, 3, 3, 4 }, 1), gc.smooth_input({ 3, 2, 3, 3 }, 2), gc.smooth_input({ 2 }, 3) })
    gc.assert_gradcheck(function(x, w) return ddp.conv_transpose2d(x, w, nil, { 1, 2 }, 0, { 0, 1 }, 2, { 2, 1 }) end,
      { gc.smooth_input({ 1, 4, 3, 3 }, 4), gc.smooth_input({ 4, 1, 2, 2 }, 5) })
  end)

  it("takes unbatched, strided and empty inputs", function()
    ddp.manual_seed(8)
    local x, w, b = ddp.randn(3, 4, 5), ddp.randn(3, 2, 3, 3), ddp.randn(2)
    local batched = ddp.conv_transpose2d(x:unsqueeze(1), w, b, 2, 1)
    local un = ddp.conv_transpose2d(x, w, b, 2, 1)
    assert.are.same({ 2, 7, 9 }, un:size())
    assert.are.equal(0, maxdiff(un, batched:squeeze(1)))
    -- the unbatched gradients are the batched ones
    local xg, wg1 = x:clone():requires_grad_(), w:clone():requires_grad_()
    local xb, wg2 = x:clone():unsqueeze(1):requires_grad_(), w:clone():requires_grad_()
    ddp.conv_transpose2d(xg, wg1, b, 2, 1):mul(3):sum():backward()
    ddp.conv_transpose2d(xb, wg2, b, 2, 1):mul(3):sum():backward()
    assert.are.same({ 3, 4, 5 }, xg.grad:size())
    assert.are.equal(0, maxdiff(xg.grad, xb.grad:squeeze(1)))
    assert.are.equal(0, maxdiff(wg1.grad, wg2.grad))
    -- a transposed view: the same values as its contiguous copy
    local xt = ddp.randn(1, 3, 5, 4):transpose(3, 4)
    assert.are.equal(0, maxdiff(ddp.conv_transpose2d(xt, w, b), ddp.conv_transpose2d(xt:contiguous(), w, b)))
    -- an empty batch: an empty output, zero gradients for the weights and bias
    local e = ddp.zeros(0, 3, 4, 5):requires_grad_()
    local wg, bg = w:clone():requires_grad_(), b:clone():requires_grad_()
    local y = ddp.conv_transpose2d(e, wg, bg, 2, 1)
    assert.are.same({ 0, 2, 7, 9 }, y:size())
    y:sum():backward()
    assert.are.same({ 0, 3, 4, 5 }, e.grad:size())
    assert.are.equal(0, wg.grad:abs():max():item())
    assert.are.equal(0, bg.grad:abs():max():item())
  end)

  it("runs in bfloat16 under autocast, close to float32, gradients too", function()
    ddp.manual_seed(9)
    local x, w = ddp.randn(2, 8, 6, 6), ddp.randn(8, 4, 4, 4) * 0.1
    local xr, wr = x:clone():requires_grad_(), w:clone():requires_grad_()
    local ref = ddp.conv_transpose2d(xr, wr, nil, 2, 1)
    ref:sum():backward()
    local xg, wg = x:clone():requires_grad_(), w:clone():requires_grad_()
    local y = ddp.autocast("bfloat16", function() return ddp.conv_transpose2d(xg, wg, nil, 2, 1) end)
    assert.are.equal("bfloat16", y:dtype())
    assert.is_true(maxdiff(y, ref) <= 0.03 * ref:abs():max():item())
    y:float():sum():backward()
    assert.is_true(maxdiff(xg.grad, xr.grad) <= 0.03 * xr.grad:abs():max():item(), "input gradient")
    assert.is_true(maxdiff(wg.grad, wr.grad) <= 0.03 * wr.grad:abs():max():item(), "weight gradient")
  end)

  it("names the argument that is wrong", function()
    local x, w = ddp.randn(1, 3, 4, 4), ddp.randn(3, 2, 3, 3)
    R.assert_error(function() ddp.conv_transpose2d(ddp.randn(1, 4, 4, 4), w) end,
      "conv_transpose2d: input has 4 channels")
    R.assert_error(function() ddp.conv_transpose2d(x, w, nil, 2, 0, 2) end,
      "conv_transpose2d: output_padding 2 must be >= 0 and smaller than the stride 2")
    R.assert_error(function() ddp.conv_transpose2d(x, w, ddp.randn(3)) end, "conv_transpose2d: bias of shape [3]")
    R.assert_error(function() ddp.conv_transpose2d(x:double(), w) end, "conv_transpose2d: input, weight and bias")
    R.assert_error(function() ddp.conv_transpose2d(x, w, nil, 1, 0, 0, 2) end, "divisible by groups 2")
    R.assert_error(function() ddp.conv_transpose2d(x, ddp.randn(3, 2, 3)) end, "weight must be 4-dimensional")
    R.assert_error(function() ddp.conv_transpose2d(ddp.randn(1, 3, 1, 1), w, nil, 1, 3) end,
      "conv_transpose2d: the output height would be -3")
    R.assert_error(function() ddp.conv_transpose2d(x, w, nil, 0) end, "conv_transpose2d: stride must be >= 1")
    R.assert_error(function() ddp.conv_transpose2d(x, w, nil, { 1, 2, 3 }) end, "conv_transpose2d: stride table")
  end)
end)

describe("nn.ConvTranspose2d", function()
  it("has PyTorch's shapes, init bounds, repr and output_size", function()
    ddp.manual_seed(10)
    local m = nn.ConvTranspose2d(4, 6, 3, { stride = 2, padding = 1, output_padding = 1, groups = 2 })
    assert.are.same({ 4, 3, 3, 3 }, m.weight:size())
    assert.are.same({ 6 }, m.bias:size())
    local bound = 1 / math.sqrt(3 * 3 * 3) -- fan_in = out/groups * kh * kw, PyTorch's reading of the weight
    assert.is_true(m.weight:abs():max():item() <= bound and m.bias:abs():max():item() <= bound)
    assert.is_true(m.weight:abs():max():item() > 0.8 * bound)
    assert.are.equal("ConvTranspose2d(4, 6, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), " ..
      "output_padding=(1, 1), groups=2)", tostring(m))
    local x = ddp.randn(2, 4, 5, 5)
    assert.are.same({ 2, 6, 10, 10 }, m(x):size())
    local plain = nn.ConvTranspose2d(4, 6, 3, 2, 1, 0, 1, false)
    assert.is_nil(plain.bias)
    assert.are.same({ 2, 6, 9, 9 }, plain(x):size())
    assert.are.same({ 2, 6, 10, 9 }, plain(x, { 10, 9 }):size())
    assert.are.same({ 2, 6, 9, 10 }, plain:forward(x, { 2, 6, 9, 10 }):size())
    R.assert_error(function() plain(x, { 11, 9 }) end, "valid sizes range from 9 to 10")
    assert.are.equal("ConvTranspose2d(2, 2, kernel_size=(3, 3), stride=(2, 2), dilation=(2, 2), output_padding=(1, 1))",
      tostring(nn.ConvTranspose2d(2, 2, 3, { stride = 2, dilation = 2, output_padding = 1 })))
    R.assert_error(function() plain(ddp.randn(2, 3, 5, 5)) end, "expected input of shape [N, 4, H, W]")
    R.assert_error(function() nn.ConvTranspose2d(4, 6, 3, { stride = 2, output_padding = 2 }) end,
      "ConvTranspose2d: output_padding (2, 2) must be smaller than the stride (2, 2)")
    R.assert_error(function() nn.ConvTranspose2d(4, 6, 3, { groups = 4 }) end, "must both be divisible by groups 4")
    R.assert_error(function() nn.ConvTranspose2d(4, 6, 3, { padding_mode = "reflect" }) end, "padding_mode")
  end)

  it("trains as PyTorch's with the same weights", function()
    if not TR.available() then return pending("skipped: /usr/bin/python3 cannot import torch") end
    ddp.manual_seed(11)
    local m = nn.ConvTranspose2d(3, 5, { 4, 3 }, { stride = { 2, 1 }, padding = { 1, 0 }, dilation = { 1, 2 } })
    local x = ddp.randn(2, 3, 4, 6)
    local y = m(x)
    y:pow(2):sum():backward()
    local r = TR.run([[
m = torch.nn.ConvTranspose2d(3, 5, (4, 3), stride=(2, 1), padding=(1, 0), dilation=(1, 2))
with torch.no_grad():
    m.weight.copy_(T["w"]); m.bias.copy_(T["b"])
y = m(T["x"])
y.pow(2).sum().backward()
OUT.update(y=y, gw=m.weight.grad, gb=m.bias.grad)
]], { w = m.weight:detach(), b = m.bias:detach(), x = x })
    R.assert_close(y, R.from(r.y), 1e-5, 1e-5, "output")
    R.assert_close(m.weight.grad, R.from(r.gw), 1e-4, 1e-5, "weight gradient")
    R.assert_close(m.bias.grad, R.from(r.gb), 1e-4, 1e-5, "bias gradient")
  end)
end)
