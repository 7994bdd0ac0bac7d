-- The 3-d layers (nn/conv3d.lua, nn/volumetric.lua, and the 3d forms of BatchNorm, InstanceNorm, Dropout and the
-- paddings) against PyTorch 1.13's: values and the gradients to the input, the weight and the bias in float64 over
-- strides, paddings, dilations, groups, "same" with odd totals, unbatched inputs, ceil_mode, count_include_pad,
-- divisor_override, adaptive sizes with nil and uneven windows, ties in max windows; float32 beside float64; the
-- modules' shapes, init and printed forms; bad arguments named.
local ddp = require "ddplua"
local R = require "helpers.ref"
local TR = require "helpers.torch_ref"
local nn, F = ddp.nn, ddp.nn.F

local function f64(...) return ddp.randn({ ... }, { dtype = "float64" }) end

-- a Python tuple or int of a Lua size
local function py(v)
  if type(v) == "table" then return "(" .. table.concat(v, ", ") .. ")" end
  if type(v) == "string" then return "'" .. v .. "'" end
  if type(v) == "boolean" then return v and "True" or "False" end
  if v == nil then return "None" end
  return tostring(v)
end

-- runs each case's op in PyTorch and here on the same inputs (x, w, b and the upstream gradient gy), comparing the
-- output and every gradient; with f32, the inputs rounded to float32 here (PyTorch's result in float64 from the
-- same rounded values), compared relative to each result's largest magnitude
local function check_against_torch(cases, torch_call, ours, tol, f32)
  local inputs, script = {}, { "import torch, torch.nn.functional as F" }
  local function prep(t) return f32 and t:float():double() or t end
  for k, c in ipairs(cases) do
    inputs["x" .. k], inputs["w" .. k] = prep(c.x), prep(c.w)
    if c.b then inputs["b" .. k] = prep(c.b) end
    script[#script + 1] = string.format([[
x = T['x%d'].clone().requires_grad_(); w = T['w%d'].clone().requires_grad_()
b = T['b%d'].clone().requires_grad_() if 'b%d' in T else None
y = %s
g = torch.randn(y.shape, dtype=y.dtype, generator=torch.Generator().manual_seed(%d))
y.backward(g)
OUT['y%d'], OUT['g%d'], OUT['gx%d'], OUT['gw%d'] = y, g, x.grad, w.grad
if b is not None: OUT['gb%d'] = b.grad]], k, k, k, k, torch_call(c), k, k, k, k, k, k)
  end
  local ref = TR.run(table.concat(script, "\n"), inputs)
  for k, c in ipairs(cases) do
    local what = "case " .. k .. " (" .. c.what .. ")"
    local function mine(t) return (f32 and t:float() or t:clone()):requires_grad_() end
    local x, w = mine(c.x), mine(c.w)
    local b = c.b and mine(c.b) or nil
    local y = ours(c, x, w, b)
    local g = R.tensor(R.from(ref["g" .. k]))
    y:backward(f32 and g:float() or g)
    local function close(got, name, what2)
      local want = R.from(ref[name .. k])
      local wt = R.tensor(want)
      local scale = (f32 and wt:numel() > 0) and math.max(1, wt:abs():max():item()) or 1
      R.assert_close(f32 and got:double() or got, want, tol * scale, f32 and 0 or tol, what2)
    end
    if f32 then assert.equal("float32", y:dtype(), what) end
    close(y, "y", what)
    close(x.grad, "gx", what .. ": input gradient")
    close(w.grad, "gw", what .. ": weight gradient")
    if b then close(b.grad, "gb", what .. ": bias gradient") end
  end
end

local conv3d_module = require "ddplua.nn.conv3d"

-- conv3d's cases: float64 runs the composition of 2-d convolutions, float32 oneDNN's direct 3-d convolution on the
-- CPU (and the composition too, with the direct path off)
local function conv3d_cases()
  ddp.manual_seed(301)
  return {
      { what = "3x3x3 padding 1", x = f64(2, 3, 5, 6, 7), w = f64(4, 3, 3, 3, 3), b = f64(4), padding = 1 },
      { what = "strided, dilated", x = f64(2, 3, 7, 6, 8), w = f64(2, 3, 3, 2, 3), b = f64(2), stride = { 2, 1, 2 },
        padding = { 1, 0, 1 }, dilation = { 2, 1, 1 } },
      { what = "groups 2", x = f64(1, 4, 4, 5, 5), w = f64(6, 2, 2, 3, 1), stride = { 1, 2, 1 }, padding = { 0, 1, 0 },
        groups = 2 },
      { what = "same, odd totals", x = f64(2, 3, 4, 5, 6), w = f64(2, 3, 2, 2, 4), b = f64(2), padding = "same",
        dilation = { 1, 2, 1 } },
      { what = "unbatched", x = f64(3, 4, 5, 6), w = f64(5, 3, 2, 3, 3), b = f64(5), stride = 2, padding = { 1, 1, 0 } },
      { what = "depthwise", x = f64(2, 4, 3, 4, 4), w = f64(4, 1, 3, 3, 3), padding = 1, groups = 4 },
      { what = "1x1x1 strided", x = f64(2, 3, 5, 5, 5), w = f64(4, 3, 1, 1, 1), b = f64(4), stride = 2 },
      { what = "kernel the input's size", x = f64(1, 2, 3, 4, 2), w = f64(3, 2, 3, 4, 2), b = f64(3) },
      { what = "empty batch", x = f64(0, 3, 4, 4, 4), w = f64(2, 3, 3, 3, 3), b = f64(2), padding = 1 },
      { what = "video stem", x = f64(2, 3, 4, 12, 12), w = f64(16, 3, 3, 7, 7), stride = { 1, 2, 2 },
        padding = { 1, 3, 3 } },
    }
