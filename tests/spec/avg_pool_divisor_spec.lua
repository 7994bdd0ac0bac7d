-- avg_pool2d's divisor: the window within the padded input (count_include_pad=true, PyTorch's default), its
-- positions inside the input (count_include_pad=false: Inception's pools, ResNet-D's shortcut), or a fixed number
-- (divisor_override). Forward and gradient against PyTorch's F.avg_pool2d and the float64 path, in float32 (every
-- kernel set, one and two threads: the vectorised plane kernel and its 2x2 path), bfloat16 (widened planes) and
-- float64, with ceil mode's clipped last windows; nn.AvgPool2d's arguments; bad values named.
local ddp = require "ddplua"
local R = require "helpers.ref"
local TR = require "helpers.torch_ref"
local F, nn = ddp.nn.F, ddp.nn

-- x shape, kernel, stride, padding, ceil_mode
local CASES = {
  { { 2, 3, 7, 6 }, 3, 2, 1, false },
  { { 1, 2, 8, 9 }, 3, 2, 1, true },          -- ceil mode: a last window past the padding
  { { 2, 2, 9, 7 }, { 3, 2 }, { 2, 1 }, { 1, 1 }, true },
  { { 2, 4, 8, 8 }, 2, 2, 0, false },         -- the 2x2 path
  { { 3, 5, 5 }, 5, 1, 2, false },            -- unbatched, windows mostly padding
}
local MODES = { { true, nil }, { false, nil }, { true, 3 }, { false, 7 } }

-- n or {h, w} as Python reads it
local function py(v) return type(v) == "table" and string.format("(%d, %d)", v[1], v[2]) or tostring(v) end

local function label(c, m)
  return string.format("x %s k %s s %s p %s ceil %s, count_include_pad %s, divisor_override %s",
    table.concat(c[1], "x"), py(c[2]), py(c[3]), py(c[4]), tostring(c[5]), tostring(m[1]),
    tostring(m[2]))
end

local function torch_run(c, m, x, gy)
  return TR.run(string.format([[
import torch.nn.functional as F
x = T['x'].clone().requires_grad_()
y = F.avg_pool2d(x, %s, %s, %s, ceil_mode=%s, count_include_pad=%s, divisor_override=%s)
y.backward(T['gy'])
OUT['y'] = y; OUT['gx'] = x.grad
]], py(c[2]), py(c[3]), py(c[4]), c[5] and "True" or "False", m[1] and "True" or "False",
    m[2] and tostring(m[2]) or "None"), { x = x, gy = gy })
end

-- PyTorch's result, once per input (the kernel-set loop below runs the same inputs six times: one Python start
-- each was 8 s of the spec under ASan)
local refs = {}
local function torch_ref(c, m, x, gy)
  local key = label(c, m) .. x:dtype() .. x:sum():item() .. gy:sum():item()
  refs[key] = refs[key] or torch_run(c, m, x, gy)
  return refs[key]
end

local function run(c, m, x, gy)
  local xl = x:clone():requires_grad_()
  local y = F.avg_pool2d(xl, c[2], c[3], c[4], c[5], m[1], m[2])
  y:backward(gy)
  return y, xl.grad
end


