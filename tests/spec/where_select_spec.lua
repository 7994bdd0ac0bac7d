-- where and masked_fill through cpu_index.c's select loops (values of 2, 4 and 8 bytes, a contiguous condition,
-- each side a row or one value) and the element loop they leave the rest to, against a Lua reference.
local ddp = require "ddplua"

local function ref_where(c, a, b)
  local out = {}
  for i = 1, #c do out[i] = c[i] and a[i] or b[i] end
  return out
end
local function flat(t)
  local v = t:reshape(-1):totable()
  return v
end
local function truth(m)
  local v = flat(m)
  for i = 1, #v do v[i] = v[i] == true or v[i] == 1 end
  return v
end

describe("where and masked_fill select", function()
  it("match the reference for every value size, each side a row or one value", function()
    ddp.manual_seed(12)
    for _, dt in ipairs({ "float32", "float64", "bfloat16", "float16", "int64", "uint8" }) do
      for _, n in ipairs({ 1, 15, 16, 17, 1000 }) do
        local c = ddp.rand(n):lt(0.5)
        local a = (ddp.randn(n) * 50):to(dt)
        local b = (ddp.randn(n) * 50):to(dt)
        local want = ref_where(truth(c), flat(a), flat(b))
        assert.are.same(want, flat(ddp.where(c, a, b)), dt .. " rows " .. n)
        local s = ddp.full({ 1 }, 7):to(dt):expand(n)
        assert.are.same(ref_where(truth(c), flat(s), flat(b)), flat(ddp.where(c, s, b)), dt .. " value, row")
        assert.are.same(ref_where(truth(c), flat(a), flat(s)), flat(ddp.where(c, a, s)), dt .. " row, value")
        assert.are.same(ref_where(truth(c), flat(s), flat(s * 0)), flat(ddp.where(c, s, s * 0)), dt .. " values")
        assert.are.same(ref_where(truth(c), flat(s), flat(a)), flat(a:masked_fill(c, 7)), dt .. " masked_fill")
      end
    end
  end)
  it("keeps NaN and signed zeros, and reads strided operands", function()
    local nan = ddp.tensor({ 0 / 0, -0.0, 1, 2 }, { dtype = "float32" })
    local c = ddp.tensor({ true, true, false, true })
    local r = ddp.where(c, nan, ddp.zeros(4)):totable()
    assert.is_true(r[1] ~= r[1])
    assert.are.equal(-math.huge, 1 / r[2])
    assert.are.same({ 0, 2 }, { r[3], r[4] })
    local m = ddp.randn(6, 5)
    local col, mask = m:narrow(2, 2, 1), m:narrow(2, 4, 1):gt(0)
    local want = ref_where(truth(mask), flat(col), flat(m:narrow(2, 1, 1)))
    assert.are.same(want, flat(ddp.where(mask, col, m:narrow(2, 1, 1))))
    local g = ddp.randn(4, 4):requires_grad_()
    ddp.where(g:detach():gt(0), g, g * 3):sum():backward()
    for i, v in ipairs(flat(g.grad)) do assert.is_true(v == 1 or v == 3, tostring(i)) end
  end)
end)