end

local function conv3d_torch(c)
  return string.format("F.conv3d(x, w, b, stride=%s, padding=%s, dilation=%s, groups=%d)", py(c.stride or 1),
    py(c.padding or 0), py(c.dilation or 1), c.groups or 1)
end
local function conv3d_ours(c, x, w, b) return F.conv3d(x, w, b, c.stride, c.padding, c.dilation, c.groups) end

describe("conv3d", function()
  it("gives PyTorch's values and gradients in float64 (the composition)", function()
    check_against_torch(conv3d_cases(), conv3d_torch, conv3d_ours, 1e-11)
  end)

  it("gives PyTorch's values and gradients in float32, direct and composed", function()
    local before = ddp.core._onednn_calls()
    check_against_torch(conv3d_cases(), conv3d_torch, conv3d_ours, 2e-5, true)
    if ddp.core.onednn_info():find("^oneDNN") then -- the direct path ran (this build has oneDNN)
      assert.is_true(ddp.core._onednn_calls() - before >= 3 * 9, "oneDNN's 3-d convolutions ran")
    end
    conv3d_module.direct = false
    local ok, err = pcall(check_against_torch, conv3d_cases(), conv3d_torch, conv3d_ours, 2e-5, true)
    conv3d_module.direct = true
    assert(ok, err)
  end)

  it("runs in float32 to float32's rounding of the float64 result", function()
    ddp.manual_seed(302)
    local x, w, b = f64(2, 8, 6, 9, 9), f64(16, 8, 3, 3, 3) * 0.1, f64(16)
    local ref = F.conv3d(x, w, b, { 1, 2, 2 }, 1)
    local y = F.conv3d(x:float(), w:float(), b:float(), { 1, 2, 2 }, 1)
    assert.equal("float32", y:dtype())
    R.assert_close(y, R.from(ref), 1e-4, 1e-4, "float32 conv3d")
  end)
end)

local function conv_transpose3d_cases()
  ddp.manual_seed(303)
  return {
    { what = "stride 2, output_padding 1", x = f64(2, 3, 3, 4, 5), w = f64(3, 2, 3, 3, 3), b = f64(2), stride = 2,
      padding = 1, output_padding = 1 },
    { what = "mixed sizes, dilated (output_padding past the padding: composed)", x = f64(1, 2, 3, 3, 2),
      w = f64(2, 3, 2, 3, 2), b = f64(3), stride = { 1, 2, 3 }, padding = { 0, 1, 2 }, output_padding = { 1, 1, 2 },
      dilation = { 2, 1, 1 } },
    { what = "dilated, padded", x = f64(2, 4, 3, 4, 3), w = f64(4, 2, 3, 2, 3), b = f64(2), stride = { 2, 1, 2 },
      padding = { 2, 1, 1 }, output_padding = { 1, 0, 1 }, dilation = { 2, 2, 1 } },
    { what = "groups 2", x = f64(1, 4, 2, 3, 3), w = f64(4, 3, 2, 2, 2), stride = { 2, 1, 1 }, groups = 2 },
    { what = "unbatched", x = f64(3, 2, 3, 4), w = f64(3, 4, 3, 3, 3), b = f64(4), stride = { 2, 1, 2 } },
    { what = "padding past the taps (crops)", x = f64(1, 2, 4, 3, 3), w = f64(2, 2, 3, 1, 1), padding = { 2, 0, 0 } },
    { what = "empty batch", x = f64(0, 2, 3, 3, 3), w = f64(2, 2, 2, 2, 2), b = f64(2), stride = 2 },
  }
end

local function conv_transpose3d_torch(c)
  return string.format("F.conv_transpose3d(x, w, b, stride=%s, padding=%s, output_padding=%s, groups=%d, " ..
    "dilation=%s)", py(c.stride or 1), py(c.padding or 0), py(c.output_padding or 0), c.groups or 1,
    py(c.dilation or 1))
