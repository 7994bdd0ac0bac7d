-- Reductions (sum, mean, max, min, argmax) and softmax / log_softmax:
-- forward against plain-Lua float64 references, gradients against finite
-- differences on non-contiguous inputs, and dimension errors.
local ddp = require "ddplua"
local gc = require "helpers.gradcheck"
local R = require "helpers.ref"

local x64 = R.randn({ 3, 4, 5 }, 101)
local X = R.from(x64)
-- float32 sums of 60 values of size ~1: a looser absolute tolerance
local TOL_SUM32 = { 5e-5, 2e-5 }

describe("sum and mean", function()
  local cases = {
    { "all", {}, nil },
    { "dim 2", { 2 }, 2 },
    { "dim -1", { 3 }, -1 },
    { "dims {1, 3}", { 1, 3 }, { 1, 3 } },
    -- adjacent dims of a contiguous input: one reduction over their product (ops/reduce.c)
    { "dims {2, 3}", { 2, 3 }, { 2, 3 } },
    { "dims {1, 2}", { 1, 2 }, { 1, 2 } },
    { "dims {1, 2, 3}", { 1, 2, 3 }, { 1, 2, 3 } },
  }
  for _, c in ipairs(cases) do
    local label, dims, arg = c[1], c[2], c[3]
    for _, keep in ipairs({ false, true }) do
      it(string.format("over %s (keepdim=%s) match the reference in float64 and float32", label, keep), function()
        R.check_forward(function(t) return t:sum(arg, keep) end, { x64 }, R.sum(X, dims, keep),
          TOL_SUM32)
        R.check_forward(function(t) return t:mean(arg, keep) end, { x64 }, R.mean(X, dims, keep))
      end)
    end
  end

  it("sum adjacent dims of a contiguous tensor in one accumulation: the merged view's sum, bit for bit", function()
    local x = ddp.randn(6, 7, 9, 11)
    for _, c in ipairs({ { { 3, 4 }, { 42, 99 }, 2 }, { { 2, 3 }, { 6, 63, 11 }, 2 }, { { 1, 2, 3 }, { 378, 11 }, 1 } }) do
      local want = x:reshape(table.unpack(c[2])):sum(c[3])
      local got = x:sum(c[1])
      assert.same(want:reshape(-1):totable(), got:reshape(-1):totable(), "sum over " .. table.concat(c[1], ","))
    end
  end)

  it("reduce strided views like their contiguous copies", function()
    local p = x64:permute(3, 1, 2)
    assert.is_false(p:is_contiguous())
    R.check_forward(function(t) return t:permute(3, 1, 2):sum({ 2, 3 }) end, { x64 },
      R.sum(R.from(p:contiguous()), { 2, 3 }), TOL_SUM32)
  end)

  -- rows long enough for the float32 kernel's blocks (1024 values in float lanes, the blocks added in double),
  -- with tails of every length: against the same values summed in float64
  it("sum long float32 rows to within 1e-6 of their magnitude, with NaN and inf propagated", function()
    ddp.manual_seed(7)
    for _, n in ipairs({ 1023, 1024, 1040, 4099, 70001 }) do
      local x = ddp.randn(3, n) * 10 + 100
      local s32, s64 = x:sum(2), x:double():sum(2)
      local mag = x:double():abs():sum(2)
      for r = 1, 3 do
        local err = math.abs(s32[r]:item() - s64[r]:item())
        assert.is_true(err <= 1e-6 * mag[r]:item(), string.format("n=%d row %d: error %g of %g", n, r, err, mag[r]:item()))
      end
      assert.near(x:double():mean():item(), x:mean():item(), 1e-6 * 110)
    end
    local x = ddp.ones(5000)
    x[4321] = 0 / 0
    assert.is_true(x:sum():item() ~= x:sum():item())
    x[4321] = math.huge
    assert.equal(math.huge, x:sum():item())
    x[17] = -math.huge
    assert.is_true(x:sum():item() ~= x:sum():item())
  end)

  it("have finite-difference gradients (dims, keepdim, permuted input)", function()
    local x = R.randn({ 3, 4, 2 }, 102):requires_grad_()
    gc.assert_gradcheck(function(t) return t:permute(2, 3, 1):sum(2) end, { x })
    gc.assert_gradcheck(function(t) return t:transpose(1, 3):mean({ 1, 2 }, true) end, { x })
    gc.assert_gradcheck(function(t) return t:mean() end, { x })
    gc.assert_gradcheck(function(t) return t:sum(-1, true) * t end, { x })
  end)

  it("sums integers exactly as int64 and refuses the mean of integers", function()
    local t = ddp.tensor({ { 1, 2 }, { 3, 1 << 53 } })
    local s = t:sum(1)
    assert.are.equal("int64", s:dtype())
    assert.are.same({ 4, 2 + (1 << 53) }, s:totable()) -- 2^53 + 2 is not a float64
    R.assert_error(function() return t:mean() end, "mean", "int64")
  end)
end)

