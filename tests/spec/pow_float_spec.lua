-- float32 x^y for a Lua number y (cpu_vec_ew_t.h's v_pow_value: exp(y log x) in double lanes, rounded once) on every
-- kernel set and thread count: against the float64 pow of the same float32 values and the float32-rounded power,
-- rounded to float32 (within an ulp; counted), negative bases (NaN for a fractional power, the sign of (-1)^y for a
-- whole one), the special values that take powf's call (0, -0, inf, NaN), float32's extremes, subnormal bases, a
-- result that overflows or underflows, and a value's result independent of its position (the padded tail).
local ddp = require "ddplua"
local R = require "helpers.ref"

local specials = { 0.0, -0.0, math.huge, -math.huge, 0 / 0, 1e-40, -1e-40, 3.4e38, -3.4e38, 1.17e-38, 1, -1, 0.5,
  2, -2, 7.5, -7.5, 1e20, 1e-20 }

-- a and b (tensors) equal element by element, NaN equal to NaN
local function same_values(a, b, what)
  local x, y = R.from(a:double()).v, R.from(b:double()).v
  assert.are.equal(#y, #x, what)
  for i = 1, #y do
    assert(x[i] == y[i] or (x[i] ~= x[i] and y[i] ~= y[i]), string.format("%s: element %d: %.9g vs %.9g", what, i,
      x[i], y[i]))
  end
end

local function inputs(n, seed)
  local x = R.randn({ n }, seed) * 3
  for i, v in ipairs(specials) do x[i * 7 % n + 1] = v end
  return x:float()
end

R.describe_kernel_sets(_ENV, { 1, 2 }, function(isa)
  it("matches the float64 pow rounded, within an ulp, with negative bases and powf's special values", function()
    local x = inputs(20011, 5)
    local x64 = x:double()
    local total_differ = 0
    for _, y in ipairs({ 3.5, 0.3, -1.7, 2.5, 1e-3, 40.25, -40.75, 7, -3, 11, 0.75, 1e6, -1e6 }) do
      local y32 = ddp.tensor(y):float():item()
      local got = x:pow(y)
      local want = x64:pow(y32):float()
      local g, w = got:double():totable(), want:double():totable()
      local differ = 0
      for i = 1, #w do
        local a, b = g[i], w[i]
        if a ~= b and not (a ~= a and b ~= b) then
          differ = differ + 1
          local ulp = math.max(math.abs(b), 1.17549435e-38) * 2 ^ -23
          assert(math.abs(a - b) <= ulp, string.format("%s: x = %.9g ^ %g: %.9g, float64 pow rounded %.9g", isa,
            x64[i]:item(), y, a, b))
        end
      end
      total_differ = total_differ + differ
    end
    assert(total_differ <= 13, "results an ulp off: " .. total_differ .. " of 260143 (rounding ties of the double)")
  end)

  it("gives a value the same result at any position (the tail through the same lanes)", function()
    local x = inputs(101, 6)
    local whole = x:pow(1.3)
    for _, start in ipairs({ 1, 2, 30, 33, 70 }) do
      local len = 101 - start + 1
      local part = x:narrow(1, start, len):contiguous():pow(1.3)
      same_values(part, whole:narrow(1, start, len), "from " .. start)
    end
  end)
end)

it("strided operands and the gradient are unchanged; a non-finite power takes powf's path", function()
  local x = inputs(300, 7):view(20, 15)
  local t = x:t():pow(2.25)
  same_values(t, x:pow(2.25):t(), "strided")
  local inf = x:pow(math.huge)
  local want = x:double():pow(math.huge):float()
  R.assert_close(inf, R.from(want), 0, 0, "x ^ inf")
  local leaf = R.uniform({ 50 }, 0.5, 2, 8):float():requires_grad_()
  leaf:pow(1.5):sum():backward()
  R.assert_close(leaf.grad, R.from((leaf:detach():double() ^ 0.5) * 1.5), 1e-6, 1e-6, "gradient")
end)