describe("avg_pool2d's divisor", function()
  R.describe_kernel_sets(_ENV, { 1, 2 }, function()
    it("matches PyTorch and the float64 path in float32, forward and gradient", function()
      for ci, c in ipairs(CASES) do
        for mi, m in ipairs(MODES) do
          local x = R.randn(c[1], 100 * ci + mi, 1)
          local y0 = F.avg_pool2d(x, c[2], c[3], c[4], c[5], m[1], m[2])
          local gy = R.randn(y0:size(), 100 * ci + mi + 50, 1)
          local y, gx = run(c, m, x, gy)
          local y64, gx64 = run(c, m, x:double(), gy:double())
          local ref = torch_ref(c, m, x, gy)
          local what = label(c, m)
          R.assert_close(y, R.from(y64), 1e-6, 1e-5, what .. ": y against float64")
          R.assert_close(gx, R.from(gx64), 1e-6, 1e-5, what .. ": gx against float64")
          R.assert_close(y, R.from(ref.y), 1e-6, 1e-5, what .. ": y against PyTorch")
          R.assert_close(gx, R.from(ref.gx), 1e-6, 1e-5, what .. ": gx against PyTorch")
        end
      end
    end)
  end)

  it("float64 and bfloat16 agree with PyTorch", function()
    for ci, c in ipairs(CASES) do
      for mi, m in ipairs(MODES) do
        local x = R.randn(c[1], 300 + 10 * ci + mi, 1)
        local gy = R.randn(F.avg_pool2d(x, c[2], c[3], c[4], c[5], m[1], m[2]):size(), 400 + 10 * ci + mi, 1)
        local ref = torch_ref(c, m, x:double(), gy:double())
        local y64, gx64 = run(c, m, x:double(), gy:double())
        R.assert_close(y64, R.from(ref.y), 1e-12, 1e-12, label(c, m) .. ": float64 y")
        R.assert_close(gx64, R.from(ref.gx), 1e-12, 1e-12, label(c, m) .. ": float64 gx")
        local yb, gxb = run(c, m, x:bfloat16(), gy:bfloat16())
        R.assert_close(yb:double(), R.from(ref.y), 2e-2, 2e-2, label(c, m) .. ": bfloat16 y")
        R.assert_close(gxb:double(), R.from(ref.gx), 2e-2, 2e-2, label(c, m) .. ": bfloat16 gx")
      end
    end
  end)

  it("nn.AvgPool2d takes the arguments by position and by name, and names bad ones", function()
    local x = R.randn({ 2, 3, 7, 7 }, 9, 1)
    local a = nn.AvgPool2d(3, 2, 1, false, false, 5)
    local b = nn.AvgPool2d(3, { stride = 2, padding = 1, count_include_pad = false, divisor_override = 5 })
    R.assert_close(a(x), R.from(F.avg_pool2d(x, 3, 2, 1, false, false, 5)), 0, 0, "by position")
    R.assert_close(b(x), R.from(a(x)), 0, 0, "by name")
    assert.matches("count_include_pad=False, divisor_override=5", tostring(a))
    R.assert_close(nn.AvgPool2d(3, 2, 1, false, false)(x), R.from(F.avg_pool2d(x, 3, 2, 1, false, false)), 0, 0,
      "count_include_pad=false")
    R.assert_error(function() nn.AvgPool2d(3, { divisor_override = 0 }) end,
      "AvgPool2d: divisor_override must be a positive integer, got 0")
    R.assert_error(function() nn.AvgPool2d(3, { count_include_pad = "no" }) end, "count_include_pad must be a boolean")
    R.assert_error(function() F.avg_pool2d(x, 3, 2, 1, false, true, 0) end,
      "avg_pool2d: divisor_override must be a positive integer, got 0")
    R.assert_error(function() F.avg_pool2d(x, 3, 2, 1, false, true, 2.5) end, "divisor_override must be a positive")
  end)

  it("the 1-d pools take count_include_pad too", function()
    local x = R.randn({ 2, 3, 11 }, 12, 1)
    local ref = TR.run([[
import torch.nn.functional as F
OUT['a'] = F.avg_pool1d(T['x'], 3, 2, 1, count_include_pad=False)
OUT['b'] = F.avg_pool1d(T['x'], 4, 3, 2, ceil_mode=True, count_include_pad=False)
]], { x = x })
    R.assert_close(F.avg_pool1d(x, 3, 2, 1, false, false), R.from(ref.a), 1e-6, 1e-6, "F.avg_pool1d")
    R.assert_close(nn.AvgPool1d(4, 3, 2, true, false)(x), R.from(ref.b), 1e-6, 1e-6, "nn.AvgPool1d")
    R.assert_error(function() nn.AvgPool1d(3, { count_include_pad = 1 }) end, "count_include_pad must be a boolean")
  end)
end)
