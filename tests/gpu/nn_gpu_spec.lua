-- The nn layers on CUDA against the CPU: convolution and transposed convolution (im2col/col2im + GEMM),
-- pooling, batch norm (train and eval, running statistics), layer norm,
-- dropout (the same Philox mask on both devices), embedding (with repeated
-- indices and an index out of range). Outputs, input gradients and
-- parameter gradients must agree. Run with: busted --tags=gpu tests/gpu
local ddp = require "ddplua"
local H = require("gpu.gpu_helper").setup(describe, it, pending)
local nn -- ddp.nn, loaded once a GPU is there

local function params_of(m)
  local ps = m:parameters()
  local out = {}
  for i, p in ipairs(ps) do out[i] = p end
  return out
end

-- make() is called twice under one seed, so both modules start equal; one
-- runs on the CPU, the other on the GPU.
local function run(make, x, device, train)
  ddp.manual_seed(1)
  local m = make()
  m = m:to(device) or m
  if train == false then m:eval() else m:train() end
  local xi = x:to(device):detach()
  if xi:is_floating_point() then xi:requires_grad_() end
  ddp.manual_seed(5) -- dropout masks
  local y = m(xi)
  ddp.manual_seed(6)
  local w = ddp.randn(y:size(), { dtype = y:dtype() }):to(device)
  local objective = (y * w):sum()
  objective:backward()
  local grads = {}
  for i, p in ipairs(params_of(m)) do grads[i] = p.grad end
  return m, y, xi.grad, grads
end