end
local function conv_transpose3d_ours(c, x, w, b)
  return F.conv_transpose3d(x, w, b, c.stride, c.padding, c.output_padding, c.groups, c.dilation)
end

describe("conv_transpose3d", function()
  it("gives PyTorch's values and gradients in float64 (the composition)", function()
    check_against_torch(conv_transpose3d_cases(), conv_transpose3d_torch, conv_transpose3d_ours, 1e-11)
  end)

  it("gives PyTorch's values and gradients in float32, direct and composed", function()
    local before = ddp.core._onednn_calls()
    check_against_torch(conv_transpose3d_cases(), conv_transpose3d_torch, conv_transpose3d_ours, 2e-5, true)
    if ddp.core.onednn_info():find("^oneDNN") then -- the direct path ran for the cases it takes
      assert.is_true(ddp.core._onednn_calls() - before >= 3 * 4, "oneDNN's 3-d kernels ran")
    end
    conv3d_module.direct = false
    local ok, err = pcall(check_against_torch, conv_transpose3d_cases(), conv_transpose3d_torch,
      conv_transpose3d_ours, 2e-5, true)
    conv3d_module.direct = true
    assert(ok, err)
  end)

  it("is the adjoint of conv3d", function()
    ddp.manual_seed(304)
    local x, w, y = f64(2, 3, 5, 6, 7), f64(4, 3, 3, 2, 3), nil
    y = F.conv3d(x, w, nil, { 2, 1, 2 }, { 1, 0, 1 })
    local z = f64(table.unpack(y:size()))
    -- <conv(x), z> = <x, conv_transpose(z)> with the output size chosen to x's
    local back = F.conv_transpose3d(z, w, nil, { 2, 1, 2 }, { 1, 0, 1 }, { 0, 0, 0 })
    back = F.pad(back, { 0, 7 - back:size(5), 0, 6 - back:size(4), 0, 5 - back:size(3) })
    assert.near((y * z):sum():item(), (x * back):sum():item(), 1e-9)
  end)
end)

