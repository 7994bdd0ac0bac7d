-- batch_norm (training / evaluation, running statistics, affine or not),
-- the SyncBatchNorm pieces (a batch split over simulated replicas must give
-- the single-process result), and layer_norm: forward against plain-Lua
-- float64 references, gradients against finite differences, bad input.
local ddp = require "ddplua"
local gc = require "helpers.gradcheck"
local R = require "helpers.ref"
local N = require "helpers.ref_nn"

local TOL_NORM32 = { 5e-5, 5e-5 }

local function list_close(t, list, tol, what) R.assert_close(t, { shape = { #list }, v = list }, tol, tol, what) end

describe("batch_norm", function()
  local shapes = { { 6, 3 }, { 4, 3, 5 }, { 3, 2, 4, 3 } }
  for i, shape in ipairs(shapes) do
    local label = "[" .. table.concat(shape, ", ") .. "]"
    it(label .. " in training mode normalises with batch statistics and updates the running ones", function()
      local c = shape[2]
      local x = R.randn(shape, 2000 + i, 2.0) + 1.5
      local w, b = R.randn({ c }, 2010 + i), R.randn({ c }, 2020 + i)
      local rm0, rv0 = R.randn({ c }, 2030 + i), R.uniform({ c }, 0.5, 2, 2040 + i)
      for _, momentum in ipairs({ 0.1, 0.3 }) do
        local ref, ref_rm, ref_rv = N.batch_norm(R.from(x), R.from(rm0), R.from(rv0), R.from(w), R.from(b), true,
          momentum)
        for _, dt in ipairs({ "float64", "float32" }) do
          local rm, rv = rm0:to(dt):clone(), rv0:to(dt):clone() -- to() returns rm0 itself for float64
          local y = ddp.batch_norm(x:to(dt), rm, rv, w:to(dt), b:to(dt), true, momentum)
          local tol = dt == "float64" and 1e-12 or TOL_NORM32[1]
          R.assert_close(y, ref, tol, tol, dt .. " output")
          list_close(rm, ref_rm, tol, dt .. " running_mean")
          list_close(rv, ref_rv, tol, dt .. " running_var")
        end
      end
    end)

    it(label .. " in evaluation mode uses and keeps the running statistics", function()
      local c = shape[2]
      local x = R.randn(shape, 2050 + i)
      local rm, rv = R.randn({ c }, 2060 + i), R.uniform({ c }, 0.5, 2, 2070 + i)
      local w, b = R.randn({ c }, 2080 + i), R.randn({ c }, 2090 + i)
      local ref = N.batch_norm(R.from(x), R.from(rm), R.from(rv), R.from(w), R.from(b), false)
      R.check_forward(function(p, m, v, q, r) return ddp.batch_norm(p, m, v, q, r, false) end, { x, rm, rv, w, b },
        ref, TOL_NORM32)
      R.check_forward(function(p, m, v) return ddp.batch_norm(p, m, v) end, { x, rm, rv },
        N.batch_norm(R.from(x), R.from(rm), R.from(rv), nil, nil, false), TOL_NORM32)
      list_close(rm, R.from(rm).v, 0, "running_mean")
    end)

    it(label .. " has finite-difference gradients in both modes (permuted input)", function()
      local c = shape[2]
      local perm, pshape = {}, {}
      for d = #shape, 1, -1 do
        perm[#perm + 1] = d
        pshape[#pshape + 1] = shape[d]
      end
      local x = R.randn(pshape, 2100 + i):requires_grad_()
      local w, b = R.randn({ c }, 2110 + i):requires_grad_(), R.randn({ c }, 2120 + i):requires_grad_()
      local rm, rv = R.randn({ c }, 2130 + i), R.uniform({ c }, 0.5, 2, 2140 + i)
      gc.assert_gradcheck(function(p, q, r) return ddp.batch_norm(p:permute(perm), nil, nil, q, r, true) end,
        { x, w, b })
      gc.assert_gradcheck(function(p, q, r) return ddp.batch_norm(p:permute(perm), rm, rv, q, r, false) end,
        { x, w, b })
      gc.assert_gradcheck(function(p) return ddp.batch_norm(p:permute(perm), nil, nil, nil, nil, true) end, { x })
    end)
  end

  it("works with only a weight, or only a bias", function()
    local x, w = R.randn({ 4, 3 }, 2150), R.randn({ 3 }, 2151)
    R.check_forward(function(p, q) return ddp.batch_norm(p, nil, nil, q, nil, true) end, { x, w },
      N.batch_norm(R.from(x), nil, nil, R.from(w), nil, true), TOL_NORM32)
    R.check_forward(function(p, q) return ddp.batch_norm(p, nil, nil, nil, q, true) end, { x, w },
      N.batch_norm(R.from(x), nil, nil, nil, R.from(w), true), TOL_NORM32)
    gc.assert_gradcheck(function(p, q) return ddp.batch_norm(p, nil, nil, nil, q, true, 0.1, 0.01) end,
      { x:clone():requires_grad_(), w:clone():requires_grad_() })
  end)

  it("names channel mismatches of weight, bias and running statistics", function()
    local x = ddp.ones(4, 3, 2)
    R.assert_error(function() return ddp.batch_norm(x, nil, nil, ddp.ones(4)) end, "weight", "[4]", "3 channels",
      "[4, 3, 2]")
    R.assert_error(function() return ddp.batch_norm(x, ddp.zeros(2), ddp.ones(2)) end, "running_mean", "[2]")
    R.assert_error(function() return ddp.batch_norm(x, nil, nil, nil, ddp.ones(3, 1), true) end, "bias", "[3, 1]")
  end)

  it("names impossible inputs and modes", function()
    R.assert_error(function() return ddp.batch_norm(ddp.ones(3), nil, nil, nil, nil, true) end, "[N, C, ...]", "[3]")
    R.assert_error(function() return ddp.batch_norm(ddp.ones(1, 3), nil, nil, nil, nil, true) end,
      "more than 1 value per channel", "[1, 3]")
    R.assert_error(function() return ddp.batch_norm(ddp.ones(4, 3)) end, "evaluation mode", "running_mean")
    R.assert_error(function() return ddp.batch_norm(ddp.ones(4, 3), ddp.zeros(3), nil, nil, nil, true) end,
      "together")
    R.assert_error(function() return ddp.batch_norm(ddp.ones(4, 3):long(), nil, nil, nil, nil, true) end, "int64")
    R.assert_error(function()
      return ddp.batch_norm(ddp.ones(4, 3), nil, nil, ddp.ones(3, { dtype = "float64" }), nil, true)
    end, "float64", "float32")
    R.assert_error(function() return ddp.batch_norm(ddp.ones(4, 3), nil, nil, nil, nil, 1) end, "boolean expected")
    R.assert_error(function() return ddp.batch_norm(ddp.ones(4, 3), nil, nil, nil, nil, true, "x") end,
      "number expected", "string")
  end)
end)

describe("batch_norm pieces (SyncBatchNorm)", function()
  -- one batch of 6, split over 3 simulated replicas of 3, 1 and 2 samples
  local x = R.randn({ 6, 3, 2, 2 }, 2200, 1.5) + 0.5
  local parts = { x:narrow(1, 1, 3), x:narrow(1, 4, 1), x:narrow(1, 5, 2) }
  local w, b = R.randn({ 3 }, 2201), R.randn({ 3 }, 2202)
  local gy = R.randn({ 6, 3, 2, 2 }, 2203)

  it("batch_norm_stats gives each channel's mean, biased variance and count", function()
    local mean, var, count = ddp.core.batch_norm_stats(x)
    local rm, rv, rc = N.channel_stats(R.from(x))
    list_close(mean, rm, 1e-12, "mean")
    list_close(var, rv, 1e-12, "var")
    assert.are.equal(rc, count)
    local m32, v32 = ddp.core.batch_norm_stats(x:float())
    list_close(m32, rm, 1e-6, "float32 mean")
    list_close(v32, rv, 1e-5, "float32 var")
  end)

  it("gathered replica statistics, update and elemt reproduce single-process batch_norm", function()
    local means, vars, counts = {}, {}, {}
    for r, p in ipairs(parts) do means[r], vars[r], counts[r] = ddp.core.batch_norm_stats(p) end
    local mean, var, total = ddp.core.batch_norm_gather_stats(ddp.stack(means), ddp.stack(vars), counts)
    assert.are.equal(24, total)
    local rm, rv = ddp.zeros(3, { dtype = "float64" }), ddp.ones(3, { dtype = "float64" })
    ddp.core.batch_norm_update_stats(rm, rv, mean, var, total, 0.1)
    local y = ddp.core.batch_norm_elemt(x, mean, ddp.core.batch_norm_invstd(var, 1e-5), w, b)
    local rm1, rv1 = ddp.zeros(3, { dtype = "float64" }), ddp.ones(3, { dtype = "float64" })
    local y1 = ddp.batch_norm(x, rm1, rv1, w, b, true, 0.1, 1e-5)
    R.assert_close(y, R.from(y1), 1e-12, 1e-12, "output")
    R.assert_close(rm, R.from(rm1), 1e-12, 1e-12, "running_mean")
    R.assert_close(rv, R.from(rv1), 1e-12, 1e-12, "running_var")
    -- counts as a tensor too
    local m2 = ddp.core.batch_norm_gather_stats(ddp.stack(means), ddp.stack(vars), ddp.tensor(counts))
    R.assert_close(m2, R.from(mean), 1e-15, 0, "mean from a counts tensor")
  end)

  it("all-reduced backward sums give single-process input, weight and bias gradients", function()
    local xl = x:clone():requires_grad_()
    local wl, bl = w:clone():requires_grad_(), b:clone():requires_grad_()
    ddp.batch_norm(xl, nil, nil, wl, bl, true):backward(gy)
    local mean, var = ddp.core.batch_norm_stats(x)
    local invstd = ddp.core.batch_norm_invstd(var, 1e-5)
    local gys = { gy:narrow(1, 1, 3), gy:narrow(1, 4, 1), gy:narrow(1, 5, 2) }
    local s1, s2 = ddp.zeros(3, { dtype = "float64" }), ddp.zeros(3, { dtype = "float64" })
    for r, p in ipairs(parts) do -- the all-reduce
      local a, c = ddp.core.batch_norm_backward_reduce(gys[r], p, mean, invstd)
      s1:add_(a)
      s2:add_(c)
    end
    R.assert_close(s1, R.from(bl.grad), 1e-12, 1e-12, "bias gradient")
    R.assert_close(s2, R.from(wl.grad), 1e-12, 1e-12, "weight gradient")
    for r, p in ipairs(parts) do
      local gx = ddp.core.batch_norm_backward_elemt(gys[r], p, mean, invstd, w, s1, s2, 24)
      local start = ({ 1, 4, 5 })[r]
      R.assert_close(gx, R.from(xl.grad:narrow(1, start, p:size(1))), 1e-12, 1e-12, "input gradient of replica " .. r)
    end
  end)

  it("names mismatched piece arguments", function()
    local m, v = ddp.zeros(3), ddp.ones(3)
    R.assert_error(function() return ddp.core.batch_norm_gather_stats(ddp.zeros(2, 3), ddp.zeros(2, 4), { 1, 1 }) end,
      "[2, 3]", "[2, 4]")
    R.assert_error(function() return ddp.core.batch_norm_gather_stats(ddp.zeros(2, 3), ddp.zeros(2, 3), { 1 }) end,
      "one count per replica", "[1]")
    R.assert_error(function() return ddp.core.batch_norm_gather_stats(ddp.zeros(2, 3), ddp.zeros(2, 3), { 0, 0 }) end,
      "counts add up to 0")
    R.assert_error(function() return ddp.core.batch_norm_gather_stats(ddp.zeros(1, 3), ddp.zeros(1, 3), { "a" }) end,
      "count 1", "string")
    R.assert_error(function() return ddp.core.batch_norm_elemt(ddp.ones(2, 4), m, v) end, "mean", "[3]", "4 channels")
    R.assert_error(function() return ddp.core.batch_norm_backward_reduce(ddp.ones(2, 4), ddp.ones(2, 3), m, v) end,
      "[2, 4]", "[2, 3]")
    R.assert_error(function() return ddp.core.batch_norm_update_stats(ddp.zeros(3), ddp.ones(3), ddp.zeros(2), v, 4) end,
      "[2]")
    R.assert_error(function()
      return ddp.core.batch_norm_backward_elemt(ddp.ones(2, 3), ddp.ones(2, 3), m, v, nil, m, m, 0)
    end, "count", "0")
  end)
end)

describe("layer_norm", function()
  local cases = {
    { "over the last dim", { 3, 5 }, 5 },
    { "over the last two dims", { 2, 3, 4 }, { 3, 4 } },
    { "over every dim", { 2, 3 }, { 2, 3 } },
  }
  for i, c in ipairs(cases) do
    local label, shape, ns = c[1], c[2], c[3]
    local nd = type(ns) == "table" and #ns or 1
    local ashape = type(ns) == "table" and ns or { ns }
    it(label .. " matches the reference in float64 and float32, with and without affine", function()
      local x = R.randn(shape, 2300 + i, 3.0) - 1
      local w, b = R.randn(ashape, 2310 + i), R.randn(ashape, 2320 + i)
      R.check_forward(function(p, q, r) return ddp.layer_norm(p, ns, q, r) end, { x, w, b },
        N.layer_norm(R.from(x), nd, R.from(w), R.from(b)), TOL_NORM32)
      R.check_forward(function(p) return ddp.layer_norm(p, ns, nil, nil, 1e-3) end, { x },
        N.layer_norm(R.from(x), nd, nil, nil, 1e-3), TOL_NORM32)
    end)

    it(label .. " has finite-difference gradients (transposed input)", function()
      local tshape = { table.unpack(shape) }
      tshape[1], tshape[#tshape] = tshape[#tshape], tshape[1]
      local x = R.randn(tshape, 2330 + i):requires_grad_()
      local w, b = R.randn(ashape, 2340 + i):requires_grad_(), R.randn(ashape, 2350 + i):requires_grad_()
      gc.assert_gradcheck(function(p, q, r) return ddp.layer_norm(p:transpose(1, -1), ns, q, r) end, { x, w, b })
      gc.assert_gradcheck(function(p, q) return ddp.layer_norm(p:transpose(1, -1), ns, q) end, { x, w })
      gc.assert_gradcheck(function(p) return ddp.layer_norm(p:transpose(1, -1), ns) end, { x })
    end)
  end

  it("names a normalized_shape or affine shape that does not fit", function()
    local x = ddp.ones(2, 3)
    R.assert_error(function() return ddp.layer_norm(x, 4) end, "normalized_shape", "[4]", "[2, 3]")
    R.assert_error(function() return ddp.layer_norm(x, { 1, 2, 3 }) end, "[1, 2, 3]", "[2, 3]")
    R.assert_error(function() return ddp.layer_norm(x, 3, ddp.ones(2)) end, "weight", "[2]", "[3]")
    R.assert_error(function() return ddp.layer_norm(x, { 2, 3 }, nil, ddp.ones(6)) end, "bias", "[6]", "[2, 3]")
    R.assert_error(function() return ddp.layer_norm(x, "3") end, "normalized_shape", "string")
    R.assert_error(function() return ddp.layer_norm(x:long(), 3) end, "int64")
    R.assert_error(function() return ddp.layer_norm(x, 3, ddp.ones(3, { dtype = "float64" })) end, "float64")
  end)
end)
