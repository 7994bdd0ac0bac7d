-- core.plane_gather (src/backends/cpu/cpu_plane_gather.c): the last two dims through a row and a column map in one
-- pass each way, what F.pad in every mode and nearest interpolation of [N, C, H, W] run on the CPU in float32 and
-- float64. Held against index_select along each dim (the composition it replaced) in float64, PyTorch's F.pad and
-- F.interpolate with their gradients on tensors large enough to split over two threads, finite differences, the
-- maps' every kind of run (copied runs, fill runs, short runs gathered element by element, crops, repeats), and
-- hostile calls.
local ddp = require "ddplua"
local R = require "helpers.ref"
local TR = require "helpers.torch_ref"
local gc = require "helpers.gradcheck"
local F = ddp.nn.F
local core = ddp.core

local function i64(list) return ddp.tensor(list, { dtype = "int64" }) end

-- the maps applied one dim at a time: index_select, then the fill value where a map holds 0
local function composed(x, ih, iw, value)
  local nd = x:dim()
  local function fix(list)
    local idx, mask = {}, {}
    for j, p in ipairs(list) do idx[j], mask[j] = p == 0 and 1 or p, p == 0 and 1 or 0 end
    return idx, mask
  end
  local hi, hm = fix(ih)
  local wi, wm = fix(iw)
  local y = x:index_select(nd - 1, hi):index_select(nd, wi)
  local m = ddp.tensor(hm, { dtype = "float64" }):reshape({ #ih, 1 }) + ddp.tensor(wm, { dtype = "float64" })
  return core.where(m:gt(0), ddp.full({}, value, { dtype = x:dtype() }), y)
end

local MAPS = { -- rows, cols over a [.., 5, 9] input
  { { 1, 2, 3, 4, 5 }, { 1, 2, 3, 4, 5, 6, 7, 8, 9 } }, -- identity: one run
  { { 1, 1, 1, 2, 3, 4, 5, 5 }, { 1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 9 } }, -- replicate
  { { 3, 2, 1, 2, 3, 4, 5, 4 }, { 2, 1, 2, 3, 4, 5, 6, 7, 8, 9, 8, 7 } }, -- reflect
  { { 0, 0, 1, 2, 3, 4, 5, 0 }, { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 0, 0 } }, -- constant
  { { 2, 3, 4 }, { 3, 4, 5, 6 } }, -- crops
  { { 0, 3, 0 }, { 0, 0, 0 } }, -- only fills in the columns
  { { 1, 1, 2, 2, 3, 3, 4, 4, 5, 5 }, { 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9 } }, -- nearest x2
  { { 5, 1, 3 }, { 9, 1, 5, 5, 2, 8, 3 } }, -- scattered (gathered element by element)
  { { 4, 5, 1, 2 }, { 8, 9, 1, 2, 3, 4 } }, -- circular
}

describe("core.plane_gather", function()
  R.describe_kernel_sets(_ENV, { 1, 2 }, function()
    it("equals index_select along each dim with the fill value, forward and backward, float32 and float64", function()
      for mi, m in ipairs(MAPS) do
        for _, dt in ipairs({ "float64", "float32" }) do
          for _, shape in ipairs({ { 5, 9 }, { 3, 5, 9 }, { 40, 7, 5, 9 } }) do -- the last: planes over two threads
            local x = R.randn(shape, 10 * mi, 1):to(dt)
            local what = string.format("map %d, %s %s", mi, dt, table.concat(shape, "x"))
            local xa, xb = x:clone():requires_grad_(), x:clone():requires_grad_()
            local ya = core.plane_gather(xa, i64(m[1]), i64(m[2]), -2.5)
            local yb = composed(xb, m[1], m[2], -2.5)
            assert.same(yb:size(), ya:size(), what)
            assert.equal(0, ya:ne(yb):sum():item(), what .. ": forward")
            local w = R.randn(ya:size(), 7, 1):to(dt)
            local la, lb = (ya * w):sum(), (yb * w):sum()
            la:backward()
            lb:backward()
            -- (a replicated corner sums nine terms of about 1 in another order: a few ulps of the terms)
            local tol = dt == "float32" and 1e-6 or 1e-14
            R.assert_close(xa.grad, R.from(xb.grad:double()), tol, tol, what .. ": gradient")
          end
        end
      end
    end)
  end)

  it("passes finite differences", function()
    local x = R.randn({ 2, 4, 6 }, 3, 1):requires_grad_()
    local rows, cols = i64({ 0, 2, 1, 2, 4, 4 }), i64({ 3, 2, 1, 1, 6, 0 })
    gc.assert_gradcheck(function(t) return core.plane_gather(t, rows, cols, 7) end, { x })
  end)

  it("keeps other dtypes' values and NaN, and empty shapes", function()
    local x = ddp.arange(0, 30, { dtype = "int64" }):reshape({ 2, 3, 5 })
    local y = core.plane_gather(x, i64({ 3, 0, 1 }), i64({ 5, 5, 0, 1 }), 9)
    assert.same({ { { 14, 14, 9, 10 }, { 9, 9, 9, 9 }, { 4, 4, 9, 0 } },
      { { 29, 29, 9, 25 }, { 9, 9, 9, 9 }, { 19, 19, 9, 15 } } }, y:totable())
    local n = ddp.tensor({ { 0 / 0, 1 } })
    local yn = core.plane_gather(n, i64({ 1, 1 }), i64({ 2, 1 }), 0 / 0):totable()
    assert.equal(1, yn[1][1])
    assert.is_true(yn[1][2] ~= yn[1][2] and yn[2][2] ~= yn[2][2])
    assert.same({ 0, 3, 2 }, core.plane_gather(ddp.zeros(0, 4, 4), i64({ 1, 2, 3 }), i64({ 1, 2 })):size())
    assert.same({ 2, 0, 3 }, core.plane_gather(ddp.zeros(2, 4, 4), i64({}), i64({ 1, 2, 3 })):size())
    assert.same({ { 5, 5 } }, core.plane_gather(ddp.zeros(0, 0), i64({ 0 }), i64({ 0, 0 }), 5):totable())
  end)

  it("refuses bad maps and inputs with errors that name them", function()
    local x = ddp.randn(2, 3, 4)
    R.assert_error(function() core.plane_gather(x, i64({ 1, 4 }), i64({ 1 })) end, "plane_gather", "row map",
      "value 4 at position 2", "out of range 0..3", "0: the fill value")
    R.assert_error(function() core.plane_gather(x, i64({ 1 }), i64({ -1 })) end, "column map", "value -1",
      "out of range 0..4")
    R.assert_error(function() core.plane_gather(x, i64({ 1 }), i64({ math.maxinteger })) end, "column map",
      "out of range 0..4")
    R.assert_error(function() core.plane_gather(x, i64({ 1 }), i64({ math.mininteger })) end, "column map",
      "out of range 0..4")
    R.assert_error(function() core.plane_gather(x, ddp.tensor({ 1.5 }), i64({ 1 })) end,
      "row map must be a 1-d int64", "float32")
    R.assert_error(function() core.plane_gather(x, i64({ 1 }), i64({ 1 }), "a") end, "number expected")
    R.assert_error(function() core.plane_gather(x, i64({ 1 }), i64({ { 1 } })) end, "column map must be a 1-d int64")
    R.assert_error(function() core.plane_gather(ddp.randn(4), i64({ 1 }), i64({ 1 })) end,
      "at least 2 dimensions", "[4]")
    R.assert_error(function() core.plane_gather(x:bfloat16():requires_grad_(), i64({ 1 }), i64({ 1 })) end,
      "gradient is float32 / float64 only", "bfloat16")
  end)

  it("matches PyTorch's paddings and nearest interpolation with their gradients", function()
    local x = R.randn({ 8, 16, 20, 24 }, 5, 1):float() -- 8 x 16 planes: split over two threads
    ddp.set_num_threads(2)
    local cases = {
      { "F.pad(x, {3, 2, 1, 4}, 'reflect')", function(t) return F.pad(t, { 3, 2, 1, 4 }, "reflect") end,
        "F.pad(x, (3, 2, 1, 4), 'reflect')" },
      { "replicate", function(t) return F.pad(t, { 3, 0, 2, 5 }, "replicate") end,
        "F.pad(x, (3, 0, 2, 5), 'replicate')" },
      { "circular", function(t) return F.pad(t, { 4, 1, 2, 3 }, "circular") end, "F.pad(x, (4, 1, 2, 3), 'circular')" },
      { "constant with crops", function(t) return F.pad(t, { -2, 3, 1, -4 }, "constant", 0.5) end,
        "F.pad(x, (-2, 3, 1, -4), 'constant', 0.5)" },
      { "1-d reflect of [N, C, L]", function(t) return F.pad(t:reshape({ 8, 16, 480 }), { 5, 7 }, "reflect") end,
        "F.pad(x.reshape(8, 16, 480), (5, 7), 'reflect')" },
      { "nearest to 37 x 50", function(t) return F.interpolate(t, { 37, 50 }) end, "F.interpolate(x, (37, 50))" },
      { "nearest x2", function(t) return F.interpolate(t, { scale_factor = 2 }) end,
        "F.interpolate(x, scale_factor=2)" },
    }
    local body = { "import torch.nn.functional as F" }
    for i, c in ipairs(cases) do
      body[#body + 1] = string.format([[
x = T['x'].clone().requires_grad_()
y = %s
(y * torch.arange(y.numel(), dtype=y.dtype).reshape(y.shape).remainder(7)).sum().backward()
OUT['y%d'] = y.detach(); OUT['g%d'] = x.grad]], c[3], i, i)
    end
    local ref = TR.run(table.concat(body, "\n"), { x = x })
    for i, c in ipairs(cases) do
      local t = x:clone():requires_grad_()
      local y = c[2](t)
      local loss = (y * ddp.arange(0, y:numel(), { dtype = "float32" }):reshape(y:size()):remainder(7)):sum()
      loss:backward()
      R.assert_close(y, R.from(ref["y" .. i]), 0, 0, c[1])
      R.assert_close(t.grad, R.from(ref["g" .. i]), 1e-6, 1e-6, c[1] .. ": gradient")
    end
    ddp.set_num_threads(1)
  end)
end)