describe("the 3-d pools", function()
  it("give PyTorch's values and gradients", function()
    ddp.manual_seed(305)
    -- integer-valued inputs make ties in the max windows
    local ties = ddp.randint(0, 4, { 2, 2, 5, 6, 5 }):double()
    local cases = {
      { what = "max 2", op = "max", x = f64(2, 3, 4, 6, 5), k = 2 },
      { what = "max ceil, padded", op = "max", x = f64(2, 2, 7, 6, 5), k = { 3, 2, 2 }, stride = { 2, 1, 2 },
        padding = { 1, 1, 0 }, ceil_mode = true },
      { what = "max with ties", op = "max", x = ties, k = { 2, 3, 2 }, stride = 1 },
      { what = "max unbatched", op = "max", x = f64(3, 5, 4, 4), k = { 1, 2, 2 } },
      { what = "avg padded", op = "avg", x = f64(2, 2, 5, 6, 7), k = { 3, 2, 2 }, stride = { 2, 1, 1 },
        padding = { 1, 1, 1 } },
      { what = "avg ceil, count_include_pad false", op = "avg", x = f64(1, 3, 7, 5, 6), k = 3, stride = 2,
        padding = 1, ceil_mode = true, count_include_pad = false },
      { what = "avg ceil, count_include_pad true", op = "avg", x = f64(1, 2, 6, 5, 6), k = { 2, 3, 3 }, stride = 2,
        padding = { 1, 1, 0 }, ceil_mode = true },
      { what = "avg divisor_override", op = "avg", x = f64(2, 2, 5, 6, 4), k = { 2, 3, 2 }, stride = { 1, 2, 2 },
        padding = { 1, 1, 0 }, divisor_override = 5 },
      { what = "adaptive avg {2, nil, 3}", op = "aavg", x = f64(2, 3, 5, 7, 6), size = { 2, nil, 3 } },
      { what = "adaptive avg 1", op = "aavg", x = f64(2, 3, 5, 7, 6), size = 1 },
      { what = "adaptive max uneven", op = "amax", x = f64(2, 2, 5, 7, 6), size = { 3, 4, 4 } },
      { what = "adaptive max unbatched", op = "amax", x = f64(2, 6, 4, 4), size = 2 },
    }
    local inputs, script = {}, { "import torch, torch.nn.functional as F" }
    for k, c in ipairs(cases) do
      inputs["x" .. k] = c.x
      local call
      if c.op == "max" then
        call = string.format("F.max_pool3d(x, %s, stride=%s, padding=%s, ceil_mode=%s)", py(c.k), py(c.stride),
          py(c.padding or 0), py(c.ceil_mode or false))
      elseif c.op == "avg" then
        call = string.format("F.avg_pool3d(x, %s, stride=%s, padding=%s, ceil_mode=%s, count_include_pad=%s, " ..
          "divisor_override=%s)", py(c.k), py(c.stride), py(c.padding or 0), py(c.ceil_mode or false),
          py(c.count_include_pad ~= false), py(c.divisor_override))
      else
        local s = type(c.size) == "table" and string.format("(%s, %s, %s)", py(c.size[1]), py(c.size[2]),
          py(c.size[3])) or py(c.size)
        call = string.format("F.adaptive_%s_pool3d(x, %s)", c.op == "aavg" and "avg" or "max", s)
      end
      script[#script + 1] = string.format([[
x = T['x%d'].clone().requires_grad_(); y = %s
g = torch.randn(y.shape, dtype=y.dtype, generator=torch.Generator().manual_seed(%d)); y.backward(g)
OUT['y%d'], OUT['g%d'], OUT['gx%d'] = y, g, x.grad]], k, call, k, k, k, k)
    end
    local ref = TR.run(table.concat(script, "\n"), inputs)
    for k, c in ipairs(cases) do
      local x = c.x:clone():requires_grad_()
      local y
      if c.op == "max" then
        y = F.max_pool3d(x, c.k, c.stride, c.padding, 1, c.ceil_mode)
      elseif c.op == "avg" then
        y = F.avg_pool3d(x, c.k, c.stride, c.padding, c.ceil_mode, c.count_include_pad, c.divisor_override)
      elseif c.op == "aavg" then
        y = F.adaptive_avg_pool3d(x, c.size)
      else
        y = F.adaptive_max_pool3d(x, c.size)
      end
      R.assert_close(y, R.from(ref["y" .. k]), 1e-12, 1e-12, c.what)
      y:backward(R.tensor(R.from(ref["g" .. k])))
      R.assert_close(x.grad, R.from(ref["gx" .. k]), 1e-12, 1e-12, c.what .. ": input gradient")
    end
  end)

  it("are modules with PyTorch's printed forms, and keep NaN", function()
    local x = ddp.randn(2, 3, 4, 6, 6)
    assert.same({ 2, 3, 2, 3, 3 }, nn.MaxPool3d(2)(x):size())
    assert.same({ 2, 3, 4, 3, 3 }, nn.AvgPool3d({ 1, 2, 2 })(x):size())
    assert.same({ 2, 3, 1, 6, 2 }, nn.AdaptiveAvgPool3d({ 1, nil, 2 })(x):size())
    assert.same({ 2, 3, 1, 1, 1 }, nn.AdaptiveMaxPool3d(1)(x):size())
    assert.equal("MaxPool3d(kernel_size=(1, 2, 2), stride=(1, 2, 2), padding=0, dilation=1, ceil_mode=False)",
      tostring(nn.MaxPool3d({ 1, 2, 2 })))
    assert.equal("AvgPool3d(kernel_size=(2, 3, 3), stride=1, padding=1)", tostring(nn.AvgPool3d({ 2, 3, 3 }, 1, 1)))
    assert.equal("AdaptiveAvgPool3d(output_size=(1, None, 2))", tostring(nn.AdaptiveAvgPool3d({ 1, nil, 2 })))
    local n = x:clone()
    n[1][2][3][4][5] = 0 / 0
    local y = F.max_pool3d(n, 2)
    assert.is_true(y[1][2][2][2][3]:item() ~= y[1][2][2][2][3]:item(), "a window holding NaN gives NaN")
    assert.equal(1, y:isnan():sum():item())
  end)
end)

