-- optim.RMSprop, optim.Adagrad and optim.Adadelta against PyTorch's optimizers on the same
-- parameters and gradient sequences (float64 and float32, every option),
-- their state in checkpoints (a resumed run continues bitwise);
-- nn.utils.clip_grad_norm_ / clip_grad_value_ against PyTorch; and
-- nn.AdaptiveAvgPool2d against PyTorch, finite differences and avg_pool2d.
local ddp = require "ddplua"
local gc = require "helpers.gradcheck"
local R = require "helpers.ref"
local TR = require "helpers.torch_ref"
local nn, optim = ddp.nn, ddp.optim

local STEPS = 6

local OC = require "helpers.optim_cases"

describe("optim.RMSprop, optim.Adagrad and optim.Adadelta", function()
  local p0 = R.randn({ 3, 4 }, 1)
  local gs = {}
  for s = 1, STEPS do gs[s] = R.randn({ 3, 4 }, 10 + s) end
  local cases = {
    { "RMSprop", {} },
    { "RMSprop", { lr = 0.05, alpha = 0.9, momentum = 0.8, weight_decay = 0.1 } },
    { "RMSprop", { centered = true, eps = 1e-4 } },
    { "RMSprop", { centered = true, momentum = 0.5, lr = 0.02 } },
    { "Adagrad", {} },
    { "Adagrad", { lr = 0.1, lr_decay = 0.05, weight_decay = 0.2, initial_accumulator_value = 0.3, eps = 1e-6 } },
    { "Adadelta", {} },
    { "Adadelta", { lr = 0.5, rho = 0.7, eps = 1e-3, weight_decay = 0.1 } },
    { "Adadelta", { rho = 0, eps = 1e-8 } },
  }

  it("follow PyTorch's updates in float64 and float32", function()
    if not TR.available() then return pending("skipped: /usr/bin/python3 cannot import torch") end
    OC.check_against_torch(cases, p0, gs, STEPS, 1e-14)
  end)

  it("keep PyTorch's state names, skip parameters without a gradient, and resume bitwise from a state dict", function()
    for _, case in ipairs(cases) do
      local want = case[1] == "Adagrad" and { "step", "sum" } or case[1] == "Adadelta" and
        { "acc_delta", "square_avg", "step" } or { "square_avg", "step" }
      if case[2].momentum then want[#want + 1] = "momentum_buffer" end
      if case[2].centered then want[#want + 1] = "grad_avg" end
      OC.check_state_resume(case, p0, gs, STEPS, want)
    end
  end)

  it("reject bad hyperparameters", function()
    local p = ddp.zeros(2):requires_grad_()
    R.assert_error(function() optim.RMSprop({ p }, { lr = -1 }) end, "RMSprop: invalid lr -1")
    R.assert_error(function() optim.RMSprop({ p }, { centered = 1 }) end, "RMSprop: centered must be a boolean")
    R.assert_error(function() optim.Adagrad({ p }, { lr_decay = -0.1 }) end, "Adagrad: invalid lr_decay")
    R.assert_error(function() optim.Adagrad({ p }, { betas = 1 }) end, "Adagrad: unknown option 'betas'")
    R.assert_error(function() optim.Adadelta({ p }, { rho = 1.5 }) end, "Adadelta: invalid rho 1.5 (expected a number in [0, 1])")
    R.assert_error(function() optim.Adadelta({ p }, { eps = -1 }) end, "Adadelta: invalid eps -1")
    R.assert_error(function() optim.Adadelta({ p }, { lr = 0 / 0 }) end, "Adadelta: invalid lr")
    R.assert_error(function() optim.Adadelta({ p }, { momentum = 0.9 }) end, "Adadelta: unknown option 'momentum'")
  end)
end)

describe("nn.utils.clip_grad_norm_ and clip_grad_value_", function()
  local function params()
    local ps = {}
    for i, shape in ipairs({ { 3, 4 }, { 5 }, { 2, 2, 2 } }) do
      ps[i] = ddp.zeros(shape, { dtype = "float64" }):requires_grad_()
      ps[i].grad = R.randn(shape, 20 + i)
    end
    return ps
  end

  it("return the total norm and scale every gradient as PyTorch does, for p = 2, 1, 3, inf", function()
    if not TR.available() then return pending("skipped: /usr/bin/python3 cannot import torch") end
    local ps = params()
    local inputs = {}
    for i, p in ipairs(ps) do inputs["g" .. i] = p.grad end
    local ref = TR.run([[
for n, (mx, nt) in enumerate([(1.0, 2.0), (0.5, 1.0), (100.0, 3.0), (0.2, float("inf"))]):
    ps = [torch.zeros_like(T["g%d" % i]).requires_grad_() for i in (1, 2, 3)]
    for i, p in enumerate(ps): p.grad = T["g%d" % (i + 1)].clone()
    OUT["n%d" % n] = torch.nn.utils.clip_grad_norm_(ps, mx, nt)
    for i, p in enumerate(ps): OUT["g%d_%d" % (n, i + 1)] = p.grad
]], inputs)
    for n, c in ipairs({ { 1.0, 2 }, { 0.5, 1 }, { 100.0, 3 }, { 0.2, math.huge } }) do
      local qs = params()
      local total = nn.utils.clip_grad_norm_(qs, c[1], c[2])
      assert.is_true(ddp.is_tensor(total) and total:dim() == 0)
      R.assert_close(total, R.from(ref["n" .. (n - 1)]), 1e-14, 1e-13, "total norm " .. n)
      for i, q in ipairs(qs) do
        R.assert_close(q.grad, R.from(ref[string.format("g%d_%d", n - 1, i)]), 1e-15, 1e-13, "gradient " .. i)
      end
    end
  end)

  it("leave small gradients alone, take a module or one tensor, skip missing gradients, and check options", function()
    local ps = params()
    local before = gc.flat_values(ps[1].grad)
    local total = nn.utils.clip_grad_norm_(ps, 1e6)
    assert.are.same(before, gc.flat_values(ps[1].grad))
    local s = 0
    for _, p in ipairs(ps) do for _, v in ipairs(gc.flat_values(p.grad)) do s = s + v * v end end
    assert.is_true(math.abs(total:item() - math.sqrt(s)) < 1e-12)
    local m = nn.Linear(3, 2):double()
    m(R.randn({ 4, 3 }, 30)):sum():backward()
    m.bias.grad = nil
    local t = nn.utils.clip_grad_norm_(m, 0.1, { norm_type = 2 })
    assert.is_true(math.abs(m.weight.grad:norm():item() - 0.1) < 1e-6 and t:item() > 0.1)
    nn.utils.clip_grad_norm_(ps[2], 0.01)
    assert.is_true(math.abs(ps[2].grad:norm():item() - 0.01) < 1e-8)
    assert.are.equal(0, nn.utils.clip_grad_norm_({ ddp.zeros(2):requires_grad_() }, 1):item())
    ps[3].grad[1][1][1] = 0 / 0
    R.assert_error(function() nn.utils.clip_grad_norm_(ps, 1, { error_if_nonfinite = true }) end,
      "clip_grad_norm_: the total norm of order 2 of the gradients is non-finite")
    R.assert_error(function() nn.utils.clip_grad_norm_(ps, 1, 0) end, "norm_type must be > 0 or inf")
    R.assert_error(function() nn.utils.clip_grad_norm_(ps, "1") end, "max_norm must be a number")
    R.assert_error(function() nn.utils.clip_grad_norm_(ps, 1, { type = 2 }) end, "unknown option 'type'")
  end)

  it("sum float32 gradients' squares in double (the vector kernels' path), odd sizes, inf and NaN", function()
    -- sizes around the vector widths and the tails, and one large enough for every lane
    local sizes, ps = { 1, 7, 16, 17, 33, 1000, 100003 }, {}
    local want = 0
    for i, n in ipairs(sizes) do
      ps[i] = ddp.zeros(n):requires_grad_()
      ps[i].grad = ddp.randn(n) * (10 ^ (i - 4)) -- magnitudes from 1e-3 to 1e3
      for _, v in ipairs(gc.flat_values(ps[i].grad:double())) do want = want + v * v end
    end
    local total = nn.utils.clip_grad_norm_(ps, 1e30)
    assert.are.equal("float32", total:dtype())
    local rel = math.abs(total:double():item() - math.sqrt(want)) / math.sqrt(want)
    assert.is_true(rel < 1e-7, string.format("float32 norm off by %.3g relative", rel)) -- the result's own rounding
    ps[3].grad[5] = math.huge
    assert.are.equal(math.huge, nn.utils.clip_grad_norm_(ps, 1e30):item())
    ps[3].grad[5] = 0 / 0
    local n = nn.utils.clip_grad_norm_(ps, 1e30):item()
    assert.is_true(n ~= n, "a NaN gradient gives a NaN norm")
  end)

  it("clip_grad_value_ clamps in place", function()
    local ps = params()
    local g = ps[1].grad:data_ptr()
    nn.utils.clip_grad_value_(ps, 0.5)
    assert.are.equal(g, ps[1].grad:data_ptr()) -- the same memory, clamped in place
    for _, p in ipairs(ps) do
      for _, v in ipairs(gc.flat_values(p.grad)) do assert.is_true(v >= -0.5 and v <= 0.5) end
    end
    R.assert_error(function() nn.utils.clip_grad_value_(ps, -1) end, "clip_value must be a number >= 0")
  end)
end)

describe("nn.AdaptiveAvgPool2d", function()
  it("averages PyTorch's windows: PyTorch's values and gradients, avg_pool2d where sizes divide", function()
    local x = R.randn({ 2, 3, 7, 10 }, 40)
    R.assert_close(nn.AdaptiveAvgPool2d({ 7, 5 })(x), R.from(ddp.avg_pool2d(x, { 1, 2 })), 1e-15, 0, "divisible")
    R.assert_close(nn.AdaptiveAvgPool2d(1)(x), R.from(x:mean({ 3, 4 }, true)), 1e-15, 1e-15, "global")
    assert.are.same({ 2, 3, 7, 4 }, nn.AdaptiveAvgPool2d({ nil, 4 })(x):size())
    gc.assert_gradcheck(function(t) return nn.F.adaptive_avg_pool2d(t, { 3, 4 }) end, { gc.smooth_input({ 1, 2, 5, 7 }, 41) })
    gc.assert_gradcheck(function(t) return nn.F.adaptive_avg_pool2d(t:transpose(2, 3), 3) end,
      { gc.smooth_input({ 2, 4, 5 }, 42) })
    if not TR.available() then return pending("skipped: /usr/bin/python3 cannot import torch") end
    local xr = x:clone():requires_grad_()
    local y = nn.AdaptiveAvgPool2d({ 3, 4 })(xr)
    y:backward(R.randn({ 2, 3, 3, 4 }, 43))
    -- windows that tile the plane exactly (8 x 10 -> 4 x 5: the backward's spread), in float32
    local x2 = R.randn({ 2, 3, 8, 10 }, 44):float():requires_grad_()
    local y2 = nn.AdaptiveAvgPool2d({ 4, 5 })(x2)
    y2:backward(R.randn({ 2, 3, 4, 5 }, 45):float())
    local ref = TR.run([[
x = T["x"].requires_grad_()
y = torch.nn.AdaptiveAvgPool2d((3, 4))(x)
y.backward(T["g"])
OUT["y"], OUT["gx"] = y, x.grad
x2 = T["x2"].requires_grad_()
y2 = torch.nn.AdaptiveAvgPool2d((4, 5))(x2)
y2.backward(T["g2"])
OUT["y2"], OUT["gx2"] = y2, x2.grad
]], { x = x, g = R.randn({ 2, 3, 3, 4 }, 43), x2 = x2:detach(), g2 = R.randn({ 2, 3, 4, 5 }, 45):float() })
    R.assert_close(y, R.from(ref.y), 1e-15, 1e-14, "forward")
    R.assert_close(xr.grad, R.from(ref.gx), 1e-15, 1e-14, "gradient")
    R.assert_close(y2, R.from(ref.y2), 1e-6, 1e-6, "exact tiles: forward")
    R.assert_close(x2.grad, R.from(ref.gx2), 0, 0, "exact tiles: gradient")
    assert.are.equal("AdaptiveAvgPool2d(output_size=(3, 4))", tostring(nn.AdaptiveAvgPool2d({ 3, 4 })))
    R.assert_error(function() nn.AdaptiveAvgPool2d(0) end, "AdaptiveAvgPool2d: output_size must be a positive integer")
    R.assert_error(function() nn.F.adaptive_avg_pool2d(ddp.randn(3, 4), 2) end, "expected a 3- or 4-dimensional input")
  end)

  -- the CPU kernels: float32 and bfloat16 planes against float64 from the same values (overlapping windows 5x7 ->
  -- 3x4, windows that divide, global pooling, a larger output than input, wide windows), forward and backward
  it("pools float32 and bfloat16 planes within a rounding of float64, gradients too", function()
    -- (windows of 16 or more columns sum rows in the vector unit: 40x37 -> 2x2, and the global 28x28 -> 1x1)
    for _, c in ipairs({ { 5, 7, 3, 4 }, { 8, 6, 4, 3 }, { 9, 5, 1, 1 }, { 3, 2, 5, 4 }, { 40, 37, 2, 2 },
      { 28, 28, 1, 1 } }) do
      local x64, g64 = R.randn({ 2, 3, c[1], c[2] }, 50), R.randn({ 2, 3, c[3], c[4] }, 51)
      for _, dt in ipairs({ "float32", "bfloat16" }) do
        local what = string.format("%s %dx%d -> %dx%d", dt, c[1], c[2], c[3], c[4])
        local xd, gd = x64:to(dt):double():requires_grad_(), g64:to(dt):double() -- the values dt holds
        local yd = nn.F.adaptive_avg_pool2d(xd, { c[3], c[4] })
        yd:backward(gd)
        local x = xd:detach():to(dt):requires_grad_()
        local y = nn.F.adaptive_avg_pool2d(x, { c[3], c[4] })
        y:backward(gd:to(dt))
        assert.equal(dt, y:dtype())
        local tol = dt == "float32" and 2 ^ -23 or 2 ^ -8
        R.assert_close(y, R.from(yd), 1e-30, tol, what .. " forward")
        R.assert_close(x.grad, R.from(xd.grad), 1e-30, tol, what .. " gradient")
      end
    end
  end)
end)
