-- conv2d, max_pool2d, avg_pool2d: forward against plain-Lua float64 loops
-- (float64 and float32 paths), gradients against finite differences,
-- chunked batches against per-image results, and bad arguments.
local ddp = require "ddplua"
local gc = require "helpers.gradcheck"
local R = require "helpers.ref"
local N = require "helpers.ref_nn"

-- float32 sums of up to ~50 products of size ~1
local TOL_CONV32 = { 1e-4, 1e-5 }

local conv_cases = {
  -- name, x shape, w shape, stride, padding
  { "3x3, stride 1, no padding", { 2, 3, 6, 5 }, { 4, 3, 3, 3 }, 1, 0 },
  { "3x3, stride 2, padding 1", { 2, 2, 7, 6 }, { 3, 2, 3, 3 }, 2, 1 },
  { "3x2 kernel, stride {1, 2}, padding {2, 1}", { 1, 2, 5, 6 }, { 2, 2, 3, 2 }, { 1, 2 }, { 2, 1 } },
  { "1x1 (the GEMM-only path)", { 2, 3, 4, 5 }, { 4, 3, 1, 1 }, 1, 0 },
  { "1x1, stride 2, padding 1", { 2, 3, 4, 5 }, { 2, 3, 1, 1 }, 2, 1 },
  { "kernel as large as the padded input", { 1, 1, 3, 3 }, { 2, 1, 5, 5 }, 1, 1 },
  -- one output position (the single-GEMM path): every input pixel, part
  -- of the taps; part of the input; only padding under the window
  { "one output: 3x3, padding 1 over 1x1", { 3, 5, 1, 1 }, { 4, 5, 3, 3 }, 1, 1 },
  { "one output: 3x3, stride 2, padding 1 over 2x2", { 2, 3, 2, 2 }, { 4, 3, 3, 3 }, 2, 1 },
  { "one output: 4x3 kernel, padding {1, 0} over 2x3", { 2, 2, 2, 3 }, { 3, 2, 4, 3 }, 1, { 1, 0 } },
  { "one output: 1x1, stride {2, 3} over 2x3 (a corner of the input)", { 2, 3, 2, 3 }, { 2, 3, 1, 1 }, { 2, 3 }, 0 },
  { "one output: 2x2, stride 3, padding 1 over 3x2", { 2, 2, 3, 2 }, { 3, 2, 2, 2 }, 3, 1 },
  { "one output over padding only", { 1, 2, 1, 1 }, { 2, 2, 3, 3 }, 5, 3 },
  -- inputs with no more pixels than taps (the unrolled-weights GEMM)
  { "small input: 3x3, padding 1 over 2x2", { 3, 4, 2, 2 }, { 5, 4, 3, 3 }, 1, 1 },
  { "small input: 3x3, padding 1 over 1x2", { 2, 3, 1, 2 }, { 2, 3, 3, 3 }, 1, 1 },
  { "small input: 2x3 kernel, padding {0, 1} over 2x2", { 2, 2, 2, 2 }, { 3, 2, 2, 3 }, 1, { 0, 1 } },
  { "small input: 3x2 kernel over 1x3, each window missing a column", { 2, 2, 1, 3 }, { 3, 2, 3, 2 }, 1, { 1, 0 } },
  { "small input: 2x3 kernel over 3x1, each window missing a row", { 2, 2, 3, 1 }, { 3, 2, 2, 3 }, 1, { 0, 1 } },
}

local function pair(v) return type(v) == "table" and v or { v, v } end