describe("BatchNorm3d, InstanceNorm3d, Dropout3d and the 3-d paddings", function()
  it("give PyTorch's values, gradients and running statistics", function()
    ddp.manual_seed(306)
    local x, gy = f64(3, 4, 3, 5, 4), f64(3, 4, 3, 5, 4)
    local ref = TR.run([[
import torch, torch.nn as nn, torch.nn.functional as F
torch.set_default_dtype(torch.float64)
for name, m in (('bn', nn.BatchNorm3d(4)), ('in', nn.InstanceNorm3d(4, affine=True, track_running_stats=True))):
    with torch.no_grad():
        m.weight.copy_(torch.arange(4.) * 0.5 + 0.25); m.bias.copy_(torch.arange(4.) - 1)
    x = T['x'].clone().requires_grad_()
    y = m(x); y.backward(T['gy'])
    OUT[name + '_y'], OUT[name + '_gx'], OUT[name + '_gw'] = y, x.grad, m.weight.grad
    OUT[name + '_rm'], OUT[name + '_rv'] = m.running_mean, m.running_var
    m.eval(); OUT[name + '_eval'] = m(T['x'] * 2)
for mode in ('reflect', 'replicate', 'constant'):
    x = T['x'].clone().requires_grad_()
    y = F.pad(x, (1, 2, 2, 1, 1, 2), mode=mode); y.backward(torch.ones_like(y) * torch.arange(y.numel()).view(y.shape))
    OUT['pad_' + mode], OUT['padg_' + mode] = y, x.grad
]], { x = x, gy = gy })
    for _, c in ipairs({ { "bn", nn.BatchNorm3d(4, { dtype = "float64" }) },
      { "in", nn.InstanceNorm3d(4, { affine = true, track_running_stats = true, dtype = "float64" }) } }) do
      local name, m = c[1], c[2]
      ddp.no_grad(function()
        m.weight:copy_(ddp.arange(0, 4):double() * 0.5 + 0.25)
        m.bias:copy_(ddp.arange(0, 4):double() - 1)
      end)
      local xl = x:clone():requires_grad_()
      local y = m(xl)
      y:backward(gy)
      R.assert_close(y, R.from(ref[name .. "_y"]), 1e-12, 1e-12, name)
      R.assert_close(xl.grad, R.from(ref[name .. "_gx"]), 1e-11, 1e-11, name .. ": input gradient")
      R.assert_close(m.weight.grad, R.from(ref[name .. "_gw"]), 1e-11, 1e-11, name .. ": weight gradient")
      R.assert_close(m.running_mean, R.from(ref[name .. "_rm"]), 1e-12, 1e-12, name .. ": running_mean")
      R.assert_close(m.running_var, R.from(ref[name .. "_rv"]), 1e-12, 1e-12, name .. ": running_var")
      m:eval()
      R.assert_close(m(x * 2), R.from(ref[name .. "_eval"]), 1e-12, 1e-12, name .. " in eval")
    end
    local modules = { reflect = nn.ReflectionPad3d, replicate = nn.ReplicationPad3d }
    for _, mode in ipairs({ "reflect", "replicate", "constant" }) do
      local xl = x:clone():requires_grad_()
      local y = mode == "constant" and nn.ConstantPad3d({ 1, 2, 2, 1, 1, 2 }, 0)(xl) or
          modules[mode]({ 1, 2, 2, 1, 1, 2 })(xl)
      y:backward(ddp.arange(0, y:numel()):double():view(y:size()))
      R.assert_close(y, R.from(ref["pad_" .. mode]), 0, 0, mode)
      R.assert_close(xl.grad, R.from(ref["padg_" .. mode]), 1e-9, 1e-12, mode .. ": gradient")
    end
    assert.equal("ReflectionPad3d((1, 1, 2, 2, 0, 1))", tostring(nn.ReflectionPad3d({ 1, 1, 2, 2, 0, 1 })))
    assert.equal("ConstantPad3d(padding=(1, 1, 1, 1, 1, 1), value=2.5)", tostring(nn.ConstantPad3d(1, 2.5)))
  end)

  it("drops whole channels in Dropout3d", function()
    ddp.manual_seed(307)
    local m = nn.Dropout3d(0.25)
    local y = m(ddp.ones(40, 50, 2, 3, 2))
    local per = y:view(40, 50, 12)
    -- each (sample, channel) volume is all zeros or all 1 / (1 - p)
    assert.equal(0, (per:amax(3) - per:amin(3)):abs():max():item())
    local kept = (per:select(3, 1):gt(0)):double():mean():item()
    assert.is_true(kept > 0.70 and kept < 0.80, "kept fraction " .. kept)
    assert.near(1 / 0.75, per:max():item(), 1e-6)
    -- unbatched [C, D, H, W]: one entry per channel
    local u = F.dropout3d(ddp.ones(200, 2, 2, 2), 0.5):view(200, 8)
    assert.equal(0, (u:amax(2) - u:amin(2)):abs():max():item())
    m:eval()
    local x = ddp.randn(2, 3, 2, 2, 2)
    assert.equal(x, m(x))
  end)
end)

