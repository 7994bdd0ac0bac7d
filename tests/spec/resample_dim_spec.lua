-- core.resample_dim (src/ops/index.c, the CPU kernels in src/backends/cpu/cpu_index_dim.c): T weighted taps along
-- one dim, out[.., j, ..] = sum_t w[t, j] * x[.., idx[t, j], ..], the kernel under F.interpolate's linear modes.
-- Held against the same sum composed from index_select, mul and add (the path of backends without the kernel: bit
-- for bit in float32, as both multiply and add in float32 in tap order), a float64 reference summed in Lua,
-- finite differences, and the composed gradient; every dim, 1-3 taps, repeated and unused positions, strided
-- inputs, empty batches, 1 and 2 threads, and bad arguments.
local ddp = require "ddplua"
local R = require "helpers.ref"
local gc = require "helpers.gradcheck"

local resample_dim = ddp.core.resample_dim

-- random taps: positions in 1..n (int64 [T, k]) and weights of dtype dt ([T, k])
local function random_taps(T, k, n, dt)
  local idx = (ddp.rand(T, k) * n):floor():long() + 1
  return idx, (ddp.rand(T, k, { dtype = "float64" }) * 2 - 0.5):to(dt)
end

-- the composed form: sum_t index_select(x, d, idx[t]) * w[t] shaped along d
local function composed(x, d, idx, w)
  local shape = {}
  for i = 1, x:dim() do shape[i] = 1 end
  shape[d] = idx:size(2)
  local y
  for t = 1, idx:size(1) do
    local term = x:index_select(d, idx[t]) * w[t]:reshape(shape)
    y = y and y + term or term
  end
  return y
end

-- the float64 reference of out, in Lua
local function reference(x, d, idx, w)
  local a, ia, wa = R.from(x:double()), R.from(idx), R.from(w:double())
  local T, k = idx:size(1), idx:size(2)
  local shape = x:size()
  shape[d] = k
  local out = R.array(shape, 0)
  R.each_index(shape, function(pos)
    local s, src = 0, { table.unpack(pos) }
    for t = 1, T do
      src[d] = ia.v[(t - 1) * k + pos[d]]
      s = s + wa.v[(t - 1) * k + pos[d]] * R.get(a, src)
    end
    out.v[R.offset(shape, pos)] = s
  end)
  return out
end

local SHAPES = { { 3, 5 }, { 2, 3, 7 }, { 2, 2, 4, 6 }, { 1, 9 }, { 4 } }

