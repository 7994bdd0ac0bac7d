-- Resampling and padding (lua/ddplua/nn/resample.lua, lua/ddplua/nn/padding.lua): F.interpolate (nearest, linear,
-- bilinear), nn.Upsample, nn.UpsamplingNearest2d, nn.UpsamplingBilinear2d, F.pixel_shuffle / F.pixel_unshuffle and their modules, F.pad
-- (constant, reflect, replicate) and the padding modules. Values and input gradients against PyTorch 1.13 on the same
-- inputs (odd sizes, scale factors 2, 1.5, 0.5 and others, align_corners both ways, non-contiguous inputs), in
-- float64 and float32, all in one PyTorch run; finite-difference gradients; hand-checked small values; reprs; errors.
local ddp = require "ddplua"
local gc = require "helpers.gradcheck"
local R = require "helpers.ref"
local TR = require "helpers.torch_ref"
local nn, F = ddp.nn, ddp.nn.F

local NO_TORCH = "skipped: /usr/bin/python3 cannot import torch"
local TOL = { float64 = { 1e-12, 1e-10 }, float32 = { 2e-5, 2e-5 } }

local function t34(t) return t:transpose(3, 4) end
local function t23(t) return t:transpose(2, 3) end

-- A case: { label, function(x) -> y, "<python expression of x>", x = float64 tensor, view = fn, grad = false (or
-- the one dtype whose gradient to compare), dtypes = {...} }: the function sees view(leaf) (non-contiguous for a
-- transpose), PyTorch the same values. The output and the gradient of sum(y * G) (G fixed random weights) with
-- respect to the input are compared.
local PY = [[
import warnings
import torch.nn as nn
import torch.nn.functional as F
warnings.filterwarnings("ignore")
for key in sorted({k.split(".")[0] for k in T}):
    expr = bytes(T[key + ".py"].tolist()).decode()
    x = T[key + ".x"].clone()
    if key + ".G" in T: x.requires_grad_(True)
    out = eval(expr, {"F": F, "nn": nn, "torch": torch, "x": x})
    OUT[key + ".out"] = out
    if key + ".G" in T:
        (out * T[key + ".G"]).sum().backward()
        OUT[key + ".grad"] = x.grad
]]

local function bytes_tensor(s)
  local b = {}
  for i = 1, #s do b[i] = s:byte(i) end
  return ddp.tensor(b, { dtype = "uint8" })
end

