-- The float32 GEMM switch (ddp.gemm_impl / ddp.set_gemm_impl, DDPLUA_GEMM)
-- and float32 matmul/linear through every implementation this CPU runs,
-- against float64, forward and backward, on one thread and on several.
local ddp = require "ddplua"

local function max_abs_diff(a, b)
  return (a:to("float64") - b):abs():max():item()
end

-- float32 results of f(...) against f on float64 copies of the inputs
local function check_f32(f, tol, ...)
  local args32, args64 = {}, {}
  for i, t in ipairs({ ... }) do
    args32[i] = t:float()
    args64[i] = t:to("float64")
  end
  local got, want = f(table.unpack(args32)), f(table.unpack(args64))
  assert.are.equal("float32", got:dtype())
  local d = max_abs_diff(got, want)
  assert(d <= tol, ("float32 result differs from float64 by %g (tolerance %g)"):format(d, tol))
end

local function available_impls()
  local names = {}
  for _, name in ipairs({ "avx512", "avx2", "blas" }) do
    local ok, err = pcall(ddp.set_gemm_impl, name)
    if ok then
      names[#names + 1] = name
    else
      assert.matches("does not support the " .. name, err)
    end
  end
  return names
end

describe("float32 gemm implementations", function()
  local saved
  before_each(function() saved = ddp.gemm_impl() end)
  after_each(function()
    ddp.set_gemm_impl(saved)
    ddp.set_num_threads(1)
  end)

  it("reports the implementation in use and switches between them", function()
    assert.is_truthy(({ avx512 = true, avx2 = true, blas = true })[ddp.gemm_impl()])
    ddp.set_gemm_impl("blas")
    assert.are.equal("blas", ddp.gemm_impl())
    ddp.set_gemm_impl("own")
    assert.is_truthy(({ avx512 = true, avx2 = true, blas = true })[ddp.gemm_impl()])
  end)

  it("rejects an unknown implementation, naming it and the choices", function()
    local ok, err = pcall(ddp.set_gemm_impl, "fast")
    assert.is_false(ok)
    assert.matches("set_gemm_impl: 'fast' is not one of own, blas, avx512, avx2", err, 1, true)
  end)

  for _, threads in ipairs({ 1, 3 }) do
    it(("computes matmul and linear (forward, backward) like float64 on %d thread(s)"):format(threads), function()
      ddp.manual_seed(7)
      local x, w, b = ddp.randn(64, 300, { dtype = "float64" }), ddp.randn(200, 300, { dtype = "float64" }),
          ddp.randn(200, { dtype = "float64" })
      local g = ddp.randn(64, 200, { dtype = "float64" })
      for _, impl in ipairs(available_impls()) do
        ddp.set_gemm_impl(impl)
        ddp.set_num_threads(threads)
        check_f32(function(p, q) return p:matmul(q:transpose(1, 2)) end, 1e-3, x, w)  -- x @ W^T
        check_f32(function(p, q) return p:matmul(q) end, 1e-3, g, w)                  -- g @ W
        check_f32(function(p, q) return p:transpose(1, 2):matmul(q) end, 1e-3, g, x)  -- g^T @ x
        check_f32(function(p, q) return p:transpose(1, 2):matmul(q:transpose(1, 2)) end, 1e-3, w, g)
        check_f32(function(p, q, c) return ddp.linear(p, q, c, "relu") end, 1e-3, x, w, b)
        check_f32(function(p, q) return p:matmul(q:transpose(1, 2)) end, 1e-3, -- batched, broadcast operand
          ddp.randn(3, 17, 40, { dtype = "float64" }), ddp.randn(23, 40, { dtype = "float64" }))

        -- gradients of linear through the same GEMMs
        local function grads(dtype)
          local function leaf(t) return t:to(dtype):detach():clone():requires_grad_() end
          local xi, wi, bi = leaf(x), leaf(w), leaf(b)
          local y = ddp.linear(xi, wi, bi)
          ;(y * g:to(dtype)):sum():backward()
          return xi.grad, wi.grad, bi.grad
        end
        local gx32, gw32, gb32 = grads("float32")
        local gx64, gw64, gb64 = grads("float64")
        assert(max_abs_diff(gx32, gx64) <= 1e-3, impl .. ": grad of x")
        assert(max_abs_diff(gw32, gw64) <= 1e-3, impl .. ": grad of weight")
        assert(max_abs_diff(gb32, gb64) <= 1e-3, impl .. ": grad of bias")
      end
    end)
  end
end)