describe("interpolate of volumes", function()
  it("gives PyTorch's trilinear and nearest values and gradients", function()
    ddp.manual_seed(310)
    local cases = {
      { mode = "trilinear", scale_factor = 2 },
      { mode = "trilinear", scale_factor = { 1.5, 0.7, 2.3 } },
      { mode = "trilinear", size = { 3, 9, 4 }, align_corners = true },
      { mode = "trilinear", scale_factor = { 1.5, 0.7, 2.3 }, recompute_scale_factor = true },
      { mode = "nearest", scale_factor = { 2, 1.5, 0.5 } },
      { mode = "nearest", size = { 7, 3, 11 } },
    }
    local x = f64(2, 3, 4, 5, 6)
    local inputs, script = { x = x }, { "import torch, torch.nn.functional as F" }
    for k, c in ipairs(cases) do
      local sf = c.scale_factor
      sf = type(sf) == "table" and string.format("(%s, %s, %s)", sf[1], sf[2], sf[3]) or py(sf)
      script[#script + 1] = string.format([[
x = T['x'].clone().requires_grad_()
y = F.interpolate(x, size=%s, scale_factor=%s, mode='%s', align_corners=%s, recompute_scale_factor=%s)
g = torch.randn(y.shape, dtype=y.dtype, generator=torch.Generator().manual_seed(%d)); y.backward(g)
OUT['y%d'], OUT['g%d'], OUT['gx%d'] = y, g, x.grad]], py(c.size), sf, c.mode, py(c.align_corners),
        py(c.recompute_scale_factor), k, k, k, k)
    end
    local ref = TR.run(table.concat(script, "\n"), inputs)
    for k, c in ipairs(cases) do
      local what = "case " .. k .. " " .. c.mode
      for _, dt in ipairs({ "float64", "float32" }) do
        local xl = x:to(dt):detach():clone():requires_grad_() -- a fresh leaf each time
        local y = F.interpolate(xl, { size = c.size, scale_factor = c.scale_factor, mode = c.mode,
          align_corners = c.align_corners, recompute_scale_factor = c.recompute_scale_factor })
        y:backward(R.tensor(R.from(ref["g" .. k])):to(dt))
        local tol = dt == "float64" and 1e-12 or 2e-5
        R.assert_close(y, R.from(ref["y" .. k]), tol, tol, what .. " " .. dt)
        R.assert_close(xl.grad, R.from(ref["gx" .. k]), tol, tol, what .. " " .. dt .. ": gradient")
      end
    end
    assert.equal("Upsample(scale_factor=(1.0, 2.0, 2.0), mode=trilinear)",
      tostring(nn.Upsample { scale_factor = { 1, 2, 2 }, mode = "trilinear" }))
    R.assert_errors({
      { function() F.interpolate(ddp.randn(2, 3, 4, 5), { scale_factor = 2, mode = "trilinear" }) end,
        "mode 'trilinear' expects a 5-D [N, C, D, H, W] input, got a 4-D input" },
      { function() F.interpolate(x, { scale_factor = 2, mode = "bilinear" }) end, "expects a 4-D" },
      { function() F.interpolate(x, { scale_factor = { 2, 2 }, mode = "trilinear" }) end,
        "scale_factor has 2 values but the input [2, 3, 4, 5, 6] has 3 spatial dimensions" },
    })
  end)
end)

describe("Conv3d and ConvTranspose3d modules", function()
  it("have PyTorch's parameters, init bounds, printed forms and output_size", function()
    ddp.manual_seed(308)
    local c = nn.Conv3d(4, 8, { 1, 3, 3 }, { stride = { 1, 2, 2 }, padding = { 0, 1, 1 } })
    assert.same({ 8, 4, 1, 3, 3 }, c.weight:size())
    local bound = 1 / math.sqrt(4 * 9)
    assert.is_true(c.weight:abs():max():item() <= bound and c.bias:abs():max():item() <= bound)
    assert.equal("Conv3d(4, 8, kernel_size=(1, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1))", tostring(c))
    assert.same({ 2, 8, 3, 4, 4 }, c(ddp.randn(2, 4, 3, 7, 8)):size())
    assert.same({ 8, 3, 4, 4 }, c(ddp.randn(4, 3, 7, 8)):size())
    local t = nn.ConvTranspose3d(4, 2, 3, 2, 1, 1)
    assert.same({ 4, 2, 3, 3, 3 }, t.weight:size())
    assert.equal("ConvTranspose3d(4, 2, kernel_size=(3, 3, 3), stride=(2, 2, 2), padding=(1, 1, 1), " ..
      "output_padding=(1, 1, 1))", tostring(t))
    local x = ddp.randn(1, 4, 3, 4, 5)
    assert.same({ 1, 2, 6, 8, 10 }, t(x):size())
    local t0 = nn.ConvTranspose3d(4, 2, 3, { stride = 2, padding = 1 })
    assert.same({ 1, 2, 6, 7, 10 }, t0(x, { 6, 7, 10 }):size())
    R.assert_error(function() t0(x, { 6, 7, 12 }) end, "valid sizes range")
    -- padding modes: the module pads in the mode first, then convolves unpadded, as PyTorch
    local r = nn.Conv3d(2, 3, 3, { padding = 1, padding_mode = "replicate", bias = false })
    local xr = ddp.randn(1, 2, 4, 5, 6)
    R.assert_close(r(xr), R.from(F.conv3d(F.pad(xr, { 1, 1, 1, 1, 1, 1 }, "replicate"), r.weight)), 1e-6, 1e-6,
      "replicate padding")
    local s = nn.Conv3d(2, 3, { 2, 3, 4 }, { padding = "same", padding_mode = "circular" })
    assert.same({ 1, 3, 4, 5, 6 }, s(xr):size())
  end)

  it("train a small 3-d network under autograd and an optimizer", function()
    ddp.manual_seed(309)
    local net = nn.Sequential {
      nn.Conv3d(1, 4, 3, { padding = 1 }), nn.BatchNorm3d(4), nn.ReLU(), nn.MaxPool3d({ 1, 2, 2 }),
      nn.Conv3d(4, 8, 3, { stride = 2, padding = 1 }), nn.ReLU(), nn.AdaptiveAvgPool3d(1), nn.Flatten(),
      nn.Linear(8, 2),
    }
    local opt = ddp.optim.SGD(net:parameters(), { lr = 0.1, momentum = 0.9 })
    -- two classes: a bright cube in the first or the second half of the clip
    local function batch()
      local x = ddp.randn(16, 1, 6, 8, 8) * 0.1
      local y = ddp.randint(1, 3, { 16 }) -- classes 1 and 2
      for i = 1, 16 do
        local d = y[i]:item() == 1 and 1 or 4
        x[i]:narrow(2, d, 2):narrow(3, 3, 4):narrow(4, 3, 4):add_(1)
      end
      return x, y
    end
    local first, last
    for step = 1, 40 do
      local x, y = batch()
      local loss = F.cross_entropy(net(x), y)
      opt:zero_grad()
      loss:backward()
      opt:step()
      if step == 1 then first = loss:item() end
      last = loss:item()
    end
    assert.is_true(last < first * 0.2, string.format("loss %.4f -> %.4f", first, last))
  end)
end)

