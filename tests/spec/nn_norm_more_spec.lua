-- nn.GroupNorm, nn.InstanceNorm1d, nn.InstanceNorm2d, F.group_norm and F.instance_norm (lua/ddplua/nn/norm_more.lua):
-- values and gradients of input, weight and bias against PyTorch 1.13 (odd shapes, no trailing dims, transposed
-- inputs, unbatched inputs, affine or not, eps) in float32 and float64, InstanceNorm's running statistics over two
-- training steps and in eval, repr and state_dict keys against PyTorch's, a plain-Lua float64 reference, finite
-- differences and bad input.
local ddp = require "ddplua"
local gc = require "helpers.gradcheck"
local R = require "helpers.ref"
local TR = require "helpers.torch_ref"
local U = require "helpers.io_util"
local TC = require "helpers.torch_cases"
local nn, F = ddp.nn, ddp.nn.F

local NO_TORCH = "skipped: /usr/bin/python3 cannot import torch"
local TOL = TC.TOL

local function t34(t) return t:transpose(3, 4) end
local function t23(t) return t:transpose(2, 3) end

-- params(m, w, b): the module's weight and bias set to w and b (without recording a graph)
local function params(m, w, b)
  ddp.no_grad(function()
    if w then m.weight:copy_(w) end
    if b then m.bias:copy_(b) end
  end)
  return m
end