local function check_module(what, make, x, tol, train)
  local mc, yc, gxc, gpc = run(make, x, "cpu", train)
  local mg, yg, gxg, gpg = run(make, x, H.device, train)
  assert.are.equal(H.device, yg:device(), what)
  H.assert_close(yg, yc, tol, what .. " (forward)")
  if gxc then H.assert_close(gxg, gxc, tol, what .. " (input gradient)") end
  assert.are.equal(#gpc, #gpg, what .. ": parameter count")
  for i = 1, #gpc do H.assert_close(gpg[i], gpc[i], tol, what .. " (gradient of parameter " .. i .. ")") end
  return mc, mg
end

H.describe("cuda nn layers", function()
  nn = ddp.nn
  it("Conv2d with stride and padding", function()
    ddp.manual_seed(30)
    local x = ddp.randn(3, 4, 11, 9)
    check_module("Conv2d 3x3", function() return nn.Conv2d(4, 6, 3) end, x, 1e-4)
    check_module("Conv2d 5x5 stride 2 padding 2", function() return nn.Conv2d(4, 5, 5, { stride = 2, padding = 2 }) end,
                 x, 1e-4)
    check_module("Conv2d 1x1", function() return nn.Conv2d(4, 8, 1) end, x, 1e-4)
  end)

  it("ConvTranspose2d with stride, padding, output padding and groups", function()
    ddp.manual_seed(36)
    local x = ddp.randn(3, 4, 7, 5)
    check_module("ConvTranspose2d 4x4 stride 2", function()
      return nn.ConvTranspose2d(4, 6, 4, { stride = 2, padding = 1 })
    end, x, 1e-4)
    check_module("ConvTranspose2d 3x3 stride 2 output_padding 1 groups 2", function()
      return nn.ConvTranspose2d(4, 6, 3, { stride = 2, padding = 1, output_padding = 1, groups = 2 })
    end, x, 1e-4)
  end)

  it("Unfold and Fold (the convolutions' im2col and col2im), and grouped, dilated and depthwise Conv2d", function()
    ddp.manual_seed(37)
    local x = ddp.randn(2, 4, 9, 8)
    check_module("Unfold 3x2 dilation 2 padding 1 stride 2", function() return nn.Unfold({ 3, 2 }, 2, 1, 2) end, x, 1e-6)
    check_module("Fold 2x2 stride 1", function() return nn.Fold({ 5, 6 }, 2) end, ddp.randn(2, 12, 20), 1e-6)
    check_module("Conv2d groups 2 dilation 2", function() return nn.Conv2d(4, 6, 3, { padding = 2, dilation = 2,
      groups = 2 }) end, x, 1e-4)
    check_module("Conv2d depthwise 5x5", function() return nn.Conv2d(4, 4, 5, { padding = 2, groups = 4 }) end, x, 1e-4)
  end)

  it("the 3-d layers (composed of 2-d ops on the GPU) against the CPU's direct convolution", function()
    ddp.manual_seed(38)
    local x = ddp.randn(2, 4, 5, 9, 8)
    check_module("Conv3d 3x3x3 padding 1", function() return nn.Conv3d(4, 6, 3, { padding = 1 }) end, x, 1e-4)
    check_module("Conv3d (1,3,3) stride (1,2,2) groups 2", function()
      return nn.Conv3d(4, 6, { 1, 3, 3 }, { stride = { 1, 2, 2 }, padding = { 0, 1, 1 }, groups = 2 }) end, x, 1e-4)
    check_module("ConvTranspose3d 2x2x2 stride 2", function() return nn.ConvTranspose3d(4, 3, 2, 2) end, x, 1e-4)
    check_module("MaxPool3d((1, 2, 2))", function() return nn.MaxPool3d({ 1, 2, 2 }) end, x, 1e-6)
    check_module("AvgPool3d(2, ceil)", function() return nn.AvgPool3d(2, { ceil_mode = true }) end, x, 1e-6)
    check_module("AdaptiveAvgPool3d((2, 3, 3))", function() return nn.AdaptiveAvgPool3d({ 2, 3, 3 }) end, x, 1e-6)
    check_module("BatchNorm3d", function() return nn.BatchNorm3d(4) end, x, 1e-4)
  end)

  it("MaxPool2d and AvgPool2d", function()
    ddp.manual_seed(31)
    local x = ddp.randn(2, 3, 12, 10)
    check_module("MaxPool2d(2)", function() return nn.MaxPool2d(2) end, x, 1e-6)
    check_module("MaxPool2d(3)", function() return nn.MaxPool2d(3) end, x, 1e-6)
    check_module("AvgPool2d(2)", function() return nn.AvgPool2d(2) end, x, 1e-6)
    check_module("AvgPool2d(3)", function() return nn.AvgPool2d(3) end, x, 1e-6)
    check_module("AvgPool2d(3, 2, 1, ceil, count_include_pad=false)", function()
      return nn.AvgPool2d(3, 2, 1, true, false) end, x, 1e-6)
    check_module("AvgPool2d(3, 2, 1, divisor_override=4)", function()
      return nn.AvgPool2d(3, { stride = 2, padding = 1, divisor_override = 4 }) end, x, 1e-6)
  end)

  it("BatchNorm1d/2d in training (running statistics too) and evaluation", function()
    ddp.manual_seed(32)
    local x2 = ddp.randn(8, 5, 6, 7) * 3 + 1
    local mc, mg = check_module("BatchNorm2d train", function() return nn.BatchNorm2d(5) end, x2, 1e-4, true)
    local bc, bg = mc:buffers(), mg:buffers()
    assert.are.equal(#bc, #bg)
    for i = 1, #bc do H.assert_close(bg[i], bc[i], 1e-5, "BatchNorm2d buffer " .. i) end
    check_module("BatchNorm2d eval", function() return nn.BatchNorm2d(5) end, x2, 1e-5, false)
    check_module("BatchNorm1d train", function() return nn.BatchNorm1d(12) end, ddp.randn(64, 12), 1e-4, true)
    -- many rows per channel: the split statistics path
    check_module("BatchNorm2d large", function() return nn.BatchNorm2d(2) end, ddp.randn(64, 2, 32, 32), 1e-4, true)
  end)

  it("LayerNorm over narrow and wide rows", function()
    ddp.manual_seed(33)
    check_module("LayerNorm(16)", function() return nn.LayerNorm(16) end, ddp.randn(10, 16), 1e-4)
    check_module("LayerNorm(3000)", function() return nn.LayerNorm(3000) end, ddp.randn(4, 3000), 1e-4)
  end)

  it("Dropout draws the same mask on both devices", function()
    ddp.manual_seed(34)
    local x = ddp.randn(64, 33)
    check_module("Dropout(0.3)", function() return nn.Dropout(0.3) end, x, 0)
    check_module("Dropout eval", function() return nn.Dropout(0.3) end, x, 0, false)
  end)

  it("Embedding with repeated indices, and an index out of range", function()
    local idx = ddp.tensor({ { 1, 5, 5, 2 }, { 9, 1, 5, 10 } })
    check_module("Embedding", function() return nn.Embedding(10, 7) end, idx, 1e-6)
    ddp.manual_seed(1)
    local emb = nn.Embedding(10, 7)
    emb = emb:to(H.device) or emb
    local ok, err = pcall(function() return emb(ddp.tensor({ 3, 11 }, { device = H.device })):sum():item() end)
    assert.is_false(ok)
    assert.matches("index 11 at position 2 is out of range 1..10", err)
  end)

  it("an MLP and a small CNN give the same loss and gradients on both devices", function()
    ddp.manual_seed(35)
    local x = ddp.randn(16, 1, 28, 28)
    check_module("CNN", function()
      return nn.Sequential {
        nn.Conv2d(1, 8, 3, { padding = 1 }), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, { padding = 1 }), nn.BatchNorm2d(16), nn.GELU(), nn.AvgPool2d(2),
        nn.Flatten(), nn.Linear(16 * 7 * 7, 10),
      }
    end, x, 2e-4)
    check_module("MLP", function()
      return nn.Sequential { nn.Flatten(), nn.Linear(784, 64), nn.Tanh(), nn.Linear(64, 32), nn.Sigmoid(),
                             nn.Linear(32, 10) }
    end, x, 2e-4)
  end)
end)
