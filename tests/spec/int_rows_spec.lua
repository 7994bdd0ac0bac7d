-- The integer rows of cpu_elementwise.c (int64 and uint8 ops with the op's case outside the loop): every op of the
-- op table's integer forms against a scalar loop written here, contiguous, broadcast (one value either side),
-- strided (the general loop) and with a Lua scalar, int64 exact past 2^53.
local ddp = require "ddplua"
local R = require "helpers.ref"
local gc = require "helpers.gradcheck"

local BIG = (1 << 60) + 3
local OPS = {
  -- (Lua integers wrap as int64 does)
  add = function(a, b) return a + b end, sub = function(a, b) return a - b end,
  mul = function(a, b) return a * b end, maximum = function(a, b) return math.max(a, b) end,
  minimum = function(a, b) return math.min(a, b) end,
  eq = function(a, b) return a == b and 1 or 0 end, ne = function(a, b) return a ~= b and 1 or 0 end,
  lt = function(a, b) return a < b and 1 or 0 end, le = function(a, b) return a <= b and 1 or 0 end,
  gt = function(a, b) return a > b and 1 or 0 end, ge = function(a, b) return a >= b and 1 or 0 end,
}

local function check(name, got, a, b, u8)
  local av, bv, gv = gc.flat_values(a), gc.flat_values(b), gc.flat_values(got)
  for i = 1, #gv do
    local x, y = av[#av == 1 and 1 or i], bv[#bv == 1 and 1 or i]
    local want = OPS[name](x, y)
    if u8 and not (name == "eq" or name == "ne" or name == "lt" or name == "le" or name == "gt" or name == "ge") then
      want = want & 0xff
    end
    assert(gv[i] == want, string.format("%s(%s, %s) = %s, want %s (element %d)", name, x, y, gv[i], want, i))
  end
end

describe("integer rows", function()
  it("give every op's integer result: int64 (exact past 2^53) and uint8, rows and single values", function()
    local a = (R.uniform({ 37 }, -50, 50, 1)):long() + BIG
    local b = (R.uniform({ 37 }, -50, 50, 2)):long() + BIG
    local ua, ub = R.uniform({ 37 }, 0, 255, 3):to("uint8"), R.uniform({ 37 }, 0, 255, 4):to("uint8")
    for name in pairs(OPS) do
      local f = ddp[name]
      check(name, f(a, b), a, b)
      check(name, f(a, b:narrow(1, 5, 1)), a, b:narrow(1, 5, 1)) -- one value broadcast
      check(name, f(a:narrow(1, 3, 1), b), a:narrow(1, 3, 1), b)
      check(name, f(ua, ub), ua, ub, true)
      check(name, f(ua:narrow(1, 2, 1), ub), ua:narrow(1, 2, 1), ub, true)
      check(name, f(a:narrow(1, 1, 36):reshape({ 6, 6 }):t():reshape(-1), b:narrow(1, 1, 36)),
        a:narrow(1, 1, 36):reshape({ 6, 6 }):t():contiguous():reshape(-1), b:narrow(1, 1, 36)) -- a strided view
    end
    -- a Lua scalar: exact for int64 past 2^53 (the float64 loop rounded (2^60 + 3) + 1 to 2^60)
    local v = ddp.tensor({ BIG, -BIG, 7 })
    assert.are.same({ BIG + 1, -BIG + 1, 8 }, (v + 1):totable())
    assert.are.same({ 1, 0, 0 }, v:ge(BIG - 1 + 1):totable())
    assert.are.same({ BIG - 2, -BIG - 2, 5 }, (v - 2):totable())
    assert.are.same({ 5 - BIG, 5 + BIG, -2 }, ddp.rsub(v, 5):totable())
    assert.are.same({ 0, 1, 1 }, v:lt(8):long():totable())
    local m = ddp.tensor({ 1, 0, 2 }):ne(0)
    assert.are.same({ 1, 0, 1 }, m:logical_and(ddp.tensor({ 3, 3, 3 }):ne(0)):totable())
    R.assert_close(v:lt(0.5), R.from(ddp.tensor({ 0, 1, 0 }, { dtype = "uint8" })), 0, 0, "a fractional scalar")
  end)
end)