describe("max, min, argmax over a dimension", function()
  for _, is_max in ipairs({ true, false }) do
    local name = is_max and "max" or "min"
    it(name .. " returns values and 1-based positions matching the reference", function()
      for _, dim in ipairs({ 1, 2, 3, -1 }) do
        local d = dim < 0 and 3 + dim + 1 or dim
        for _, keep in ipairs({ false, true }) do
          local v, i = x64[name](x64, dim, keep)
          local rv, ri = R.extreme(X, d, keep, is_max)
          R.assert_close(v, rv, 0, 0, name .. " values")
          R.assert_close(i, ri, 0, 0, name .. " positions")
          assert.are.equal("int64", i:dtype())
          local v32, i32 = x64:float()[name](x64:float(), dim, keep)
          R.assert_close(v32, rv, 1e-6, 1e-6, name .. " float32 values")
          R.assert_close(i32, ri, 0, 0, name .. " float32 positions")
        end
      end
      local argname = is_max and "argmax" or "argmin"
      local _, ri = R.extreme(X, 2, false, is_max)
      R.assert_close(x64[argname](x64, 2), ri, 0, 0, argname)
    end)

    it(name .. " has finite-difference gradients, through a transposed view", function()
      local x = gc.smooth_input({ 3, 4 }, 103)
      gc.assert_gradcheck(function(t) return (t:t()[name](t:t(), 2)) end, { x })
      gc.assert_gradcheck(function(t) return (t[name](t, 1, true)) end, { x })
      gc.assert_gradcheck(function(t) return t[name](t) end, { x })
    end)
  end

  it("rejects the reduction of an empty tensor", function()
    R.assert_error(function() return ddp.zeros(0):max() end, "max", "empty")
  end)
end)

describe("softmax and log_softmax", function()
  for _, log in ipairs({ false, true }) do
    local name = log and "log_softmax" or "softmax"
    it(name .. " matches the reference along every dim, in float64 and float32", function()
      for _, dim in ipairs({ 1, 2, 3, -1 }) do
        local d = dim < 0 and 4 + dim or dim
        R.check_forward(function(t) return ddp[name](t, dim) end, { x64 }, R.softmax(X, d, log))
      end
      local big = x64 * 50 -- large logits: the max is subtracted first
      R.check_forward(function(t) return t[name](t, 2) end, { big }, R.softmax(R.from(big), 2, log), { 1e-4, 1e-5 })
    end)

    it(name .. " has finite-difference gradients on a transposed input", function()
      local x = R.randn({ 4, 3 }, 104):requires_grad_()
      gc.assert_gradcheck(function(t) return ddp[name](t:transpose(1, 2), 2) end, { x })
      gc.assert_gradcheck(function(t) return ddp[name](t, 1) end, { x })
    end)
  end

  it("refuses integer input", function()
    R.assert_error(function() return ddp.softmax(ddp.tensor({ 1, 2 }), 1) end, "softmax", "int64")
  end)
end)

describe("reduction dimension errors", function()
  local t = ddp.ones(2, 3)
  it("names dimension 0, too large and too negative dims with the valid range", function()
    R.assert_error(function() return t:sum(0) end, "dimension 0", "1..2")
    R.assert_error(function() return t:sum(3) end, "dimension 3", "2-dimensional", "1..2")
    R.assert_error(function() return t:mean(-3) end, "dimension -3", "-2..-1")
    R.assert_error(function() return t:max(5) end, "dimension 5")
    R.assert_error(function() return ddp.softmax(t, 3) end, "dimension 3")
    R.assert_error(function() return t:sum({ 1, 1 }) end, "dimension 1", "more than once")
  end)

  it("names the argument when a dim has the wrong Lua type", function()
    R.assert_error(function() return t:sum("a") end, "number expected", "string")
    R.assert_error(function() return t:max({}) end, "number expected", "table")
  end)
end)