describe("the 3-d layers' bad arguments", function()
  it("are named", function()
    local x, w = ddp.randn(1, 3, 4, 5, 5), ddp.randn(2, 3, 3, 3, 3)
    R.assert_errors({
      { function() F.conv3d(ddp.randn(3, 4, 5), w) end, "conv3d: expected an input of shape [N, C, D, H, W]" },
      { function() F.conv3d(x, ddp.randn(2, 3, 3, 3)) end, "conv3d: expected a 5-dimensional weight" },
      { function() F.conv3d(x, ddp.randn(2, 4, 3, 3, 3)) end, "input has 3 channels" },
      { function() F.conv3d(x, w:double()) end, "conv3d: the input is float32 but the weight is float64" },
      { function() F.conv3d(x, ddp.randn(2, 3, 5, 3, 3)) end, "kernel size 5 (dilation 1) does not fit the input depth" },
      { function() F.conv3d(x, w, nil, { 1, 2 }) end, "stride must be an integer or three integers" },
      { function() F.conv3d(x, w, nil, 2, "same") end, "padding=\"same\" needs stride 1" },
      { function() F.conv3d(x, w, nil, 1, -1) end, "padding must be a non-negative integer" },
      { function() F.conv3d(x, w, nil, 1, "full") end, "padding must be an integer, {d, h, w}" },
      { function() F.conv3d(x, w, ddp.randn(3)) end, "conv3d: expected a bias of shape [2]" },
      { function() F.conv3d(x, w, nil, 1, 0, 1, 2) end, "with groups 2" },
      { function() F.conv_transpose3d(x, ddp.randn(3, 2, 3, 3, 3), nil, 2, 0, 2) end,
        "output_padding (2, 2, 2) must be smaller than the stride (2, 2, 2)" },
      { function() F.conv_transpose3d(x, ddp.randn(4, 2, 3, 3, 3)) end, "input has 3 channels" },
      { function() F.conv_transpose3d(x, ddp.randn(3, 2, 1, 1, 1), nil, 1, 3) end, "the output size would be -2 in dim 3" },
      { function() F.max_pool3d(x, 2, 2, 2) end, "padding (2, 2, 2) must be at most half the kernel size" },
      { function() F.max_pool3d(x, 2, 2, 0, 2) end, "dilation=2 is not supported yet" },
      { function() F.max_pool3d(x, 2, 2, 0, 1, false, true) end, "return_indices" },
      { function() F.max_pool3d(x, { 5, 1, 1 }) end, "kernel size 5 does not fit the input depth 4" },
      { function() F.avg_pool3d(x, 2, 2, 0, false, true, 0) end, "divisor_override must be a positive integer" },
      { function() F.avg_pool3d(x, 2, 2, 0, "yes") end, "ceil_mode must be a boolean" },
      { function() F.avg_pool3d(ddp.randn(1, 3, 0, 5, 5), 1) end, "non-empty input" },
      { function() F.adaptive_avg_pool3d(x, 0) end, "output_size must be a positive integer" },
      { function() F.adaptive_max_pool3d(x, { 1, 2, 3, 4 }) end, "got a table with key 4" },
      { function() F.adaptive_avg_pool3d(x, { 1, 2, math.maxinteger }) end, "adaptive_avg_pool3d" },
      { function() nn.Conv3d(3, 4, 3)(ddp.randn(1, 2, 4, 4, 4)) end, "expected input of shape [N, 3, D, H, W]" },
      { function() nn.Conv3d(3, 4, 3, { groups = 2 }) end, "must both be divisible by groups 2" },
      { function() nn.ConvTranspose3d(3, 4, 3, { padding_mode = "reflect" }) end, "padding_mode" },
      { function() nn.BatchNorm3d(3)(ddp.randn(2, 3, 4, 4)) end, "expected 5-D input [N, C, D, H, W]" },
      { function() nn.InstanceNorm3d(3, { affine = true })(ddp.randn(2, 3, 4)) end, "expected 4D (unbatched) or 5D" },
      { function() nn.ReflectionPad3d({ 1, 1, 1 }) end, "padding must be an integer or a list of 6 integers" },
      { function() F.pad(ddp.randn(2, 3, 4), { 1, 1, 1, 1, 1, 1 }, "reflect") end, "the last three of a 4-D or 5-D" },
      { function() F.dropout3d(x, 1.5) end, "dropout3d: probability p must be a number in [0, 1]" },
      -- the direct kernel's own checks (core.conv3d_direct is reachable from Lua)
      { function() ddp.core.conv3d_direct(x, w, nil, { 1, 1 }, { 0, 0, 0 }, { 1, 1, 1 }, 1) end,
        "stride must be a table of 3 integers" },
      { function() ddp.core.conv3d_direct(x, w, nil, { 0, 1, 1 }, { 0, 0, 0 }, { 1, 1, 1 }, 1) end,
        "conv3d: stride must be >= 1" },
      { function() ddp.core.conv3d_direct(x, w, nil, { 1, 1, 1 }, { -1, 0, 0 }, { 1, 1, 1 }, 1) end,
        "conv3d: padding must be >= 0" },
      { function() ddp.core.conv3d_direct(x, w, nil, { 1, 1, 1 }, { 0, 0, 0 }, { 1, 1, 1 }, 0) end,
        "conv3d: groups must be >= 1" },
      { function() ddp.core.conv3d_direct(x, ddp.randn(2, 3, 9, 3, 3), nil, { 1, 1, 1 }, { 0, 0, 0 }, { 1, 1, 1 }, 1) end,
        "does not fit the input" },
      { function() ddp.core.conv3d_direct(x, w, nil, { 1, 1, 1 }, { 2 ^ 40, 0, 0 }, { 1, 1, 1 }, 1) end,
        "conv3d: the output" },
      { function() ddp.core.conv3d_direct(x, ddp.randn(2, 4, 3, 3, 3), nil, { 1, 1, 1 }, { 0, 0, 0 }, { 1, 1, 1 }, 1) end,
        "input has 3 channels" },
      { function() ddp.core.conv3d_direct(x:double(), w, nil, { 1, 1, 1 }, { 0, 0, 0 }, { 1, 1, 1 }, 1) end,
        "must share one floating point dtype" },
      { function() ddp.core.conv3d_direct(ddp.randn(3, 4, 5, 5), w, nil, { 1, 1, 1 }, { 0, 0, 0 }, { 1, 1, 1 }, 1) end,
        "expected a 5-dimensional input" },
      { function() ddp.core.conv_transpose3d_direct(x, w:transpose(1, 2), nil, { 1, 1 }, { 0, 0, 0 }, { 0, 0, 0 },
        { 1, 1, 1 }, 1) end, "conv_transpose3d: stride must be a table of 3 integers" },
      { function() ddp.core.conv_transpose3d_direct(x, ddp.randn(3, 2, 3, 3, 3), nil, { 2, 2, 2 }, { 0, 0, 0 },
        { 2, 0, 0 }, { 1, 1, 1 }, 1) end, "output_padding below the stride or the dilation" },
      { function() ddp.core.conv_transpose3d_direct(x, ddp.randn(3, 2, 3, 3, 3), nil, { 2 ^ 40, 1, 1 }, { 0, 0, 0 },
        { 0, 0, 0 }, { 1, 1, 1 }, 1) end, "at most 2^20" },
      { function() ddp.core.conv_transpose3d_direct(x, ddp.randn(3, 2, 1, 1, 1), nil, { 1, 1, 1 }, { 3, 0, 0 },
        { 0, 0, 0 }, { 1, 1, 1 }, 1) end, "conv_transpose3d: no output" },
      { function() ddp.core.conv_transpose3d_direct(x, ddp.randn(4, 2, 1, 1, 1), nil, { 1, 1, 1 }, { 0, 0, 0 },
        { 0, 0, 0 }, { 1, 1, 1 }, 1) end, "do not match" },
      { function() ddp.core.conv_transpose3d_direct(x, ddp.randn(3, 2, 1, 1, 1), ddp.randn(3), { 1, 1, 1 },
        { 0, 0, 0 }, { 0, 0, 0 }, { 1, 1, 1 }, 1) end, "conv_transpose3d: bias of shape [3], expected [2]" },
    })
  end)
end)