describe("conv2d", function()
  for i, c in ipairs(conv_cases) do
    local name, xs, ws, stride, pad = c[1], c[2], c[3], c[4], c[5]
    it(name .. " matches the reference in float64 and float32, with and without bias", function()
      local x, w, b = R.randn(xs, 1000 + i), R.randn(ws, 1100 + i), R.randn({ ws[1] }, 1200 + i)
      local X, W, B = R.from(x), R.from(w), R.from(b)
      R.check_forward(function(p, q, r) return ddp.conv2d(p, q, r, stride, pad) end, { x, w, b },
        N.conv2d(X, W, B, pair(stride), pair(pad)), TOL_CONV32)
      R.check_forward(function(p, q) return ddp.conv2d(p, q, nil, stride, pad) end, { x, w },
        N.conv2d(X, W, nil, pair(stride), pair(pad)), TOL_CONV32)
    end)

    it(name .. " has finite-difference gradients for input, weight and bias", function()
      local x = R.randn(xs, 1300 + i):requires_grad_()
      local w, b = R.randn(ws, 1400 + i):requires_grad_(), R.randn({ ws[1] }, 1500 + i):requires_grad_()
      gc.assert_gradcheck(function(p, q, r) return ddp.conv2d(p, q, r, stride, pad) end, { x, w, b })
    end)
  end

  it("one output position and small inputs: float32 at 1 and 2 threads matches float64 (ResNet's last stages)",
    function()
    local prev = ddp.get_num_threads()
    -- x, w, stride, output size
    for i, c in ipairs({ { { 9, 128, 1, 1 }, { 128, 128, 3, 3 }, 1, 1 }, { { 9, 64, 2, 2 }, { 128, 64, 3, 3 }, 2, 1 },
      { { 9, 64, 2, 2 }, { 64, 64, 3, 3 }, 1, 2 } }) do
      local x64, w64 = R.randn(c[1], 1700 + i):requires_grad_(), R.randn(c[2], 1710 + i):requires_grad_()
      local b64 = R.randn({ c[2][1] }, 1720 + i):requires_grad_()
      local gy = R.randn({ c[1][1], c[2][1], c[4], c[4] }, 1730 + i)
      ddp.conv2d(x64, w64, b64, c[3], 1):backward(gy)
      R.check_forward(function(p, q, r) return ddp.conv2d(p, q, r, c[3], 1) end, { x64, w64, b64 },
        N.conv2d(R.from(x64), R.from(w64), R.from(b64), { c[3], c[3] }, { 1, 1 }), TOL_CONV32)
      for _, threads in ipairs({ 1, 2 }) do
        ddp.set_num_threads(threads)
        local x = x64:detach():float():requires_grad_()
        local w, b = w64:detach():float():requires_grad_(), b64:detach():float():requires_grad_()
        local calls = ddp.core._onednn_calls()
        local y = ddp.conv2d(x, w, b, c[3], 1)
        y:backward(gy:float())
        ddp.set_num_threads(prev)
        local what = string.format("case %d, %d threads: ", i, threads)
        assert.equal(calls, ddp.core._onednn_calls(), what .. "a GEMM, not a oneDNN convolution")
        R.assert_close(y, R.from(ddp.conv2d(x64:detach(), w64:detach(), b64:detach(), c[3], 1)), 1e-4, 1e-5,
          what .. "output")
        R.assert_close(x.grad, R.from(x64.grad), 1e-4, 1e-5, what .. "input gradient")
        R.assert_close(w.grad, R.from(w64.grad), 1e-4, 1e-5, what .. "weight gradient")
        R.assert_close(b.grad, R.from(b64.grad), 1e-4, 1e-5, what .. "bias gradient")
      end
    end
  end)

  it("takes strided inputs and weights (permuted views)", function()
    local x, w = R.randn({ 2, 5, 6, 3 }, 1601), R.randn({ 3, 3, 2, 4 }, 1602)
    local ref = N.conv2d(R.from(x:permute(1, 4, 2, 3):contiguous()), R.from(w:permute(4, 1, 2, 3):contiguous()),
      nil, { 1, 1 }, { 1, 1 })
    R.check_forward(function(p, q) return ddp.conv2d(p:permute(1, 4, 2, 3), q:permute(4, 1, 2, 3), nil, 1, 1) end,
      { x, w }, ref, TOL_CONV32)
    gc.assert_gradcheck(function(p, q) return ddp.conv2d(p:permute(1, 4, 2, 3), q:permute(4, 1, 2, 3), nil, 2, 1) end,
      { R.randn({ 1, 4, 5, 2 }, 1603):requires_grad_(), R.randn({ 2, 3, 2, 3 }, 1604):requires_grad_() })
  end)

  it("accepts an unbatched [C, H, W] input", function()
    local x, w, b = R.randn({ 2, 5, 5 }, 1605), R.randn({ 3, 2, 3, 3 }, 1606), R.randn({ 3 }, 1607)
    local ref = N.conv2d(R.from(x:unsqueeze(1)), R.from(w), R.from(b), { 1, 1 }, { 1, 1 })
    ref.shape = { 3, 5, 5 }
    R.check_forward(function(p, q, r) return ddp.conv2d(p, q, r, 1, 1) end, { x, w, b }, ref, TOL_CONV32)
    gc.assert_gradcheck(function(p, q) return ddp.conv2d(p, q, nil, 2) end,
      { R.randn({ 2, 4, 4 }, 1608):requires_grad_(), R.randn({ 2, 2, 2, 2 }, 1609):requires_grad_() })
  end)

  it("computes only the gradients asked for, and handles an empty batch", function()
    local x, w, b = R.randn({ 2, 2, 5, 4 }, 1620), R.randn({ 3, 2, 3, 3 }, 1621), R.randn({ 3 }, 1622)
    local gy = R.randn({ 2, 3, 3, 2 }, 1623)
    local xa, wa, ba = x:clone():requires_grad_(), w:clone():requires_grad_(), b:clone():requires_grad_()
    ddp.conv2d(xa, wa, ba, 1, 0):backward(gy)
    local xo = x:clone():requires_grad_()
    ddp.conv2d(xo, w, b):backward(gy)
    R.assert_close(xo.grad, R.from(xa.grad), 0, 0, "input gradient alone")
    local wo = w:clone():requires_grad_()
    ddp.conv2d(x, wo, nil):backward(gy)
    R.assert_close(wo.grad, R.from(wa.grad), 0, 0, "weight gradient alone")
    local x0, w0 = ddp.zeros(0, 2, 5, 4, { dtype = "float64" }):requires_grad_(), w:clone():requires_grad_()
    local y0 = ddp.conv2d(x0, w0, ba:detach():clone():requires_grad_(), 1, 1)
    assert.are.same({ 0, 3, 5, 4 }, y0:size())
    y0:sum():backward()
    R.assert_close(w0.grad, R.array({ 3, 2, 3, 3 }, 0), 0, 0, "weight gradient of an empty batch")
  end)

  it("gives the same outputs and gradients when the batch is split into column chunks", function()
    -- 58 images whose float64 columns take 72*1024*8 bytes each: more
    -- than the 32 MiB column budget, so forward and backward run in chunks
    local x = R.randn({ 58, 8, 32, 32 }, 1610):requires_grad_()
    local w = R.randn({ 4, 8, 3, 3 }, 1611):requires_grad_()
    local b = R.randn({ 4 }, 1612):requires_grad_()
    local gy = R.randn({ 58, 4, 32, 32 }, 1613)
    local y = ddp.conv2d(x, w, b, 1, 1)
    y:backward(gy)
    local gw_sum = ddp.zeros(4, 8, 3, 3, { dtype = "float64" })
    for _, n in ipairs({ 1, 56, 57, 58 }) do
      local xn = x:detach():narrow(1, n, 1):clone():requires_grad_()
      local wn = w:detach():clone():requires_grad_()
      local yn = ddp.conv2d(xn, wn, b:detach(), 1, 1)
      yn:backward(gy:narrow(1, n, 1))
      R.assert_close(y:narrow(1, n, 1), R.from(yn), 1e-12, 1e-12, "image " .. n)
      R.assert_close(x.grad:narrow(1, n, 1), R.from(xn.grad), 1e-12, 1e-12, "input gradient of image " .. n)
    end
    for n = 1, 58 do
      local wn = w:detach():clone():requires_grad_()
      ddp.conv2d(x:detach():narrow(1, n, 1), wn, nil, 1, 1):backward(gy:narrow(1, n, 1))
      gw_sum:add_(wn.grad)
    end
    R.assert_close(w.grad, R.from(gw_sum), 1e-9, 1e-10, "weight gradient")
    R.assert_close(b.grad, R.sum(R.from(gy), { 1, 3, 4 }), 1e-9, 1e-10, "bias gradient")
  end)

  it("names both shapes when the channels differ", function()
    R.assert_error(function() return ddp.conv2d(ddp.ones(2, 3, 5, 5), ddp.ones(4, 2, 3, 3)) end, "3 channels",
      "[2, 3, 5, 5]", "[4, 2, 3, 3]", "expects 2")
  end)

  it("names bad weight and bias shapes, dtypes and devices", function()
    R.assert_error(function() return ddp.conv2d(ddp.ones(1, 2, 5, 5), ddp.ones(4, 2, 3)) end, "weight",
      "4-dimensional", "[4, 2, 3]")
    R.assert_error(function() return ddp.conv2d(ddp.ones(2, 5, 5, 1, 1), ddp.ones(4, 2, 3, 3)) end,
      "[2, 5, 5, 1, 1]")
    R.assert_error(function() return ddp.conv2d(ddp.ones(1, 2, 5, 5), ddp.ones(4, 2, 3, 3), ddp.ones(3)) end,
      "bias", "[3]", "[4]")
    R.assert_error(function()
      return ddp.conv2d(ddp.ones(1, 2, 5, 5), ddp.ones(4, 2, 3, 3, { dtype = "float64" }))
    end, "float32", "float64")
    R.assert_error(function() return ddp.conv2d(ddp.tensor({ { { { 1 } } } }), ddp.tensor({ { { { 1 } } } })) end,
      "floating point", "int64")
  end)

  it("names a kernel that does not fit and bad stride / padding", function()
    R.assert_error(function() return ddp.conv2d(ddp.ones(1, 1, 3, 3), ddp.ones(1, 1, 5, 5)) end, "5x5",
      "does not fit", "3x3")
    R.assert_error(function() return ddp.conv2d(ddp.ones(1, 1, 3, 3), ddp.ones(1, 1, 3, 3), nil, 0) end, "stride",
      ">= 1", "0")
    R.assert_error(function() return ddp.conv2d(ddp.ones(1, 1, 3, 3), ddp.ones(1, 1, 3, 3), nil, 1, -1) end,
      "padding", "-1")
  end)

  it("names wrong Lua argument types", function()
    R.assert_error(function() return ddp.conv2d("x", ddp.ones(1, 1, 1, 1)) end, "Tensor expected", "string")
    R.assert_error(function() return ddp.conv2d(ddp.ones(1, 1, 3, 3), ddp.ones(1, 1, 1, 1), 3) end,
      "Tensor expected", "number")
    R.assert_error(function() return ddp.conv2d(ddp.ones(1, 1, 3, 3), ddp.ones(1, 1, 1, 1), nil, "2") end,
      "stride", "string")
    R.assert_error(function() return ddp.conv2d(ddp.ones(1, 1, 3, 3), ddp.ones(1, 1, 1, 1), nil, { 1, 2, 3 }) end,
      "stride", "2 entries", "3")
    R.assert_error(function() return ddp.conv2d(ddp.ones(1, 1, 3, 3), ddp.ones(1, 1, 1, 1), nil, 1.5) end, "stride",
      "1.5")
  end)
end)