local function check_cases(cases)
  local inputs, runs = {}, {}
  for i, c in ipairs(cases) do
    for _, dt in ipairs(c.dtypes or { "float64", "float32" }) do
      local key = string.format("c%03d%s", i, dt:sub(-2))
      local leaf = c.x:to(dt):clone()
      local grad = c.grad == nil or c.grad == true or c.grad == dt
      if grad then leaf:requires_grad_() end
      local x = c.view and c.view(leaf) or leaf
      inputs[key .. ".x"] = x:detach()
      local out = c[2](x)
      assert(out:dtype() == dt, c[1] .. ": a " .. dt .. " input gave " .. out:dtype())
      if grad then
        local G = R.randn(out:size(), 500 + i):to(dt)
        inputs[key .. ".G"] = G
        ;(out * G):sum():backward()
      end
      inputs[key .. ".py"] = bytes_tensor(c[3])
      runs[#runs + 1] = { key = key, case = c, dt = dt, out = out, leaf = leaf, grad = grad }
    end
  end
  local ref = TR.run(PY, inputs)
  for _, r in ipairs(runs) do
    local tol, what = TOL[r.dt], r.case[1] .. " (" .. r.dt .. ")"
    R.assert_close(r.out:detach(), R.from(ref[r.key .. ".out"]), tol[1], tol[2], what .. ": value")
    if r.grad then
      local g = r.leaf.grad
      assert(g ~= nil, what .. ": no gradient")
      if r.case.view then g = r.case.view(g) end
      R.assert_close(g, R.from(ref[r.key .. ".grad"]), tol[1], tol[2], what .. ": input gradient")
    end
  end
  return #runs
end

local function values(t) return gc.flat_values(t) end

local function assert_values(t, expected, what)
  local v = values(t)
  assert(#v == #expected, string.format("%s: %d values, expected %d", what, #v, #expected))
  for i = 1, #v do
    assert(math.abs(v[i] - expected[i]) < 1e-6, string.format("%s: value %d is %.10g, expected %.10g", what, i, v[i],
      expected[i]))
  end
end

describe("F.interpolate / nn.Upsample", function()
  local x4 = R.randn({ 2, 3, 5, 7 }, 11)
  local x4t = R.randn({ 2, 3, 7, 5 }, 12) -- transposed in the cases: [2, 3, 5, 7] non-contiguous
  local x3 = R.randn({ 2, 3, 5 }, 13)
  local x3t = R.randn({ 2, 5, 3 }, 14)
  local x1 = R.randn({ 1, 2, 1, 3 }, 15)

  it("matches PyTorch: nearest, bilinear and linear, sizes and scale factors, align_corners both ways", function()
    if not TR.available() then return pending(NO_TORCH) end
    local cases = {
      -- nearest, 4-D
      { "nearest size {9, 4}", function(x) return F.interpolate(x, { 9, 4 }) end,
        "F.interpolate(x, size=(9, 4))", x = x4 },
      { "nearest size 3", function(x) return F.interpolate(x, 3) end, "F.interpolate(x, 3)", x = x4 },
      { "nearest scale 2", function(x) return F.interpolate(x, { scale_factor = 2 }) end,
        "F.interpolate(x, scale_factor=2)", x = x4 },
      { "nearest scale 1.5", function(x) return F.interpolate(x, nil, 1.5) end,
        "F.interpolate(x, None, 1.5)", x = x4 },
      { "nearest scale 0.5", function(x) return F.interpolate(x, { scale_factor = 0.5, mode = "nearest" }) end,
        "F.interpolate(x, scale_factor=0.5, mode='nearest')", x = x4 },
      { "nearest scale {2, 1.5} transposed", function(x) return F.interpolate(x, { scale_factor = { 2, 1.5 } }) end,
        "F.interpolate(x, scale_factor=(2, 1.5))", x = x4t, view = t34 },
      { "nearest scale 1.7 (1 / scale)", function(x) return F.interpolate(x, { scale_factor = 1.7 }) end,
        "F.interpolate(x, scale_factor=1.7)", x = x4 },
      { "nearest scale 1.7 recomputed (in / out)",
        function(x) return F.interpolate(x, { scale_factor = 1.7, recompute_scale_factor = true }) end,
        "F.interpolate(x, scale_factor=1.7, recompute_scale_factor=True)", x = x4 },
      -- PyTorch's backward disagrees with its own forward here (out == in, out == 2 * in): values only
      { "nearest scale 1.1 (5 -> 5, 7 -> 7)", function(x) return F.interpolate(x, { scale_factor = 1.1 }) end,
        "F.interpolate(x, scale_factor=1.1)", x = x4, grad = false },
      { "nearest scale 2.1 (5 -> 10)", function(x) return F.interpolate(x, { scale_factor = 2.1 }) end,
        "F.interpolate(x, scale_factor=2.1)", x = x4, grad = false },
      -- nearest, 3-D
      { "nearest 1-d size 9", function(x) return F.interpolate(x, 9) end, "F.interpolate(x, 9)", x = x3 },
      { "nearest 1-d scale 1.5 transposed", function(x) return F.interpolate(x, { scale_factor = 1.5 }) end,
        "F.interpolate(x, scale_factor=1.5)", x = x3t, view = t23 },
      { "nearest 1-d size {2}", function(x) return F.interpolate(x, { 2 }) end, "F.interpolate(x, (2,))", x = x3 },
      -- float32 inputs take their source indices in float32 (26 -> 22: index 12 at 11, float64 13); PyTorch's
      -- backward takes them in float32 for float64 inputs too (disagreeing with its forward): float32 gradients only
      { "nearest [1, 2, 26, 39] size {22, 33}", function(x) return F.interpolate(x, { 22, 33 }) end,
        "F.interpolate(x, size=(22, 33))", x = R.randn({ 1, 2, 26, 39 }, 16), grad = "float32" },
    }
    for _, ac in ipairs({ false, true }) do
      local acs = ac and "True" or "False"
      local function bl(label, lua_opts, py_args, x, view)
        lua_opts.mode, lua_opts.align_corners = "bilinear", ac
        cases[#cases + 1] = { "bilinear " .. label .. " align_corners=" .. acs,
          function(t) return F.interpolate(t, lua_opts) end,
          "F.interpolate(x, " .. py_args .. ", mode='bilinear', align_corners=" .. acs .. ")", x = x, view = view }
      end
      bl("size {9, 4}", { size = { 9, 4 } }, "size=(9, 4)", x4)
      bl("size 3", { size = 3 }, "size=3", x4)
      bl("scale 2", { scale_factor = 2 }, "scale_factor=2", x4)
      bl("scale 1.5", { scale_factor = 1.5 }, "scale_factor=1.5", x4)
      bl("scale 0.5", { scale_factor = 0.5 }, "scale_factor=0.5", x4)
      bl("scale {0.5, 1.7} transposed", { scale_factor = { 0.5, 1.7 } }, "scale_factor=(0.5, 1.7)", x4t, t34)
      bl("scale 1.7 recomputed", { scale_factor = 1.7, recompute_scale_factor = true },
        "scale_factor=1.7, recompute_scale_factor=True", x4)
      bl("scale 1.1 (sizes kept)", { scale_factor = 1.1 }, "scale_factor=1.1", x4)
      bl("size {5, 7} (the same)", { size = { 5, 7 } }, "size=(5, 7)", x4)
      bl("size {1, 1}", { size = { 1, 1 } }, "size=(1, 1)", x4)
      bl("[1, 2, 1, 3] size {4, 5}", { size = { 4, 5 } }, "size=(4, 5)", x1)
      local function li(label, lua_opts, py_args, x, view)
        lua_opts.mode, lua_opts.align_corners = "linear", ac
        cases[#cases + 1] = { "linear " .. label .. " align_corners=" .. acs,
          function(t) return F.interpolate(t, lua_opts) end,
          "F.interpolate(x, " .. py_args .. ", mode='linear', align_corners=" .. acs .. ")", x = x, view = view }
      end
      li("size 9", { size = 9 }, "size=9", x3)
      li("size 3", { size = 3 }, "size=3", x3)
      li("scale 1.5 transposed", { scale_factor = 1.5 }, "scale_factor=1.5", x3t, t23)
      li("scale 0.5", { scale_factor = 0.5 }, "scale_factor=0.5", x3)
      li("scale 2", { scale_factor = 2 }, "scale_factor=2", x3)
    end
    -- the positional forms and the modules
    local more = {
      { "positional (x, nil, 2, 'bilinear', true)", function(x) return F.interpolate(x, nil, 2, "bilinear", true) end,
        "F.interpolate(x, None, 2, 'bilinear', True)", x = x4 },
      { "positional (x, {9, 4}, nil, 'bilinear')", function(x) return F.interpolate(x, { 9, 4 }, nil, "bilinear") end,
        "F.interpolate(x, (9, 4), None, 'bilinear')", x = x4 },
      { "positional then options",
        function(x) return F.interpolate(x, 9, { mode = "linear", align_corners = true }) end,
        "F.interpolate(x, 9, mode='linear', align_corners=True)", x = x3 },
      { "nn.Upsample{scale_factor = 1.5}", function(x) return nn.Upsample { scale_factor = 1.5 }(x) end,
        "nn.Upsample(scale_factor=1.5)(x)", x = x4 },
      { "nn.Upsample({9, 4}, nil, 'bilinear')", function(x) return nn.Upsample({ 9, 4 }, nil, "bilinear")(x) end,
        "nn.Upsample((9, 4), None, 'bilinear')(x)", x = x4t, view = t34 },
      { "nn.Upsample{size = 8, mode = 'linear', align_corners = true}",
        function(x) return nn.Upsample { size = 8, mode = "linear", align_corners = true }(x) end,
        "nn.Upsample(size=8, mode='linear', align_corners=True)(x)", x = x3 },
      { "nn.UpsamplingNearest2d{scale_factor = 2}",
        function(x) return nn.UpsamplingNearest2d { scale_factor = 2 }(x) end,
        "nn.UpsamplingNearest2d(scale_factor=2)(x)", x = x4 },
      { "nn.UpsamplingBilinear2d({6, 9})", function(x) return nn.UpsamplingBilinear2d({ 6, 9 })(x) end,
        "nn.UpsamplingBilinear2d((6, 9))(x)", x = x4 },
      { "nn.UpsamplingBilinear2d(nil, 1.5)", function(x) return nn.UpsamplingBilinear2d(nil, 1.5)(x) end,
        "nn.UpsamplingBilinear2d(None, 1.5)(x)", x = x4t, view = t34 },
    }
    for _, c in ipairs(more) do cases[#cases + 1] = c end
    local n = check_cases(cases)
    assert.are.equal(2 * #cases, n)
  end)

  it("gives hand-checked values (PyTorch's index rules)", function()
    local x = ddp.arange(0, 5):to("float64"):view(1, 1, 5)
    assert_values(F.interpolate(x, { size = 3, mode = "linear" }), { 1 / 3, 2, 11 / 3 }, "linear 5 -> 3")
    assert_values(F.interpolate(x, { size = 3, mode = "linear", align_corners = true }), { 0, 2, 4 },
      "linear 5 -> 3 align_corners")
    assert_values(F.interpolate(x, { size = 1, mode = "linear", align_corners = true }), { 0 }, "linear 5 -> 1 ac")
    assert_values(F.interpolate(x, { size = 1, mode = "linear" }), { 2 }, "linear 5 -> 1")
    -- scale = 1 / 1.1, not 5 / 5: floor(j / 1.1)
    assert_values(F.interpolate(x, { scale_factor = 1.1 }), { 0, 0, 1, 2, 3 }, "nearest scale 1.1")
    assert_values(F.interpolate(x, { scale_factor = 2.1 }), { 0, 0, 0, 1, 1, 2, 2, 3, 3, 4 }, "nearest scale 2.1")
    assert_values(F.interpolate(x, 10), { 0, 0, 1, 1, 2, 2, 3, 3, 4, 4 }, "nearest size 10")
    -- upsampling by 2 without align_corners: the source index clamps at 0, the last weight stays on the last input
    assert_values(F.interpolate(x, { scale_factor = 2, mode = "linear" }),
      { 0, 0.25, 0.75, 1.25, 1.75, 2.25, 2.75, 3.25, 3.75, 4 }, "linear scale 2")
    -- bilinear is separable: rows then columns
    local m = ddp.tensor({ { 0, 1 }, { 2, 3 } }, { dtype = "float64" }):view(1, 1, 2, 2)
    assert_values(F.interpolate(m, { size = 3, mode = "bilinear", align_corners = true }),
      { 0, 0.5, 1, 1, 1.5, 2, 2, 2.5, 3 }, "bilinear 2x2 -> 3x3 align_corners")
    -- the source index in the input's precision, as PyTorch's kernel: floor(11 * float32(26 / 22)) = 12, 13 in float64
    local long = ddp.arange(0, 26):view(1, 1, 26)
    assert.are.equal(12, F.interpolate(long:float(), 22)[1][1][12]:item())
    assert.are.equal(13, F.interpolate(long:double(), 22)[1][1][12]:item())
    -- integer inputs work for nearest (an extension: PyTorch's kernel is floating-point only)
    local xi = ddp.tensor({ 1, 2, 3 }):view(1, 1, 3)
    local yi = F.interpolate(xi, { scale_factor = 2 })
    assert.are.equal("int64", yi:dtype())
    assert.are.same({ 1, 1, 2, 2, 3, 3 }, values(yi))
    -- a new tensor even when nothing changes
    local same = F.interpolate(x, 5)
    assert.are.same(values(x), values(same))
    same[1][1][1] = 9
    assert.are.equal(0, x[1][1][1]:item())
  end)

  it("has autograd through the composition: finite differences on float64", function()
    local x = R.randn({ 1, 2, 3, 4 }, 21):requires_grad_()
    gc.assert_gradcheck(function(t) return F.interpolate(t, { size = { 5, 3 }, mode = "bilinear" }) end, { x })
    gc.assert_gradcheck(function(t)
      return F.interpolate(t, { scale_factor = 1.5, mode = "bilinear", align_corners = true })
    end, { x })
    gc.assert_gradcheck(function(t)
      return F.interpolate(t:transpose(3, 4), { scale_factor = { 0.5, 2 }, mode = "bilinear" })
    end, { x })
    local y = R.randn({ 1, 2, 4 }, 22):requires_grad_()
    gc.assert_gradcheck(function(t) return F.interpolate(t, { size = 7, mode = "linear" }) end, { y })
    -- nearest: the gradient of the forward's own indices (also where PyTorch's backward disagrees with its forward)
    gc.assert_gradcheck(function(t) return F.interpolate(t, { scale_factor = 1.1 }) end, { x })
    gc.assert_gradcheck(function(t) return F.interpolate(t, { size = { 2, 7 } }) end, { x })
  end)

  it("prints as PyTorch's modules", function()
    assert.are.equal("Upsample(scale_factor=2.0, mode=nearest)", tostring(nn.Upsample { scale_factor = 2 }))
    assert.are.equal("Upsample(size=(9, 4), mode=bilinear)", tostring(nn.Upsample({ 9, 4 }, nil, "bilinear")))
    assert.are.equal("Upsample(size=5, mode=linear)",
      tostring(nn.Upsample { size = 5, mode = "linear", align_corners = true }))
    assert.are.equal("Upsample(scale_factor=(2.0, 1.5), mode=nearest)", tostring(nn.Upsample(nil, { 2, 1.5 })))
    assert.are.equal("Upsample(scale_factor=0.5, mode=bilinear)",
      tostring(nn.Upsample { scale_factor = 0.5, mode = "bilinear" }))
    assert.are.equal("UpsamplingNearest2d(scale_factor=2.0, mode=nearest)",
      tostring(nn.UpsamplingNearest2d { scale_factor = 2 }))
    assert.are.equal("UpsamplingBilinear2d(size=(3, 4), mode=bilinear)", tostring(nn.UpsamplingBilinear2d({ 3, 4 })))
    assert.are.equal("UpsamplingBilinear2d(size=3, mode=bilinear)", tostring(nn.UpsamplingBilinear2d(3)))
    local up = nn.UpsamplingBilinear2d(3)
    assert.are.equal(true, up.align_corners)
    assert.are.equal("bilinear", up.mode)
  end)

  it("rejects bad arguments with messages naming the function and what was expected", function()
    local x = ddp.randn(2, 3, 5, 7)
    local x3 = ddp.randn(2, 3, 5)
    R.assert_error(function() F.interpolate(x) end, "F.interpolate", "either size or scale_factor must be given")
    R.assert_error(function() F.interpolate(x, { size = 3, scale_factor = 2 }) end, "F.interpolate",
      "either size or scale_factor, not both")
    R.assert_error(function() F.interpolate(x, { size = 3, align_corners = true }) end,
      "align_corners can only be set", "not with mode 'nearest'")
    R.assert_error(function() F.interpolate(x, { size = 3, mode = "bogus" }) end, "unknown mode 'bogus'")
    R.assert_error(function() F.interpolate(x, { size = 3, mode = "bicubic" }) end, "mode 'bicubic' is not supported")
    R.assert_error(function() F.interpolate(x, { size = { 3, 4, 5 } }) end, "size has 3 values",
      "[2, 3, 5, 7] has 2 spatial dimensions")
    R.assert_error(function() F.interpolate(x, { scale_factor = { 2 } }) end, "scale_factor has 1 values")
    R.assert_error(function() F.interpolate(x, { size = 3, mode = "linear" }) end,
      "mode 'linear' expects a 3-D [N, C, L] input, got a 4-D input [2, 3, 5, 7]")
    R.assert_error(function() F.interpolate(x3, { size = 3, mode = "bilinear" }) end,
      "mode 'bilinear' expects a 4-D [N, C, H, W] input, got a 3-D input [2, 3, 5]")
    R.assert_error(function() F.interpolate(ddp.randn(5, 7), 3) end,
      "mode 'nearest' expects a 3-D [N, C, L], 4-D [N, C, H, W] or 5-D [N, C, D, H, W] input, got a 2-D input [5, 7]")
    R.assert_error(function() F.interpolate(x, { scale_factor = 0.1 }) end,
      "input and output sizes must be positive, got input [5, 7] and output [0, 0]")
    R.assert_error(function() F.interpolate(x, 0) end, "size must be a positive integer")
    R.assert_error(function() F.interpolate(x, 2.5) end, "size must be a positive integer")
    R.assert_error(function() F.interpolate(x, { scale_factor = -1 }) end, "scale_factor must be a positive number")
    R.assert_error(function() F.interpolate(x, { size = 3, recompute_scale_factor = true }) end,
      "recompute_scale_factor is not meaningful with an explicit size")
    R.assert_error(function() F.interpolate(x, { size = 3, mode = "bilinear", antialias = true }) end,
      "antialias=true is not supported")
    R.assert_error(function() F.interpolate(x, { size = 3, mode = "bilinear", align_corners = 1 }) end,
      "align_corners must be a boolean")
    R.assert_error(function() F.interpolate(ddp.tensor({ { { 1, 2 } } }), { size = 3, mode = "linear" }) end,
      "mode 'linear' needs a floating-point input, got int64")
    R.assert_error(function() F.interpolate({ 1, 2 }, 3) end, "F.interpolate: expected a tensor input")
    R.assert_error(function() F.interpolate(x, { sise = 3 }) end, "unknown option 'sise'")
    R.assert_error(function() nn.Upsample() end, "Upsample: either size or scale_factor must be given")
    R.assert_error(function() nn.Upsample { size = 3, mode = "nearest", align_corners = false } end,
      "Upsample: align_corners can only be set")
    R.assert_error(function() nn.Upsample { size = 3, mode = "linear" }(x) end,
      "Upsample: mode 'linear' expects a 3-D")
    R.assert_error(function() nn.UpsamplingBilinear2d(3)(x3) end, "UpsamplingBilinear2d: mode 'bilinear' expects")
    R.assert_error(function() nn.UpsamplingNearest2d() end, "UpsamplingNearest2d: either size or scale_factor")
  end)
end)

describe("F.pixel_shuffle / F.pixel_unshuffle", function()
  it("matches PyTorch (batch dims, non-contiguous inputs, the modules)", function()
    if not TR.available() then return pending(NO_TORCH) end
    local cases = {
      { "shuffle [2, 12, 3, 5] r=2", function(x) return F.pixel_shuffle(x, 2) end, "F.pixel_shuffle(x, 2)",
        x = R.randn({ 2, 12, 3, 5 }, 31) },
      { "shuffle [18, 2, 3] r=3", function(x) return F.pixel_shuffle(x, 3) end, "F.pixel_shuffle(x, 3)",
        x = R.randn({ 18, 2, 3 }, 32) },
      { "shuffle [2, 3, 8, 2, 3] r=2", function(x) return F.pixel_shuffle(x, 2) end, "F.pixel_shuffle(x, 2)",
        x = R.randn({ 2, 3, 8, 2, 3 }, 33) },
      { "shuffle transposed r=1", function(x) return F.pixel_shuffle(x, 1) end, "F.pixel_shuffle(x, 1)",
        x = R.randn({ 2, 3, 4, 5 }, 34), view = t34 },
      { "unshuffle [2, 3, 6, 4] r=2", function(x) return F.pixel_unshuffle(x, 2) end, "F.pixel_unshuffle(x, 2)",
        x = R.randn({ 2, 3, 6, 4 }, 35) },
      { "unshuffle transposed [2, 3, 6, 9] r=3", function(x) return F.pixel_unshuffle(x, 3) end,
        "F.pixel_unshuffle(x, 3)", x = R.randn({ 2, 3, 9, 6 }, 36), view = t34 },
      { "nn.PixelShuffle(2) transposed", function(x) return nn.PixelShuffle(2)(x) end, "nn.PixelShuffle(2)(x)",
        x = R.randn({ 1, 8, 4, 3 }, 37), view = t34 },
      { "nn.PixelUnshuffle(2)", function(x) return nn.PixelUnshuffle(2)(x) end, "nn.PixelUnshuffle(2)(x)",
        x = R.randn({ 3, 4, 2 }, 38) },
    }
    assert.are.equal(2 * #cases, check_cases(cases))
  end)

  it("places the sub-pixels as PyTorch (hand-checked) and round-trips", function()
    local x = ddp.arange(0, 8):to("float64"):view(1, 8, 1, 1)
    -- channel c * 4 + i * 2 + j goes to output channel c, position (i, j)
    assert_values(F.pixel_shuffle(x, 2), { 0, 1, 2, 3, 4, 5, 6, 7 }, "shuffle")
    assert.are.same({ 1, 2, 2, 2 }, F.pixel_shuffle(x, 2):size())
    local y = ddp.arange(0, 16):to("float64"):view(1, 1, 4, 4)
    assert_values(F.pixel_unshuffle(y, 2), { 0, 2, 8, 10, 1, 3, 9, 11, 4, 6, 12, 14, 5, 7, 13, 15 }, "unshuffle")
    local z = R.randn({ 2, 3, 4, 6 }, 39)
    assert.are.same(values(z), values(F.pixel_shuffle(F.pixel_unshuffle(z, 2), 2)))
    assert.are.equal("PixelShuffle(upscale_factor=2)", tostring(nn.PixelShuffle(2)))
    assert.are.equal("PixelUnshuffle(downscale_factor=3)", tostring(nn.PixelUnshuffle(3)))
  end)

  it("rejects bad inputs as PyTorch does", function()
    local x = ddp.randn(2, 3, 5, 7)
    R.assert_error(function() F.pixel_shuffle(x, 2) end, "F.pixel_shuffle",
      "channel dimension (size 3 of input [2, 3, 5, 7]) must be divisible by upscale_factor^2 = 4")
    R.assert_error(function() F.pixel_shuffle(ddp.randn(5, 7), 2) end, "at least 3 dimensions", "[5, 7]")
    R.assert_error(function() F.pixel_shuffle(x, 0) end, "upscale_factor must be a positive integer, got 0")
    R.assert_error(function() F.pixel_unshuffle(x, 2) end, "F.pixel_unshuffle",
      "height (size 5 of input [2, 3, 5, 7]) must be divisible by downscale_factor 2")
    R.assert_error(function() F.pixel_unshuffle(x:narrow(3, 1, 4), 2) end,
      "width (size 7 of input [2, 3, 4, 7]) must be divisible by downscale_factor 2")
    R.assert_error(function() F.pixel_unshuffle(x, 1.5) end, "downscale_factor must be a positive integer, got 1.5")
    R.assert_error(function() F.pixel_unshuffle(ddp.randn(4), 2) end, "at least 3 dimensions")
    R.assert_error(function() nn.PixelShuffle(0) end, "PixelShuffle: upscale_factor must be a positive integer")
    R.assert_error(function() nn.PixelUnshuffle(2)(x) end, "PixelUnshuffle: the height")
  end)
end)

describe("F.pad and the padding modules", function()
  local x4 = R.randn({ 2, 3, 5, 7 }, 41)
  local x4t = R.randn({ 2, 3, 7, 5 }, 42)
  local x3 = R.randn({ 2, 3, 5 }, 43)
  local x3t = R.randn({ 2, 5, 3 }, 44)
  local x2 = R.randn({ 3, 6 }, 45)

  it("matches PyTorch: constant (negative pads crop), reflect, replicate, and the modules", function()
    if not TR.available() then return pending(NO_TORCH) end
    local function case(label, x, pad, mode, value, view)
      local py = "F.pad(x, (" .. table.concat(pad, ", ") .. (#pad == 1 and ",)" or ")")
      if mode then py = py .. ", mode='" .. mode .. "'" end
      if value then py = py .. ", value=" .. value end
      return { label, function(t) return F.pad(t, pad, mode, value) end, py .. ")", x = x, view = view }
    end
    local cases = {
      case("constant {1, 2}", x4, { 1, 2 }),
      case("constant {1, 2, 3, 0} value 1.5", x4, { 1, 2, 3, 0 }, "constant", 1.5),
      case("constant crop {-1, 2, 0, -2}", x4, { -1, 2, 0, -2 }),
      case("constant {1, 1, 1, 1, 1, 1} transposed", x4t, { 1, 1, 1, 1, 1, 1 }, "constant", -2, t34),
      case("constant all 4 dims", x4, { 0, 1, 1, 0, 2, -1, 1, 1 }),
      case("constant crop to 0 {-3, -4}", x4, { -3, -4 }),
      case("constant zero pads {0, 0}", x4, { 0, 0 }),
      case("reflect 3-D {2, 3}", x3, { 2, 3 }, "reflect"),
      case("reflect 3-D {-2, 4} transposed", x3t, { -2, 4 }, "reflect", nil, t23),
      case("reflect 3-D {4, 4}", x3, { 4, 4 }, "reflect"),
      case("reflect 2-D {5, 1}", x2, { 5, 1 }, "reflect"),
      case("reflect 4-D {1, 2, 3, 0}", x4, { 1, 2, 3, 0 }, "reflect"),
      case("reflect 4-D {6, 4, -1, 2} transposed", x4t, { 6, 4, -1, 2 }, "reflect", nil, t34),
      case("reflect 3-D {0, 0, 2, 1}", x3, { 0, 0, 2, 1 }, "reflect"),
      case("replicate 3-D {3, 1}", x3, { 3, 1 }, "replicate"),
      case("replicate 3-D {-2, 9}", x3, { -2, 9 }, "replicate"),
      case("replicate 2-D {0, 4}", x2, { 0, 4 }, "replicate"),
      case("replicate 4-D {2, 0, 1, 3} transposed", x4t, { 2, 0, 1, 3 }, "replicate", nil, t34),
      case("replicate 4-D {-1, 3, 2, -2}", x4, { -1, 3, 2, -2 }, "replicate"),
      { "F.pad options table", function(t) return F.pad(t, { 1, 2 }, { mode = "replicate" }) end,
        "F.pad(x, (1, 2), mode='replicate')", x = x3 },
      { "nn.ZeroPad2d({1, 2, 3, 4})", function(t) return nn.ZeroPad2d({ 1, 2, 3, 4 })(t) end,
        "nn.ZeroPad2d((1, 2, 3, 4))(x)", x = x4 },
      { "nn.ConstantPad1d(2, 3.5)", function(t) return nn.ConstantPad1d(2, 3.5)(t) end,
        "nn.ConstantPad1d(2, 3.5)(x)", x = x3 },
      { "nn.ConstantPad2d({1, -2, 0, 1}, -1)", function(t) return nn.ConstantPad2d({ 1, -2, 0, 1 }, -1)(t) end,
        "nn.ConstantPad2d((1, -2, 0, 1), -1)(x)", x = x4t, view = t34 },
      { "nn.ReflectionPad1d({3, 1})", function(t) return nn.ReflectionPad1d({ 3, 1 })(t) end,
        "nn.ReflectionPad1d((3, 1))(x)", x = x3 },
      { "nn.ReflectionPad2d(2)", function(t) return nn.ReflectionPad2d(2)(t) end, "nn.ReflectionPad2d(2)(x)",
        x = x4 },
      { "nn.ReplicationPad1d(3)", function(t) return nn.ReplicationPad1d(3)(t) end, "nn.ReplicationPad1d(3)(x)",
        x = x3t, view = t23 },
      { "nn.ReplicationPad2d({0, 2, 3, 1})", function(t) return nn.ReplicationPad2d({ 0, 2, 3, 1 })(t) end,
        "nn.ReplicationPad2d((0, 2, 3, 1))(x)", x = x4 },
    }
    assert.are.equal(2 * #cases, check_cases(cases))
  end)

  it("gives hand-checked values", function()
    local x = ddp.arange(0, 5):to("float64"):view(1, 1, 5)
    assert_values(F.pad(x, { 2, 1 }, "reflect"), { 2, 1, 0, 1, 2, 3, 4, 3 }, "reflect {2, 1}")
    assert_values(F.pad(x, { -2, 4 }, "reflect"), { 2, 3, 4, 3, 2, 1, 0 }, "reflect {-2, 4}")
    assert_values(F.pad(x, { 2, -1 }, "replicate"), { 0, 0, 0, 1, 2, 3 }, "replicate {2, -1}")
    assert_values(F.pad(x, { 1, -3 }, "constant", 7), { 7, 0, 1 }, "constant {1, -3}")
    assert.are.same({ 1, 1, 0 }, F.pad(x, { -3, -2 }):size())
    local xi = ddp.tensor({ { { 1, 2, 3 } } })
    local yi = F.pad(xi, { 1, 1 }, "reflect")
    assert.are.equal("int64", yi:dtype())
    assert.are.same({ 2, 1, 2, 3, 2 }, values(yi))
    local m = ddp.tensor({ { 1, 2 }, { 3, 4 } }, { dtype = "float64" }):view(1, 2, 2)
    assert_values(F.pad(m, { 1, 0, 0, 1 }, "replicate"), { 1, 1, 2, 3, 3, 4, 3, 3, 4 }, "replicate 2-d")
    -- a new tensor even with zero pads
    local same = F.pad(x, { 0, 0 }, "reflect")
    same[1][1][1] = 9
    assert.are.equal(0, x[1][1][1]:item())
  end)

  it("has autograd through the composition: finite differences on float64", function()
    local x = R.randn({ 1, 2, 4 }, 51):requires_grad_()
    gc.assert_gradcheck(function(t) return F.pad(t, { 2, 3 }, "reflect") end, { x })
    gc.assert_gradcheck(function(t) return F.pad(t, { -1, 3 }, "reflect") end, { x })
    local y = R.randn({ 1, 1, 3, 4 }, 52):requires_grad_()
    gc.assert_gradcheck(function(t) return F.pad(t, { 1, 2, 2, 1 }, "reflect") end, { y })
    gc.assert_gradcheck(function(t) return F.pad(t:transpose(3, 4), { 2, 1, 0, 2 }, "replicate") end, { y })
    gc.assert_gradcheck(function(t) return F.pad(t, { 1, -2, -1, 1 }, "constant", 0.5) end, { y })
  end)

  it("prints as PyTorch's modules", function()
    assert.are.equal("ZeroPad2d((2, 2, 2, 2))", tostring(nn.ZeroPad2d(2)))
    assert.are.equal("ZeroPad2d((1, 2, 3, 4))", tostring(nn.ZeroPad2d({ 1, 2, 3, 4 })))
    assert.are.equal("ConstantPad1d(padding=(2, 2), value=3.5)", tostring(nn.ConstantPad1d(2, 3.5)))
    assert.are.equal("ConstantPad1d(padding=(1, 2), value=3)", tostring(nn.ConstantPad1d({ 1, 2 }, 3)))
    assert.are.equal("ConstantPad2d(padding=(1, 2, 0, 1), value=-1.0)",
      tostring(nn.ConstantPad2d({ 1, 2, 0, 1 }, -1.0)))
    assert.are.equal("ConstantPad2d(padding=(1, 1, 1, 1), value=0.25)", tostring(nn.ConstantPad2d(1, { value = 0.25 })))
    assert.are.equal("ReflectionPad1d((2, 2))", tostring(nn.ReflectionPad1d(2)))
    assert.are.equal("ReflectionPad2d((1, 2, 3, 0))", tostring(nn.ReflectionPad2d({ 1, 2, 3, 0 })))
    assert.are.equal("ReplicationPad1d((3, 1))", tostring(nn.ReplicationPad1d({ 3, 1 })))
    assert.are.equal("ReplicationPad2d((1, 1, 1, 1))", tostring(nn.ReplicationPad2d(1)))
  end)

  it("rejects bad arguments with messages naming the function and what was expected", function()
    local x = ddp.randn(2, 3, 5, 7)
    R.assert_error(function() F.pad(x, { 1, 1, 1 }) end, "F.pad", "even length", "got 3 values")
    R.assert_error(function() F.pad(x, { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1 }) end,
      "10 pad values pad 5 dimensions, but the input [2, 3, 5, 7] has 4")
    R.assert_error(function() F.pad(x, { 1, 1, 5, 5 }, "reflect") end,
      "reflect padding (5, 5) must be less than the input size 5 in dimension 3",
      "Padding size should be less than the corresponding input dimension")
    R.assert_error(function() F.pad(x:select(1, 1), { 7, 0 }, "reflect") end,
      "reflect padding (7, 0) must be less than the input size 7")
    R.assert_error(function() F.pad(x, { 1, 1 }, "reflect", 2) end, "padding mode 'reflect' does not take a value")
    R.assert_error(function() F.pad(x, { 1, 1 }, "reflect") end,
      "mode 'reflect' pads the last dimension of a 2-D or 3-D input", "got 2 pad values for the input [2, 3, 5, 7]")
    R.assert_error(function() F.pad(ddp.randn(5, 7), { 1, 1, 1, 1 }, "replicate") end,
      "got 4 pad values for the input [5, 7]")
    R.assert_error(function() F.pad(x:select(1, 1), { 1, 1, 1, 1, 1, 1 }, "replicate") end, "got 6 pad values")
    R.assert_error(function() F.pad(x, { 1, 1 }, "bogus") end, "unknown padding mode 'bogus'")
    R.assert_error(function() F.pad(x, { 1, 1 }, "circular") end, "mode 'circular' pads the spatial dimensions of a batched",
      "got 2 pad values for the input [2, 3, 5, 7]")
    R.assert_error(function() F.pad(x, { -4, -4 }) end,
      "input size 7 plus the padding -4 and -4 gives a negative output size in dimension 4")
    R.assert_error(function() F.pad(x, { -4, -3, 1, 0 }) end, -- PyTorch 1.13: an empty result only from crops alone
      "input size 7 plus the padding -4 and -3 gives an empty output size in dimension 4",
      "only where no pad is positive")
    assert.same({ 2, 0, 5 }, F.pad(ddp.zeros(2, 0, 3), { 1, 1 }):size())
    R.assert_error(function() F.pad(ddp.zeros(2, 0, 3), { 1, 1, 0, 0 }) end, "input size 0 plus the padding 0 and 0",
      "empty output size in dimension 2")
    assert.same({ 2, 3, 5, 0 }, F.pad(x, { -4, -3 }):size())
    R.assert_error(function() F.pad(ddp.randn(1, 1, 5), { -3, -3 }, "reflect") end,
      "the output size would be -1")
    R.assert_error(function() F.pad(ddp.randn(1, 1, 5), { -3, -2 }, "replicate") end,
      "is too small for the padding (-3, -2): the output size would be 0")
    R.assert_error(function() F.pad(x, { 1, 1.5 }) end, "pad must hold integers, got 1.5 at position 2")
    R.assert_error(function() F.pad(x, 2) end, "F.pad: pad must be a list")
    R.assert_error(function() F.pad(x, { 1, 1 }, "constant", "a") end, "value must be a number")
    R.assert_error(function() nn.ConstantPad1d(2) end, "ConstantPad1d: value must be a number, got nil")
    R.assert_error(function() nn.ReflectionPad2d({ 1, 2 }) end,
      "ReflectionPad2d: padding must be an integer or a list of 4 integers, got [1, 2]")
    R.assert_error(function() nn.ReplicationPad1d(1.5) end, "ReplicationPad1d: padding must be an integer")
    R.assert_error(function() nn.ZeroPad2d(1, 2) end, "ZeroPad2d: too many arguments")
    R.assert_error(function() nn.ReflectionPad1d(5)(ddp.randn(1, 2, 5)) end, "ReflectionPad1d((5, 5)): reflect padding")
    R.assert_error(function() nn.ReflectionPad2d(1)(ddp.randn(2, 1, 3, 3, 3)) end,
      "ReflectionPad2d((1, 1, 1, 1)): mode 'reflect' pads")
  end)
end)

describe("outputs that cannot exist", function()
  it("are refused at once by interpolate and the adaptive max pools, naming the output", function()
    -- these once looped over math.maxinteger positions (index lists, a narrow per window) until killed
    local x = ddp.randn(2, 3, 6, 6)
    local F = ddp.nn.F
    R.assert_error(function() F.interpolate(x, { size = { math.maxinteger, 2 } }) end,
      "F.interpolate: the output [2, 3, 9223372036854775807, 2] cannot be made")
    R.assert_error(function() F.interpolate(x, { size = { 1 << 40, 2 } }) end, "F.interpolate: the output")
    R.assert_error(function() F.interpolate(x, { scale_factor = 1e300 }) end,
      "F.interpolate: output size 6e+300 in spatial dim 1 is not an integer")
    R.assert_error(function() F.interpolate(x, { scale_factor = 1e300, mode = "bilinear" }) end, "not an integer")
    R.assert_error(function() nn.Upsample({ size = math.maxinteger })(x) end, "Upsample: the output")
    R.assert_error(function() F.adaptive_max_pool2d(x, { math.maxinteger, 2 }) end,
      "adaptive_max_pool2d: the output [2, 3, 9223372036854775807, 2] cannot be made")
    R.assert_error(function() F.adaptive_max_pool1d(ddp.randn(1, 2, 9), math.maxinteger) end, "cannot be made")
    -- and sizes that can exist still work
    assert.same({ 2, 3, 12, 7 }, F.interpolate(x, { size = { 12, 7 } }):size())
    assert.same({ 2, 3, 9, 4 }, F.adaptive_max_pool2d(x, { 9, 4 }):size())
  end)
end)
