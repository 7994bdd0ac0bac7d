-- linear's bias added in the GEMM's stores (backend gemm_bias, sgemm.h's
-- dp_sgemm_run_bias) against the unfused composition (matmul, then + bias):
-- bit for bit through every float32 GEMM implementation this CPU runs, at
-- shapes that leave partial tiles, that take the swapped (transposed-store)
-- orientation, that split k into blocks, with batch dims, on one thread and
-- two; against float64; NaN and infinities in the bias; the gradients as
-- before (finite differences).
local ddp = require "ddplua"
local gc = require "helpers.gradcheck"

-- (runs as the file loads: the implementation in use is put back)
local function impls()
  local names, current = {}, ddp.gemm_impl()
  for _, name in ipairs({ "avx512", "avx2", "blas" }) do
    if pcall(ddp.set_gemm_impl, name) then names[#names + 1] = name end
  end
  ddp.set_gemm_impl(current)
  return names
end

local function assert_same_bits(a, b, what)
  local x, y = a:double():reshape(-1):totable(), b:double():reshape(-1):totable()
  assert.equal(#x, #y, what)
  for i = 1, #x do
    if not ((x[i] ~= x[i] and y[i] ~= y[i]) or x[i] == y[i]) then
      error(string.format("%s: element %d: fused %.9g, unfused %.9g", what, i, x[i], y[i]), 2)
    end
  end
end

-- {rows, in, out}: partial tiles both ways; tiny m against k (swapped:
-- C stored transposed); k past the largest k block (1024); 1 x 1
local SHAPES = { { 37, 23, 53 }, { 3, 700, 29 }, { 2, 1500, 70 }, { 64, 64, 1024 }, { 1, 1, 1 }, { 9, 1100, 5 } }

describe("linear with the bias in the GEMM epilogue", function()
  local saved
  before_each(function() saved = ddp.gemm_impl() end)
  after_each(function()
    ddp.set_gemm_impl(saved)
    ddp.set_num_threads(1)
  end)

  for _, impl in ipairs(impls()) do
    for _, threads in ipairs({ 1, 2 }) do
      it(impl .. ", " .. threads .. " thread(s): equals matmul + bias bit for bit, and float64", function()
        ddp.set_gemm_impl(impl)
        ddp.set_num_threads(threads)
        ddp.manual_seed(3)
        for _, s in ipairs(SHAPES) do
          local rows, inf, outf = s[1], s[2], s[3]
          local x, w, b = ddp.randn(rows, inf), ddp.randn(outf, inf), ddp.randn(outf):mul(3)
          local what = string.format("%s [%d, %d] x [%d, %d]^T", impl, rows, inf, outf, inf)
          local y = ddp.linear(x, w, b)
          assert_same_bits(y, ddp.matmul(x, w:t()) + b, what)
          local y64 = ddp.linear(x:double(), w:double(), b:double())
          local err = (y:double() - y64):abs():max():item()
          assert.is_true(err <= 1e-5 * math.sqrt(inf) * 4, what .. ": " .. err .. " from float64")
        end
        -- batch dims, a strided (non-contiguous) bias, relu after the bias
        local x3, w, bb = ddp.randn(4, 5, 33), ddp.randn(17, 33), ddp.randn(34)
        local b = bb:narrow(1, 1, 17) -- contiguous view
        local bs = bb:view(17, 2):select(2, 1) -- stride 2
        local mm = ddp.matmul(x3:reshape(20, 33), w:t()):view(4, 5, 17) -- the linear's one GEMM over all rows
        assert_same_bits(ddp.linear(x3, w, b), mm + b, "3-d input")
        assert_same_bits(ddp.linear(x3, w, bs), mm + bs, "strided bias")
        assert_same_bits(ddp.nn.F.relu(ddp.linear(x3, w, b)), (mm + b):relu(), "then relu")
        -- NaN / inf in the bias reach their columns only
        local bt = ddp.zeros(17)
        bt[3], bt[5] = 0 / 0, math.huge
        local y = ddp.linear(ddp.ones(2, 33), ddp.ones(17, 33), bt)
        assert.is_true(y[1][3]:item() ~= y[1][3]:item())
        assert.equal(math.huge, y[2][5]:item())
        assert.equal(33, y[2][4]:item())
        -- no rows, and k = 0 (no GEMM: the bias alone)
        local empty = ddp.linear(ddp.zeros(0, 33), w, b)
        assert.same({ 0, 17 }, { empty:size(1), empty:size(2) })
        assert_same_bits(ddp.linear(ddp.zeros(3, 0), ddp.zeros(17, 0), b), b:expand(3, 17), "k = 0")
      end)
    end
  end

  it("bias gradient: the column sums of the output gradient, any row count, every kernel set", function()
    local R = require "helpers.ref"
    for _, isa in ipairs(R.cpu_kernel_sets()) do
      local prev = ddp.core.set_cpu_kernels(isa)
      for _, rows in ipairs({ 1, 3, 4, 5, 7, 700 }) do
        ddp.manual_seed(rows)
        local x, w = ddp.randn(rows, 9), ddp.randn(1001, 9)
        local b = ddp.randn(1001):requires_grad_()
        local g = ddp.randn(rows, 1001)
        ddp.linear(x, w, b):backward(g)
        local want = g:double():sum(1)
        local d = (b.grad:double() - want):abs():max():item()
        assert.is_true(d <= 1e-6 * math.sqrt(rows), isa .. " rows=" .. rows .. ": bias gradient off by " .. d)
      end
      ddp.core.set_cpu_kernels(prev)
    end
  end)

  it("keeps the gradients of x, weight and bias (finite differences, float64)", function()
    ddp.manual_seed(5)
    local x = ddp.randn(6, 7, { dtype = "float64" }):requires_grad_()
    local w = ddp.randn(5, 7, { dtype = "float64" }):requires_grad_()
    local b = ddp.randn(5, { dtype = "float64" }):requires_grad_()
    gc.assert_gradcheck(function(xx, ww, bb) return ddp.linear(xx, ww, bb) end, { x, w, b })
  end)

  it("float32 gradients through the fused forward match the unfused composition's", function()
    local function grads(fused)
      ddp.manual_seed(6)
      local x = ddp.randn(37, 23)
      local w, b = ddp.randn(53, 23):requires_grad_(), ddp.randn(53):requires_grad_()
      x:requires_grad_()
      local y = fused and ddp.linear(x, w, b) or (ddp.matmul(x, w:t()) + b)
      y:mul(y):sum():backward()
      return { x.grad, w.grad, b.grad }
    end
    local g1, g2 = grads(true), grads(false)
    for i = 1, 3 do
      local d = (g1[i] - g2[i]):abs():max():item()
      assert.is_true(d <= 1e-4 * (g2[i]:abs():max():item() + 1), "gradient " .. i .. " differs by " .. d)
    end
  end)
end)