local pool_cases = {
  -- name, x shape, kernel, stride (nil: the kernel), padding
  { "2x2 (stride = kernel)", { 2, 3, 6, 4 }, 2, nil, nil },
  { "3x3, stride 2, padding 1", { 1, 2, 7, 6 }, 3, 2, 1 },
  { "3x2 kernel, stride {1, 2}, padding {1, 0}", { 2, 1, 5, 7 }, { 3, 2 }, { 1, 2 }, { 1, 0 } },
  { "overlapping 3x3 windows, stride 1", { 1, 2, 5, 5 }, 3, 1, 0 },
  { "unbatched [C, H, W]", { 2, 5, 4 }, 2, { 1, 2 }, 1 },
}

for _, is_max in ipairs({ true, false }) do
  local name = is_max and "max_pool2d" or "avg_pool2d"
  describe(name, function()
    for i, c in ipairs(pool_cases) do
      local label, xs, k, s, p = c[1], c[2], c[3], c[4], c[5]
      it(label .. " matches the reference in float64 and float32", function()
        local x = R.randn(xs, 1700 + i)
        R.check_forward(function(t) return ddp[name](t, k, s, p) end, { x },
          N[name](R.from(x), pair(k), s and pair(s), p and pair(p)))
      end)

      it(label .. " has finite-difference gradients (through a transposed view)", function()
        local shape = { table.unpack(xs) }
        local nd = #shape
        shape[nd - 1], shape[nd] = shape[nd], shape[nd - 1]
        gc.assert_gradcheck(function(t) return ddp[name](t:transpose(-1, -2), k, s, p) end,
          { R.randn(shape, 1800 + i):requires_grad_() })
      end)
    end

    it("names a kernel that does not fit, and bad padding and stride", function()
      local x = ddp.ones(1, 1, 3, 3)
      R.assert_error(function() return ddp[name](x, 4) end, name, "4x4", "does not fit", "3x3")
      R.assert_error(function() return ddp[name](x, 2, 1, 2) end, name, "padding", "half")
      R.assert_error(function() return ddp[name](x, 2, 0) end, name, "stride", "0x0")
      R.assert_error(function() return ddp[name](x, 0) end, name, "kernel size", "0x0")
    end)

    it("names bad inputs and argument types", function()
      R.assert_error(function() return ddp[name](ddp.ones(3, 3), 2) end, name, "[3, 3]")
      R.assert_error(function() return ddp[name](ddp.ones(1, 3, 3):long(), 2) end, name, "int64")
      R.assert_error(function() return ddp[name](ddp.ones(1, 3, 3)) end, name, "kernel_size")
      R.assert_error(function() return ddp[name](ddp.ones(1, 3, 3), "2") end, "kernel_size", "string")
      R.assert_error(function() return ddp[name](ddp.ones(1, 3, 3), { 2 }) end, "kernel_size", "2 entries")
      R.assert_error(function() return ddp[name]({}, 2) end, "Tensor expected", "table")
    end)
  end)