for _, threads in ipairs({ 1, 2 }) do
  describe("core.resample_dim, " .. threads .. " thread(s):", function()
    setup(function() ddp.set_num_threads(threads) end)
    teardown(function() ddp.set_num_threads(1) end)

    it("equals the composed index_select * w + ... bit for bit in float32, and the float64 reference", function()
      ddp.manual_seed(11)
      for _, shape in ipairs(SHAPES) do
        for d = 1, #shape do
          for T = 1, 3 do
            local k = (d + T) % 4 + 1 -- 1..4 outputs; positions repeat and skip
            local x = ddp.randn(shape)
            local idx, w = random_taps(T, k, shape[d], "float32")
            local got = resample_dim(x, d, idx, w)
            local want = composed(x, d, idx, w)
            assert.is_true(got:equal(want), string.format("shape {%s} dim %d taps %d: differs from the composed form",
              table.concat(shape, ", "), d, T))
            local x64 = x:double()
            R.assert_close(resample_dim(x64, d, idx, w:double()), reference(x64, d, idx, w:double()), 1e-12, 1e-12,
              "float64")
          end
        end
      end
    end)

    it("reads strided and transposed inputs and leaves them alone", function()
      ddp.manual_seed(12)
      local base = ddp.randn(6, 8)
      local x = base:t():narrow(2, 2, 4) -- [8, 4], strided
      local before = base:clone()
      local idx, w = random_taps(2, 5, 4, "float32")
      assert.is_true(resample_dim(x, 2, idx, w):equal(composed(x:contiguous(), 2, idx, w)))
      idx, w = random_taps(2, 3, 8, "float32")
      assert.is_true(resample_dim(x, 1, idx, w):equal(composed(x:contiguous(), 1, idx, w)))
      assert.is_true(base:equal(before))
    end)

    it("has the gradient of finite differences and of the composed form (float32 bit for bit)", function()
      ddp.manual_seed(13)
      for _, c in ipairs({ { { 3, 5 }, 2, 2, 9 }, { { 2, 4, 3 }, 2, 3, 6 }, { { 2, 3, 4 }, 3, 2, 7 }, { { 5 }, 1, 1, 8 } }) do
        local shape, d, T, k = c[1], c[2], c[3], c[4]
        local idx, w = random_taps(T, k, shape[d], "float64")
        gc.assert_gradcheck(function(x) return resample_dim(x, d, idx, w) end, { ddp.randn(shape, { dtype = "float64" }):requires_grad_() })
        local x = ddp.randn(shape):requires_grad_()
        local w32, gy = w:float(), ddp.randn(resample_dim(x, d, idx, w:float()):size())
        resample_dim(x, d, idx, w32):backward(gy)
        local fused = x.grad
        x.grad = nil
        composed(x, d, idx, w32):backward(gy)
        R.assert_close(fused, R.from(x.grad), 1e-6, 1e-6, "gradient vs the composed form")
      end
    end)

    it("gives position-ordered gradients: an unused position gets zero, a repeated one the sum", function()
      local x = ddp.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }, { dtype = "float32" }):requires_grad_()
      local idx = ddp.tensor({ { 1, 1 }, { 3, 1 } }, { dtype = "int64" })
      local w = ddp.tensor({ { 0.5, 2 }, { 0.25, 1 } })
      local y = resample_dim(x, 2, idx, w)
      R.assert_close(y, R.from(ddp.tensor({ { 0.5 + 0.75, 2 + 1 }, { 2 + 1.5, 8 + 4 } })), 0, 0, "value")
      y:sum():backward()
      R.assert_close(x.grad, R.from(ddp.tensor({ { 3.5, 0, 0.25 }, { 3.5, 0, 0.25 } })), 0, 0, "gradient")
    end)

    it("handles an empty batch and zero outputs", function()
      local x = ddp.randn(0, 3, 4):requires_grad_()
      local idx, w = random_taps(2, 5, 4, "float32")
      local y = resample_dim(x, 3, idx, w)
      assert.same({ 0, 3, 5 }, y:size())
      y:sum():backward()
      assert.same({ 0, 3, 4 }, x.grad:size())
      local z = ddp.randn(2, 4):requires_grad_()
      local none = resample_dim(z, 2, ddp.zeros(2, 0, { dtype = "int64" }), ddp.zeros(2, 0))
      assert.same({ 2, 0 }, none:size())
      none:sum():backward()
      assert.is_true(z.grad:equal(ddp.zeros(2, 4)))
    end)
  end)
end

describe("core.resample_dim on other dtypes", function()
  it("composes bfloat16 (no kernel) and matches float32 within bfloat16's rounding", function()
    ddp.manual_seed(14)
    local x = ddp.randn(3, 6)
    local idx, w = random_taps(2, 4, 6, "float32")
    local got = resample_dim(x:to("bfloat16"), 2, idx, w:to("bfloat16"))
    assert.equals("bfloat16", got:dtype())
    R.assert_close(got:float(), R.from(resample_dim(x, 2, idx, w)), 0.05, 0.02, "bfloat16")
  end)
end)

describe("core.resample_dim refuses bad arguments", function()
  local x, idx, w = ddp.randn(2, 5), ddp.tensor({ { 1, 2 }, { 2, 3 } }, { dtype = "int64" }), ddp.rand(2, 2)
  it("names what is wrong", function()
    R.assert_error(function() resample_dim(ddp.ones(2, 5, { dtype = "int64" }), 2, idx, w) end,
      "resample", "floating-point", "int64")
    R.assert_error(function() resample_dim(x, 2, idx:float(), w) end, "positions", "int64", "float32")
    R.assert_error(function() resample_dim(x, 2, idx[1], w) end, "positions", "2-d", "[2]")
    R.assert_error(function() resample_dim(x, 2, idx, ddp.rand(2, 3)) end, "weights", "[2, 2]", "[2, 3]")
    R.assert_error(function() resample_dim(x, 2, idx, w:double()) end, "weights", "float32", "float64")
    R.assert_error(function() resample_dim(x, 3, idx, w) end, "dim")
    R.assert_error(function() resample_dim(x, 2, ddp.zeros(0, 2, { dtype = "int64" }), ddp.zeros(0, 2)) end,
      "taps >= 1")
  end)
  it("names an index out of range and its position, forward and backward", function()
    R.assert_error(function() resample_dim(x, 2, ddp.tensor({ { 1, 6 } }, { dtype = "int64" }), ddp.rand(1, 2)) end,
      "index 6", "out of range 1..5")
    R.assert_error(function() resample_dim(x, 1, ddp.tensor({ { 0 } }, { dtype = "int64" }), ddp.rand(1, 1)) end,
      "index 0", "out of range 1..2")
  end)
end)
