-- sin and cos of float32 through the per-ISA kernel (cpu_vec_ew_t.h's v_sincos: double reduction by quarter
-- turns, fdlibm's kernels, libm's own call from |x| >= 2^19) against the float64 ops rounded once, on every kernel
-- set; the specials; the backwards.
local ddp = require "ddplua"
local core = ddp.core
local R = require "helpers.ref"
local gc = require "helpers.gradcheck"

local function ulps(a, b) -- largest difference in float32 ulps of b's magnitude
  local d = (a - b):abs() / (b:abs():clamp(1.1754944e-38, math.huge) * 1.1920929e-07)
  return d:max():item()
end

describe("sin and cos in float32", function()
  for _, isa in ipairs(R.cpu_kernel_sets()) do
    describe(isa .. ":", function()
      local prev
      setup(function() prev = core.set_cpu_kernels(isa) end)
      teardown(function() core.set_cpu_kernels(prev) end)
      it("are the float64 values rounded once below 2^19, within an ulp above", function()
        ddp.manual_seed(17)
        for _, scale in ipairs({ 1, 30, 1e4, 2e5 }) do
          for _, n in ipairs({ 1, 7, 8, 9, 31, 32, 33, 100003 }) do
            local x = ddp.randn(n) * scale
            local small = x:abs():lt(524288)
            for _, op in ipairs({ "sin", "cos" }) do
              local got, want = x[op](x), x:double()[op](x:double()):float()
              local bad = (got:ne(want):float() * small:float()):sum():item()
              assert.are.equal(0, bad, string.format("%s, scale %g, n %d: %d values differ", op, scale, n, bad))
            end
          end
        end
        local big = ddp.randn(1000) * 1e30
        assert.is_true(ulps(big:sin(), big:double():sin():float()) <= 1)
        assert.is_true(ulps(big:cos(), big:double():cos():float()) <= 1)
        -- a strided view (chunks gathered into the same kernel)
        local m = ddp.randn(40, 3) * 5
        local col = m:narrow(2, 2, 1)
        assert.are.equal(0, col:cos():ne(col:double():cos():float()):sum():item())
      end)
      it("keep the specials: NaN, inf, signed zero, tiny values", function()
        local x = ddp.tensor({ 0 / 0, math.huge, -math.huge, -0.0, 0.0, -1e-30, 1e-30, 1e38, -3.4e38 }, { dtype = "float32" })
        local s, c = x:sin():totable(), x:cos():totable()
        for k = 1, 3 do assert.is_true(s[k] ~= s[k] and c[k] ~= c[k], "NaN at " .. k) end
        assert.are.equal(-math.huge, 1 / s[4]) -- sin(-0) = -0
        assert.are.equal(math.huge, 1 / s[5])
        assert.are.same({ 1, 1, 1, 1 }, { c[4], c[5], c[6], c[7] })
        assert.is_true(math.abs(s[6] + 1e-30) < 1e-36 and math.abs(s[7] - 1e-30) < 1e-36)
        local top = x:narrow(1, 8, 2) -- libm's exact reduction of the largest floats
        R.assert_close(top:sin(), R.from(top:double():sin()), 1e-7, 1e-6, "sin of the largest floats")
      end)
      it("have the backward of the float64 op, rounded", function()
        local x = (ddp.randn(1000) * 10):requires_grad_()
        local g = ddp.randn(1000)
        x:sin():backward(g)
        local want = (g:double() * x:detach():double():cos()):float()
        assert.is_true(ulps(x.grad, want) <= 1, "sin backward")
        x.grad = nil
        x:cos():backward(g)
        want = (g:double() * -x:detach():double():sin()):float()
        assert.is_true(ulps(x.grad, want) <= 1, "cos backward")
        gc.assert_gradcheck(function(t) return t:sin() * t:cos() end, { gc.smooth_input({ 3, 5 }, 31) })
      end)
    end)
  end
end)