end

describe("max_pool2d specifics", function()
  it("propagates NaN and routes each gradient to the first maximum of its window", function()
    local nan = 0 / 0
    for _, dt in ipairs({ "float64", "float32" }) do
      local x = ddp.tensor({ { { { 1.0, nan }, { 3.0, 2.0 } } } }, { dtype = dt })
      local y = ddp.max_pool2d(x, 2):item()
      assert.is_true(y ~= y, dt)
    end
    local t = ddp.tensor({ { { { 5.0, 5.0 }, { 1.0, 2.0 } } } }, { dtype = "float64", requires_grad = true })
    ddp.max_pool2d(t, 2):sum():backward()
    assert.are.same({ { { { 1.0, 0.0 }, { 0.0, 0.0 } } } }, t.grad:totable())
  end)

  it("accumulates the gradient of an element that wins several windows", function()
    local t = ddp.zeros(1, 1, 3, 3, { dtype = "float64" })
    ddp.no_grad(function() t[1][1][2][2] = 9 end)
    t:requires_grad_()
    ddp.max_pool2d(t, 2, 1):sum():backward()
    assert.are.equal(4, t.grad[1][1][2][2]:item())
    assert.are.equal(4, t.grad:sum():item())
  end)
end)

describe("a stride past the input", function()
  it("gives the one window a stride of the input's size gives, forward and backward, in every window op", function()
    -- a stride of math.maxinteger once overflowed the kernels' index arithmetic (max_pool2d saved an index outside
    -- its plane, and its backward failed); along an axis with one output position the stride takes no part
    local big = math.maxinteger
    local x = R.randn({ 2, 4, 5, 6 }, 3, 1):float()
    local w = R.randn({ 4, 2, 3, 3 }, 4, 1):float()
    local ops = {
      { "conv2d", function(t, s) return ddp.conv2d(t, w, nil, s, 1, 1, 2) end },
      { "conv2d dense", function(t, s) return ddp.conv2d(t, w:repeat_(1, 2, 1, 1), nil, { 1, s }, 1) end },
      { "max_pool2d", function(t, s) return ddp.max_pool2d(t, 2, { s, 2 }) end },
      { "avg_pool2d", function(t, s) return ddp.avg_pool2d(t, 3, s, 1) end },
      { "unfold", function(t, s) return ddp.nn.F.unfold(t, 2, 1, 0, s) end },
    }
    -- and against an independent reference: a 1x1 kernel with a stride past the width reads column 1 only (the
    -- stride set to 1 there once sent it down the path that takes the whole input as its columns)
    local w1 = R.randn({ 3, 4, 1, 1 }, 5, 1):float()
    for _, dt in ipairs({ "float32", "float64" }) do
      local xd, wd = x:to(dt), w1:to(dt)
      R.assert_close(ddp.conv2d(xd, wd, nil, { 1, 3 * x:size(4) }), R.from(ddp.conv2d(xd:narrow(4, 1, 1), wd)), 1e-6,
        1e-6, "1x1 conv2d with a stride past the width, " .. dt)
      R.assert_close(ddp.conv2d(xd, wd, nil, { big, 1 }), R.from(ddp.conv2d(xd:narrow(3, 1, 1), wd)), 1e-6, 1e-6,
        "1x1 conv2d with a stride past the height, " .. dt)
    end
    for _, op in ipairs(ops) do
      local a, b = x:clone():requires_grad_(), x:clone():requires_grad_()
      local ya, yb = op[2](a, big), op[2](b, 100)
      R.assert_close(ya, R.from(yb), 0, 0, op[1])
      ya:sum():backward()
      yb:sum():backward()
      R.assert_close(a.grad, R.from(b.grad), 0, 0, op[1] .. " gradient")
    end
  end)
end)
