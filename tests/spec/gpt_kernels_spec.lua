-- The float32 kernels the GPT example leans on, against float64 on every
-- kernel set this CPU has (R.cpu_kernel_sets): GELU forward and backward
-- through the one-exp Phi/phi of vmath.h (dp_vgelu_phif) on a dense sweep
-- of [-14, 14] with +-inf, NaN and signed zeros, and layer_norm's rows in
-- float lanes (float sums over 1024-value blocks, deviations from the
-- float-rounded mean corrected in double) at the model's 128 columns, a
-- tail (37), across the 1024-value blocks (1040, 2053), and rows with a
-- large common offset, where the deviations must not cancel.
local ddp = require "ddplua"
local R = require "helpers.ref"
local core = ddp.core

local function close(got32, ref64, atol, rtol, what)
  R.assert_close(got32, R.from(ref64:float()), atol, rtol, what)
end

for _, isa in ipairs(R.cpu_kernel_sets()) do
  describe("GPT kernels on " .. isa .. ":", function()
    local prev
    setup(function() prev = core.set_cpu_kernels(isa) end)
    teardown(function() core.set_cpu_kernels(prev) end)

    it("GELU and its gradient match float64 across [-14, 14] and at the special values", function()
      local t = {}
      for i = 0, 28000 do t[#t + 1] = -14 + i * 0.001 end
      for _, v in ipairs({ 0, -0.0, 1e-30, -1e-30, 1e30, -1e30, -0.7517915 }) do t[#t + 1] = v end
      local x64 = ddp.tensor(t, { dtype = "float64" })
      local gy64 = R.randn({ #t }, 21, 1)
      local a, b = x64:clone():requires_grad_(), x64:float():requires_grad_()
      local ya, yb = a:gelu(), b:gelu()
      close(yb, ya:detach(), 1e-7, 1e-6, "gelu")
      ya:backward(gy64)
      yb:backward(gy64:float())
      close(b.grad, a.grad, 1e-7, 1e-6, "gelu gradient")
      -- the tail keeps its relative accuracy, where x (1 + erf) cancels (in float64 too: 2% off at -8): against
      -- x erfc(-x / sqrt 2) / 2 (Python's math.erfc)
      local tail = ddp.tensor({ -6, -8, -10, -12 }, { dtype = "float32" })
      local exact = ddp.tensor({ -5.919525870226207e-09, -4.9767684594174555e-15, -7.619853024160593e-23,
        -2.1317785344932424e-32 }, { dtype = "float64" })
      close(tail:gelu(), exact, 0, 2e-6, "gelu's negative tail, relative")
      local s = ddp.tensor({ math.huge, -math.huge, 0 / 0, -0.0 }, { dtype = "float32" }):requires_grad_()
      local y = s:gelu()
      assert.equal(math.huge, y[1]:item())
      assert.is_true(y[2]:item() ~= y[2]:item() and y[3]:item() ~= y[3]:item()) -- -inf * 0 and NaN: NaN
      assert.equal(-math.huge, 1 / y[4]:item()) -- -0 stays -0
      y:backward(ddp.ones(4))
      local g = s.grad:totable()
      assert.is_true(g[1] ~= g[1] and g[2] ~= g[2] and g[3] ~= g[3]) -- +-inf * phi(+-inf) = inf * 0, as PyTorch
      assert.equal(0.5, g[4])
    end)

    it("layer_norm rows match float64, across the float blocks and with a large offset", function()
      for _, c in ipairs({ { 5, 128, 0 }, { 3, 37, 0 }, { 3, 1040, 0 }, { 2, 2053, 0 }, { 4, 128, 1e3 } }) do
        local rows, n, off = c[1], c[2], c[3]
        local x64 = R.randn({ rows, n }, 31, 1):add(off)
        local w64, b64 = R.randn({ n }, 32, 1), R.randn({ n }, 33, 1)
        local gy64 = R.randn({ rows, n }, 34, 1)
        local function run(x, w, b, gy)
          x, w, b = x:clone():requires_grad_(), w:clone():requires_grad_(), b:clone():requires_grad_()
          local y = ddp.layer_norm(x, n, w, b)
          y:backward(gy)
          return y:detach(), x.grad, w.grad, b.grad
        end
        local A = { run(x64, w64, b64, gy64) }
        local B = { run(x64:float(), w64:float(), b64:float(), gy64:float()) }
        -- at offset 1e3 float32 holds x to 6e-5, which bounds what any float kernel can give
        local tol = off > 0 and 2e-3 or 2e-5
        for k, what in ipairs({ "layer_norm", "its input gradient", "weight gradient", "bias gradient" }) do
          close(B[k], A[k], tol, tol, string.format("%s at %d x %d, offset %g", what, rows, n, off))
        end
      end
    end)
  end)
end