-- a string as a uint8 tensor, and back (for PyTorch's reprs and key lists)
local function from_bytes(t)
  local b = t:totable()
  for i, v in ipairs(b) do b[i] = string.char(v) end
  return table.concat(b)
end

-- plain-Lua float64 reference: x [N, C, *] normalised over groups of C / G channels and the trailing positions,
-- then * w[c] + b[c]
local function ref_group_norm(x, G, w, b, eps)
  local a = R.from(x)
  local N, C = a.shape[1], a.shape[2]
  local M = R.numel(a.shape) // (N * C)
  local per = C // G
  local out = R.array(a.shape)
  for n = 1, N do
    for g = 1, G do
      local base = ((n - 1) * C + (g - 1) * per) * M
      local s = 0
      for k = 1, per * M do s = s + a.v[base + k] end
      local mean = s / (per * M)
      local q = 0
      for k = 1, per * M do q = q + (a.v[base + k] - mean) ^ 2 end
      local rstd = 1 / math.sqrt(q / (per * M) + eps)
      for k = 1, per * M do
        local c = (g - 1) * per + (k - 1) // M + 1
        out.v[base + k] = (a.v[base + k] - mean) * rstd * (w and w[c] or 1) + (b and b[c] or 0)
      end
    end
  end
  return out
end

describe("nn.GroupNorm / F.group_norm", function()
  it("match PyTorch: values and gradients of input, weight and bias (odd shapes, no trailing dims, transposed)",
    function()
      if not TR.available() then return pending(NO_TORCH) end
      local w6, b6 = R.uniform({ 6 }, 0.5, 2, 11), R.randn({ 6 }, 12)
      local w4, b4 = R.uniform({ 4 }, 0.5, 2, 13), R.randn({ 4 }, 14)
      local n = TC.check_cases(TC.both_dtypes(function(dt)
        return {
          { "GroupNorm(2, 6) on [3, 6, 5, 7]",
            inputs = { { "x", R.randn({ 3, 6, 5, 7 }, 1, 2) + 1, grad = true }, { "w", w6, grad = true },
              { "b", b6, grad = true } },
            lua = function(I)
              local m = params(nn.GroupNorm(2, 6, { dtype = dt }), I.w, I.b)
              return m(I.x), { w = m.weight, b = m.bias }
            end,
            py = "m = nn.GroupNorm(2, 6).to(I['x'].dtype)\nwith torch.no_grad(): m.weight.copy_(I['w']); " ..
              "m.bias.copy_(I['b'])\nout = m(I['x'])\nP = {'w': m.weight, 'b': m.bias}" },
          { "group_norm G=3 eps=1e-3 on [3, 6, 5, 7] (transposed)",
            inputs = { { "x", R.randn({ 3, 6, 7, 5 }, 2), view = t34, grad = true }, { "w", w6, grad = true },
              { "b", b6, grad = true } },
            lua = function(I) return F.group_norm(I.x, 3, I.w, I.b, 1e-3) end,
            py = "out = F.group_norm(I['x'], 3, I['w'], I['b'], 1e-3)" },
          { "GroupNorm(2, 6) on [3, 6, 5] (transposed across the channels)",
            inputs = { { "x", R.randn({ 3, 5, 6 }, 3, 3), view = t23, grad = true }, { "w", w6, grad = true },
              { "b", b6, grad = true } },
            lua = function(I)
              local m = params(nn.GroupNorm(2, 6):to(dt), I.w, I.b)
              return m(I.x), { w = m.weight, b = m.bias }
            end,
            py = "m = nn.GroupNorm(2, 6).to(I['x'].dtype)\nwith torch.no_grad(): m.weight.copy_(I['w']); " ..
              "m.bias.copy_(I['b'])\nout = m(I['x'])\nP = {'w': m.weight, 'b': m.bias}" },
          { "GroupNorm(4, 4, affine=False) on [2, 4, 9]",
            inputs = { { "x", R.randn({ 2, 4, 9 }, 4), grad = true } },
            lua = function(I) return nn.GroupNorm(4, 4, 1e-5, false)(I.x) end,
            py = "out = nn.GroupNorm(4, 4, 1e-5, False)(I['x'])" },
          { "GroupNorm(3, 6) on [2, 6] (no trailing dims)",
            inputs = { { "x", R.randn({ 2, 6 }, 5), grad = true }, { "w", w6, grad = true }, { "b", b6, grad = true } },
            lua = function(I)
              local m = params(nn.GroupNorm(3, 6, { dtype = dt }), I.w, I.b)
              return m(I.x), { w = m.weight, b = m.bias }
            end,
            py = "m = nn.GroupNorm(3, 6).to(I['x'].dtype)\nwith torch.no_grad(): m.weight.copy_(I['w']); " ..
              "m.bias.copy_(I['b'])\nout = m(I['x'])\nP = {'w': m.weight, 'b': m.bias}" },
          { "group_norm G=1 weight only on [2, 4, 9]",
            inputs = { { "x", R.randn({ 2, 4, 9 }, 6), grad = true }, { "w", w4, grad = true } },
            lua = function(I) return F.group_norm(I.x, 1, I.w) end,
            py = "out = F.group_norm(I['x'], 1, I['w'])" },
          -- (bias without weight: PyTorch 1.13's backward fails, "tensor does not have a device"; the gradcheck
          -- below covers it)
          { "group_norm G=2 eps=0.5 on [2, 4, 3, 2, 2]",
            inputs = { { "x", R.randn({ 2, 4, 3, 2, 2 }, 7), grad = true }, { "w", w4, grad = true },
              { "b", b4, grad = true } },
            lua = function(I) return F.group_norm(I.x, 2, I.w, I.b, 0.5) end,
            py = "out = F.group_norm(I['x'], 2, I['w'], I['b'], 0.5)" },
          { "group_norm G=2 on an empty batch [0, 4, 3] (zero weight and bias gradients)",
            inputs = { { "x", ddp.zeros(0, 4, 3), grad = true }, { "w", w4, grad = true }, { "b", b4, grad = true } },
            lua = function(I) return F.group_norm(I.x, 2, I.w, I.b) end,
            py = "out = F.group_norm(I['x'], 2, I['w'], I['b'])" },
        }
      end))
      assert.are.equal(16, n)
    end)

  it("match a plain-Lua float64 reference (no PyTorch needed)", function()
    local x = R.randn({ 2, 6, 4, 3 }, 21, 2) + 0.5
    local w, b = R.uniform({ 6 }, 0.5, 2, 22), R.randn({ 6 }, 23)
    local m = params(nn.GroupNorm(3, 6, 1e-5, true, nil, "float64"), w, b)
    R.assert_close(m(x):detach(), ref_group_norm(x, 3, w:totable(), b:totable(), 1e-5), 1e-12, 1e-12, "GroupNorm")
    local xt = R.randn({ 3, 5, 4 }, 24):transpose(2, 3)
    R.assert_close(F.group_norm(xt, 2, nil, nil, 0.1), ref_group_norm(xt:contiguous(), 2, nil, nil, 0.1), 1e-12,
      1e-12, "group_norm transposed")
    local x2 = R.randn({ 3, 4 }, 25)
    R.assert_close(F.group_norm(x2, 2), ref_group_norm(x2, 2, nil, nil, 1e-5), 1e-12, 1e-12, "group_norm [3, 4]")
    -- each group's output has mean 0 and (biased) variance 1 / (1 + eps / var) before the affine map
    local y = F.group_norm(x, 2):reshape(2, 2, -1)
    assert.is_true(y:mean(3):abs():max():item() < 1e-14)
    local v = x:reshape(2, 2, -1):var(3, { correction = 0 })
    R.assert_close(y:var(3, { correction = 0 }), R.from(v / (v + 1e-5)), 1e-13, 1e-13, "group variance")
  end)

  it("the CPU kernel (core.group_norm) against the composition it replaces, on 1 and 2 threads; hostile calls",
    function()
      -- the composition (layer_norm over the groups' rows, then the channels' affine map), in float64
      local function composed(x, G, w, b, eps)
        local N, C = x:size(1), x:size(2)
        local y = ddp.layer_norm(x:reshape(N, G, -1), x:numel() // (N * G), nil, nil, eps):view(x:size())
        local shape = { C }
        for d = 3, x:dim() do shape[d - 1] = 1 end
        return y * w:view(shape) + b:view(shape)
      end
      local x, g = R.randn({ 5, 12, 9, 7 }, 61, 3) + 2, R.randn({ 5, 12, 9, 7 }, 62)
      local w, b = R.uniform({ 12 }, 0.5, 2, 63), R.randn({ 12 }, 64)
      local want = {}
      for k, v in pairs({ x = x, w = w, b = b }) do want[k] = v:clone():requires_grad_() end
      local wy = composed(want.x, 4, want.w, want.b, 1e-5)
      wy:backward(g)
      for _, threads in ipairs({ 1, 2 }) do
        ddp.set_num_threads(threads)
        for _, dt in ipairs({ "float64", "float32" }) do
          local got = {}
          for k, v in pairs({ x = x, w = w, b = b }) do got[k] = v:to(dt):clone():requires_grad_() end
          local y = F.group_norm(got.x, 4, got.w, got.b, 1e-5)
          y:backward(g:to(dt))
          local tol = dt == "float64" and 1e-12 or 2e-5
          local what = dt .. ", " .. threads .. " thread(s)"
          R.assert_close(y, R.from(wy), tol, tol, what .. ": output")
          R.assert_close(got.x.grad, R.from(want.x.grad), tol, tol, what .. ": input gradient")
          R.assert_close(got.w.grad, R.from(want.w.grad), tol * 10, tol, what .. ": weight gradient")
          R.assert_close(got.b.grad, R.from(want.b.grad), tol * 10, tol, what .. ": bias gradient")
        end
      end
      ddp.set_num_threads(1)
      -- no values in the trailing dims: an empty output, zero weight and bias gradients
      local e, ew, eb = ddp.zeros(2, 4, 0):requires_grad_(), w:narrow(1, 1, 4):clone():requires_grad_(),
        b:narrow(1, 1, 4):clone():requires_grad_()
      local ey = F.group_norm(e, 2, ew, eb)
      assert.are.same({ 2, 4, 0 }, ey:size())
      ey:sum():backward()
      assert.are.same({ 0, 0, 0, 0 }, ew.grad:totable())
      assert.are.same({ 0, 0, 0, 0 }, eb.grad:totable())
      R.assert_error(function() ddp.core.group_norm(x, 5, nil, nil, 1e-5) end, "group_norm", "divisible by groups")
      R.assert_error(function() ddp.core.group_norm(x, 0, nil, nil, 1e-5) end, "group_norm", "0 groups")
      R.assert_error(function() ddp.core.group_norm(x:long(), 4, nil, nil, 1e-5) end, "float32 or float64", "int64")
      R.assert_error(function() ddp.core.group_norm(x, 4, w:float(), nil, 1e-5) end, "weight must be a float64 tensor")
      R.assert_error(function() ddp.core.group_norm(x, 4, nil, b:narrow(1, 1, 3), 1e-5) end, "bias", "[12]")
      R.assert_error(function() ddp.core.group_norm(x, 4, nil, nil, -1) end, "eps must be >= 0")
      R.assert_error(function() ddp.core.group_norm(ddp.randn(3), 1, nil, nil, 1e-5) end, "[N, C, *]")
    end)

  it("have finite-difference gradients for input (transposed, no trailing dims), weight and bias", function()
    gc.assert_gradcheck(function(x, w, b) return F.group_norm(t34(x), 2, w, b) end,
      { R.randn({ 2, 4, 3, 2 }, 31):requires_grad_(), R.uniform({ 4 }, 0.5, 2, 32):requires_grad_(),
        R.randn({ 4 }, 33):requires_grad_() })
    gc.assert_gradcheck(function(x, w, b) return F.group_norm(x, 3, w, b, 0.1) end,
      { R.randn({ 3, 6 }, 34):requires_grad_(), R.uniform({ 6 }, 0.5, 2, 35):requires_grad_(),
        R.randn({ 6 }, 36):requires_grad_() })
    gc.assert_gradcheck(function(x, b) return F.group_norm(x, 2, nil, b, 0.5) end,
      { R.randn({ 2, 4, 3, 1, 2 }, 38):requires_grad_(), R.randn({ 4 }, 39):requires_grad_() })
    local m = nn.GroupNorm(1, 3, { affine = false, dtype = "float64" })
    gc.assert_gradcheck(function(x) return m(t23(x)) end, { R.randn({ 2, 5, 3 }, 37):requires_grad_() })
  end)

  it("refuse bad settings and inputs, naming the module or function", function()
    R.assert_error(function() return nn.GroupNorm(4, 6) end, "GroupNorm", "num_channels must be divisible by " ..
      "num_groups", "num_channels=6", "num_groups=4")
    R.assert_error(function() return nn.GroupNorm(0, 6) end, "GroupNorm", "num_groups must be a positive integer")
    R.assert_error(function() return nn.GroupNorm(2, 6.5) end, "GroupNorm", "num_channels must be a positive integer")
    R.assert_error(function() return nn.GroupNorm(2, 6, -1) end, "GroupNorm", "eps must be a positive number")
    R.assert_error(function() return nn.GroupNorm(2, 6, { momentum = 0.1 }) end, "GroupNorm",
      "unknown option 'momentum'")
    local m = nn.GroupNorm(2, 6)
    R.assert_error(function() return m(ddp.randn(2, 4, 3)) end, "GroupNorm(2, 6, eps=1e-05, affine=True)",
      "expected input [N, 6, *]", "[2, 4, 3]")
    R.assert_error(function() return m(ddp.randn(6)) end, "GroupNorm(2, 6, eps=1e-05, affine=True)", "[6]")
    R.assert_error(function() return nn.GroupNorm(2, 2, { affine = false })(ddp.randn(1, 2)) end, "GroupNorm",
      "expected more than 1 value per channel", "[1, 2]")
    R.assert_error(function() return m("x") end, "GroupNorm", "expected a tensor")
    R.assert_error(function() return F.group_norm(ddp.randn(2, 6, 3), 4) end, "group_norm", "divisible by",
      "num_groups=4", "[2, 6, 3]")
    R.assert_error(function() return F.group_norm(ddp.randn(2, 6, 3), 0) end, "group_norm",
      "num_groups must be a positive integer")
    R.assert_error(function() return F.group_norm(ddp.randn(2, 6, 3), 2, ddp.ones(4)) end, "group_norm",
      "weight of shape [6]", "got shape [4]")
    R.assert_error(function() return F.group_norm(ddp.randn(2, 6, 3), 2, nil, ddp.ones(6, 1)) end, "group_norm",
      "bias of shape [6]")
    R.assert_error(function() return F.group_norm(ddp.randn(6), 2) end, "group_norm", "at least 2 dimensions")
    R.assert_error(function() return F.group_norm(ddp.randn(2, 6), 2, nil, nil, 0) end, "group_norm", "eps")
  end)
end)

describe("nn.InstanceNorm1d / nn.InstanceNorm2d / F.instance_norm", function()
  it("match PyTorch: values and gradients (affine or not, transposed, unbatched, 3 spatial dims)", function()
    if not TR.available() then return pending(NO_TORCH) end
    local w4, b4 = R.uniform({ 4 }, 0.5, 2, 41), R.randn({ 4 }, 42)
    local w3, b3 = R.uniform({ 3 }, 0.5, 2, 43), R.randn({ 3 }, 44)
    local w5, b5 = R.uniform({ 5 }, 0.5, 2, 45), R.randn({ 5 }, 46)
    local function module_case(label, x, view, make, py_make, w, b)
      local inputs = { { "x", x, view = view, grad = true } }
      if w then
        inputs[2], inputs[3] = { "w", w, grad = true }, { "b", b, grad = true }
      end
      local py = "m = " .. py_make .. ".to(I['x'].dtype)\n"
      if w then
        py = py .. "with torch.no_grad(): m.weight.copy_(I['w']); m.bias.copy_(I['b'])\nP = {'w': m.weight, " ..
          "'b': m.bias}\n"
      end
      return { label, inputs = inputs, py = py .. "out = m(I['x'])",
        lua = function(I)
          local m = make():to(I.x:dtype())
          if w then
            params(m, I.w, I.b)
            return m(I.x), { w = m.weight, b = m.bias }
          end
          return m(I.x)
        end }
    end
    local n = TC.check_cases(TC.both_dtypes(function()
      return {
        module_case("InstanceNorm2d(4, affine) on [3, 4, 5, 7]", R.randn({ 3, 4, 5, 7 }, 51, 2) - 1, nil,
          function() return nn.InstanceNorm2d(4, { affine = true }) end, "nn.InstanceNorm2d(4, affine=True)", w4, b4),
        module_case("InstanceNorm2d(4, eps=1e-3) on [3, 4, 5, 7] (transposed)", R.randn({ 3, 4, 7, 5 }, 52), t34,
          function() return nn.InstanceNorm2d(4, 1e-3) end, "nn.InstanceNorm2d(4, 1e-3)"),
        module_case("InstanceNorm2d(4, affine) on [2, 4, 3, 6] (transposed across the channels)",
          R.randn({ 2, 3, 4, 6 }, 53), t23, function() return nn.InstanceNorm2d(4, nil, nil, true) end,
          "nn.InstanceNorm2d(4, affine=True)", w4, b4),
        module_case("InstanceNorm1d(4) on [2, 4, 9]", R.randn({ 2, 4, 9 }, 54),
          nil, function() return nn.InstanceNorm1d(4) end, "nn.InstanceNorm1d(4)"),
        module_case("InstanceNorm1d(4, affine) unbatched [4, 9]", R.randn({ 4, 9 }, 55), nil,
          function() return nn.InstanceNorm1d(4, { affine = true }) end, "nn.InstanceNorm1d(4, affine=True)", w4, b4),
        module_case("InstanceNorm2d(3, affine) unbatched [3, 5, 6] (transposed)", R.randn({ 3, 6, 5 }, 56), t23,
          function() return nn.InstanceNorm2d(3, { affine = true }) end, "nn.InstanceNorm2d(3, affine=True)", w3, b3),
        module_case("InstanceNorm1d(5, affine, tracking) training on [2, 5, 9] (transposed)",
          R.randn({ 2, 9, 5 }, 57), t23, function() return nn.InstanceNorm1d(5, 1e-5, 0.1, true, true) end,
          "nn.InstanceNorm1d(5, 1e-5, 0.1, True, True)", w5, b5),
        { "instance_norm weight, bias, eps=1e-4 on [2, 3, 4, 5, 2]",
          inputs = { { "x", R.randn({ 2, 3, 4, 5, 2 }, 58), grad = true }, { "w", w3, grad = true },
            { "b", b3, grad = true } },
          lua = function(I) return F.instance_norm(I.x, nil, nil, I.w, I.b, true, 0.1, 1e-4) end,
          py = "out = F.instance_norm(I['x'], None, None, I['w'], I['b'], True, 0.1, 1e-4)" },
        { "instance_norm with defaults on [1, 2, 3]",
          inputs = { { "x", R.randn({ 1, 2, 3 }, 59), grad = true } },
          lua = function(I) return F.instance_norm(I.x) end,
          py = "out = F.instance_norm(I['x'])" },
      }
    end))
    assert.are.equal(18, n)
  end)

  it("keep PyTorch's running statistics over two training steps and use them in eval", function()
    if not TR.available() then return pending(NO_TORCH) end
    local inputs = {
      x1 = R.randn({ 2, 3, 4, 5 }, 61, 2) + 1, x2 = R.randn({ 4, 3, 5, 3 }, 62) - 0.5, x3 = R.randn({ 2, 3, 4, 4 }, 63),
      w = R.uniform({ 3 }, 0.5, 2, 64), b = R.randn({ 3 }, 65), G = R.randn({ 2, 3, 4, 4 }, 66),
      u1 = R.randn({ 4, 7 }, 67, 3), u2 = R.randn({ 3, 4, 6 }, 68), u3 = R.randn({ 4, 5 }, 69),
      f1 = R.randn({ 2, 3, 6 }, 70), f2 = R.randn({ 2, 3, 6 }, 71), rm = R.randn({ 3 }, 72),
      rv = R.uniform({ 3 }, 0.5, 2, 73),
    }
    local ref = TR.run([[
import torch.nn as nn, torch.nn.functional as F
for dt in (torch.float32, torch.float64):
    s = str(dt)[-2:]
    V = {k: v.to(dt) for k, v in T.items()}
    m = nn.InstanceNorm2d(3, momentum=0.3, affine=True, track_running_stats=True).to(dt)
    with torch.no_grad(): m.weight.copy_(V['w']); m.bias.copy_(V['b'])
    OUT['y1' + s] = m(V['x1'])
    OUT['rm1' + s], OUT['rv1' + s] = m.running_mean.clone(), m.running_var.clone()
    OUT['y2' + s] = m(V['x2'])
    OUT['rm2' + s], OUT['rv2' + s] = m.running_mean.clone(), m.running_var.clone()
    OUT['nbt' + s] = m.num_batches_tracked
    m.eval()
    x3 = V['x3'].clone().requires_grad_()
    y3 = m(x3)
    (y3 * V['G']).sum().backward()
    OUT['y3' + s], OUT['gx3' + s], OUT['gw' + s], OUT['gb' + s] = y3, x3.grad, m.weight.grad, m.bias.grad
    OUT['rm3' + s] = m.running_mean
    m1 = nn.InstanceNorm1d(4, track_running_stats=True).to(dt)
    m1(V['u1']); m1(V['u2'])
    OUT['m1rm' + s], OUT['m1rv' + s] = m1.running_mean, m1.running_var
    m1.eval()
    OUT['m1y' + s] = m1(V['u3'])
    m2 = nn.InstanceNorm1d(4).to(dt).eval()
    OUT['m2y' + s] = m2(V['u3'])
    rm, rv = V['rm'].clone(), V['rv'].clone()
    OUT['fy1' + s] = F.instance_norm(V['f1'], rm, rv, momentum=0.2)
    OUT['frm' + s], OUT['frv' + s] = rm, rv
    OUT['fy2' + s] = F.instance_norm(V['f2'], rm, rv, V['w'], V['b'], use_input_stats=False, eps=1e-3)
]], inputs)
    for _, dt in ipairs({ "float32", "float64" }) do
      local s, tol = dt:sub(-2), TOL[dt]
      local V = {}
      for k, v in pairs(inputs) do V[k] = v:to(dt) end
      local function close(t, key, what)
        R.assert_close(t:detach(), R.from(ref[key .. s]), tol[1], tol[2], what .. " (" .. dt .. ")")
      end
      local m = params(nn.InstanceNorm2d(3, { momentum = 0.3, affine = true, track_running_stats = true, dtype = dt }),
        V.w, V.b)
      close(m(V.x1), "y1", "step 1 output")
      close(m.running_mean, "rm1", "step 1 running_mean")
      close(m.running_var, "rv1", "step 1 running_var")
      close(m(V.x2), "y2", "step 2 output")
      close(m.running_mean, "rm2", "step 2 running_mean")
      close(m.running_var, "rv2", "step 2 running_var")
      assert.are.equal(ref["nbt" .. s]:item(), m.num_batches_tracked:item())
      assert.are.equal("int64", m.num_batches_tracked:dtype())
      m:eval()
      local x3 = V.x3:clone():requires_grad_()
      local y3 = m(x3)
      ;(y3 * V.G):sum():backward()
      close(y3, "y3", "eval output")
      close(x3.grad, "gx3", "eval gradient of input")
      close(m.weight.grad, "gw", "eval gradient of weight")
      close(m.bias.grad, "gb", "eval gradient of bias")
      close(m.running_mean, "rm3", "eval leaves running_mean")
      local m1 = nn.InstanceNorm1d(4, nil, nil, nil, true):to(dt)
      m1(V.u1)
      m1(V.u2)
      close(m1.running_mean, "m1rm", "unbatched then batched running_mean")
      close(m1.running_var, "m1rv", "unbatched then batched running_var")
      m1:eval()
      close(m1(V.u3), "m1y", "InstanceNorm1d eval unbatched")
      close(nn.InstanceNorm1d(4):to(dt):eval()(V.u3), "m2y", "InstanceNorm1d without tracking in eval")
      local rm, rv = V.rm:clone(), V.rv:clone()
      close(F.instance_norm(V.f1, rm, rv, nil, nil, nil, 0.2), "fy1", "instance_norm updating")
      close(rm, "frm", "instance_norm running_mean")
      close(rv, "frv", "instance_norm running_var")
      close(F.instance_norm(V.f2, rm, rv, V.w, V.b, false, nil, 1e-3), "fy2", "instance_norm with running stats")
    end
  end)

  it("match a plain-Lua float64 reference, running statistics too (no PyTorch needed)", function()
    local x = R.randn({ 3, 4, 5, 2 }, 81, 2) + 1
    local w, b = R.uniform({ 4 }, 0.5, 2, 82), R.randn({ 4 }, 83)
    local m = params(nn.InstanceNorm2d(4, { affine = true, track_running_stats = true, momentum = 0.25,
      dtype = "float64" }), w, b)
    -- instance norm is group norm with one channel per group
    R.assert_close(m(x), ref_group_norm(x, 4, w:totable(), b:totable(), 1e-5), 1e-12, 1e-12, "InstanceNorm2d")
    local flat = x:reshape(3, 4, 10)
    local want_m = (flat:mean(3):mean(1) * 0.25):totable()
    local want_v = (flat:var(3):mean(1) * 0.25 + 0.75):totable()
    R.assert_close(m.running_mean, { shape = { 4 }, v = want_m }, 1e-14, 1e-13, "running_mean")
    R.assert_close(m.running_var, { shape = { 4 }, v = want_v }, 1e-14, 1e-13, "running_var")
    m:eval()
    local u = R.randn({ 4, 3, 3 }, 84)
    local rm, rv = m.running_mean:totable(), m.running_var:totable()
    local a, out = R.from(u), R.array({ 4, 3, 3 })
    for k = 1, 36 do
      local c = (k - 1) // 9 + 1
      out.v[k] = (a.v[k] - rm[c]) / math.sqrt(rv[c] + 1e-5) * w:totable()[c] + b:totable()[c]
    end
    R.assert_close(m(u), out, 1e-12, 1e-12, "eval unbatched")
  end)

  it("have finite-difference gradients in training (transposed, unbatched) and in eval", function()
    gc.assert_gradcheck(function(x, w, b) return F.instance_norm(t34(x), nil, nil, w, b) end,
      { R.randn({ 2, 3, 3, 2 }, 91):requires_grad_(), R.uniform({ 3 }, 0.5, 2, 92):requires_grad_(),
        R.randn({ 3 }, 93):requires_grad_() })
    local m = nn.InstanceNorm1d(3, { affine = true, track_running_stats = true, dtype = "float64" })
    gc.assert_gradcheck(function(x, w, b)
      m.weight, m.bias = w, b
      return m(x:transpose(1, 2))
    end, { R.randn({ 4, 3 }, 94):requires_grad_(), R.uniform({ 3 }, 0.5, 2, 95):requires_grad_(),
      R.randn({ 3 }, 96):requires_grad_() })
    m:eval()
    gc.assert_gradcheck(function(x, w, b)
      m.weight, m.bias = w, b
      return m(x)
    end, { R.randn({ 2, 3, 4 }, 97):requires_grad_(), R.uniform({ 3 }, 0.5, 2, 98):requires_grad_(),
      R.randn({ 3 }, 99):requires_grad_() })
  end)

  it("refuse bad settings and inputs, naming the module or function", function()
    local m2 = nn.InstanceNorm2d(3)
    local name2 = "InstanceNorm2d(3, eps=1e-05, momentum=0.1, affine=False, track_running_stats=False)"
    R.assert_error(function() return m2(ddp.randn(2, 3)) end, name2, "expected 3D (unbatched) or 4D (batched) input",
      "[2, 3]")
    R.assert_error(function() return m2(ddp.randn(2, 3, 4, 5, 6)) end, name2, "[2, 3, 4, 5, 6]")
    R.assert_error(function() return nn.InstanceNorm1d(3)(ddp.randn(2, 3, 4, 5)) end, "InstanceNorm1d(3,",
      "expected 2D (unbatched) or 3D (batched) input", "[2, 3, 4, 5]")
    R.assert_error(function() return nn.InstanceNorm2d(3, { affine = true })(ddp.randn(2, 4, 5, 5)) end,
      "InstanceNorm2d(3,", "affine=True", "expected 3 channels in dimension 2", "[2, 4, 5, 5]")
    R.assert_error(function() return nn.InstanceNorm1d(3, { track_running_stats = true })(ddp.randn(4, 5)) end,
      "InstanceNorm1d(3,", "expected 3 channels in dimension 1", "[4, 5]")
    R.assert_error(function() return nn.InstanceNorm1d(3)(ddp.randn(1, 3, 1)) end, "InstanceNorm1d(3,",
      "expected more than 1 spatial element", "[1, 3, 1]")
    R.assert_error(function() return nn.InstanceNorm1d(3)(ddp.randn(3, 1)) end, "InstanceNorm1d(3,",
      "expected more than 1 spatial element")
    R.assert_error(function() return nn.InstanceNorm1d(3, 1e-5, 2) end, "InstanceNorm1d", "momentum")
    R.assert_error(function() return nn.InstanceNorm1d(3, { momentum = false }) end, "InstanceNorm1d", "momentum")
    R.assert_error(function() return nn.InstanceNorm2d(0) end, "InstanceNorm2d", "num_features")
    R.assert_error(function() return nn.InstanceNorm2d(3, 0) end, "InstanceNorm2d", "eps")
    R.assert_error(function() return nn.InstanceNorm2d(3, { bogus = 1 }) end, "InstanceNorm2d", "unknown option")
    local x = ddp.randn(2, 3, 4)
    R.assert_error(function() return F.instance_norm(x, nil, nil, nil, nil, false) end, "instance_norm",
      "running_mean and running_var")
    R.assert_error(function() return F.instance_norm(x, ddp.zeros(3)) end, "instance_norm", "together")
    R.assert_error(function() return F.instance_norm(x, ddp.zeros(4), ddp.ones(4)) end, "instance_norm",
      "running_mean of shape [3]")
    R.assert_error(function() return F.instance_norm(x, nil, nil, ddp.ones(2)) end, "instance_norm",
      "weight of shape [3]")
    R.assert_error(function() return F.instance_norm(ddp.randn(3)) end, "instance_norm", "at least 2 dimensions")
    R.assert_error(function() return F.instance_norm(ddp.randn(4, 3)) end, "instance_norm",
      "more than 1 spatial element", "[4, 3]")
    R.assert_error(function() return F.instance_norm(ddp.randn(4, 3, 1, 1)) end, "instance_norm",
      "more than 1 spatial element", "[4, 3, 1, 1]")
  end)

  it("warn once, as PyTorch, when num_features does not match an input it does not use", function()
    local ok, out = U.run_lua_fresh([[
local ddp = require "ddplua"
local m = ddp.nn.InstanceNorm2d(3)
for _ = 1, 2 do assert(m(ddp.randn(2, 4, 3, 3)):dim() == 4) end
print("done")
]], "")
    assert.is_true(ok, out)
    local _, count = out:gsub("warning:", "")
    assert.are.equal(1, count, out)
    assert.truthy(out:find("InstanceNorm2d(3, eps=1e-05, momentum=0.1, affine=False, track_running_stats=False): " ..
      "the input's size in dimension 2 (4, shape [2, 4, 3, 3]) does not match num_features (3)", 1, true), out)
    assert.truthy(out:find("done", 1, true), out)
  end)
end)

describe("GroupNorm and InstanceNorm modules", function()
  it("print, name their parameters and buffers, and initialise them as PyTorch's", function()
    local mods = {
      { nn.GroupNorm(2, 6), "nn.GroupNorm(2, 6)" },
      { nn.GroupNorm(3, 3, 1e-3, false), "nn.GroupNorm(3, 3, 1e-3, False)" },
      { nn.InstanceNorm1d(4), "nn.InstanceNorm1d(4)" },
      { nn.InstanceNorm2d(5, { affine = true }), "nn.InstanceNorm2d(5, affine=True)" },
      { nn.InstanceNorm2d(2, { track_running_stats = true, momentum = 0.25, eps = 1e-4 }),
        "nn.InstanceNorm2d(2, 1e-4, 0.25, track_running_stats=True)" },
      { nn.InstanceNorm1d(3, 1e-5, 0.1, true, true), "nn.InstanceNorm1d(3, 1e-5, 0.1, True, True)" },
    }
    local function describe_module(m)
      local keys = {}
      for k in pairs(m:state_dict()) do keys[#keys + 1] = k end
      local params = {}
      for k in m:named_parameters() do params[#params + 1] = k end
      return tostring(m) .. "|" .. table.concat(keys, ",") .. "|" .. table.concat(params, ",")
    end
    if TR.available() then
      local lines = { "import torch.nn as nn", "def d(m): return (repr(m) + '|' + ','.join(m.state_dict().keys()) + " ..
        "'|' + ','.join(k for k, _ in m.named_parameters())).encode()" }
      for i, e in ipairs(mods) do
        lines[#lines + 1] = string.format("OUT['m%d'] = torch.tensor(list(d(%s)), dtype=torch.uint8)", i, e[2])
      end
      local ref = TR.run(table.concat(lines, "\n") .. "\n", {})
      for i, e in ipairs(mods) do assert.are.equal(from_bytes(ref["m" .. i]), describe_module(e[1])) end
    end
    -- without PyTorch too: what it gives (checked against it above)
    assert.are.equal("GroupNorm(2, 6, eps=1e-05, affine=True)|weight,bias|weight,bias", describe_module(mods[1][1]))
    assert.are.equal("InstanceNorm1d(3, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)|weight," ..
      "bias,running_mean,running_var,num_batches_tracked|weight,bias", describe_module(mods[6][1]))
    assert.are.equal("InstanceNorm1d(4, eps=1e-05, momentum=0.1, affine=False, track_running_stats=False)||",
      describe_module(mods[3][1]))
    -- initial values, dtype option, running stats
    local g = nn.GroupNorm(2, 4, { dtype = "float64" })
    assert.are.equal("float64", g.weight:dtype())
    assert.are.same({ 1, 1, 1, 1 }, g.weight:totable())
    assert.are.same({ 0, 0, 0, 0 }, g.bias:totable())
    assert.is_true(g.weight.requires_grad and g.bias.requires_grad)
    local inorm = mods[6][1]
    assert.are.same({ 0, 0, 0 }, inorm.running_mean:totable())
    assert.are.same({ 1, 1, 1 }, inorm.running_var:totable())
    assert.is_false(inorm.running_mean.requires_grad)
    assert.are.equal(0, inorm.num_batches_tracked:item())
    -- a state_dict round trip
    local other = nn.InstanceNorm1d(3, 1e-5, 0.1, true, true)
    inorm(ddp.randn(2, 3, 5))
    other:load_state_dict(inorm:state_dict())
    assert.are.same(inorm.running_mean:totable(), other.running_mean:totable())
    assert.are_not.same({ 0, 0, 0 }, other.running_mean:totable())
    inorm:reset_running_stats()
    assert.are.same({ 0, 0, 0 }, inorm.running_mean:totable())
    assert.are.same({ 1, 1, 1 }, inorm.running_var:totable())
  end)
end)
