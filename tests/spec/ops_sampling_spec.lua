-- randint, multinomial, bernoulli: ranges, dtypes and shapes, frequencies
-- against the probabilities (fixed seeds, so the checks are
-- deterministic), draws without replacement never repeating or taking a
-- zero-probability category, the global generator and Generator objects
-- (the same seed, the same numbers; each draw advancing the offset), and
-- PyTorch's errors for bad distributions.
local ddp = require "ddplua"
local gc = require "helpers.gradcheck"
local R = require "helpers.ref"

local function vals(t) return gc.flat_values(t) end

describe("randint", function()
  it("draws int64 in [low, high) of the given shape, uniformly", function()
    ddp.manual_seed(1)
    local t = ddp.randint(-3, 7, { 200, 50 })
    assert.are.equal("int64", t:dtype())
    assert.are.same({ 200, 50 }, t:size())
    local count = {}
    for _, v in ipairs(vals(t)) do
      assert.is_true(v >= -3 and v < 7 and math.type(v) == "integer")
      count[v] = (count[v] or 0) + 1
    end
    for v = -3, 6 do assert.is_true(math.abs(count[v] - 1000) < 150, "value " .. v .. " drawn " .. count[v]) end
    assert.are.same({ 3 }, ddp.randint(5, { 3 }):size()) -- randint(high, size): low 0
    assert.are.equal("float64", ddp.randint(0, 2, { 2 }, { dtype = "float64" }):dtype())
    assert.are.same({ 0 }, ddp.randint(0, 2, { 0 }):size())
  end)

  it("follows the global seed and Generator objects", function()
    ddp.manual_seed(7)
    local a = ddp.randint(0, 1000, { 20 })
    ddp.manual_seed(7)
    assert.are.same(vals(a), vals(ddp.randint(0, 1000, { 20 })))
    local g1, g2 = ddp.Generator(3), ddp.Generator(3)
    local x = ddp.randint(0, 1000, { 10 }, { generator = g1 })
    assert.are.same(vals(x), vals(ddp.randint(0, 1000, { 10 }, { generator = g2 })))
    assert.are.equal(10, g1.offset)
    assert.are_not.same(vals(x), vals(ddp.randint(0, 1000, { 10 }, { generator = g1 })))
  end)

  it("rejects an empty range and bad options", function()
    R.assert_error(function() ddp.randint(3, 3, { 2 }) end, "randint: low (3) must be less than high (3)")
    R.assert_error(function() ddp.randint(0, 3, 2) end, "randint: size must be a table")
    R.assert_error(function() ddp.randint(0, 3, { 2 }, { gen = 1 }) end, "randint: unknown option 'gen'")
    R.assert_error(function() ddp.randint(0, 3, { 2 }, { generator = 5 }) end, "generator must be a ddp.Generator")
  end)
end)

describe("multinomial", function()
  it("draws categories in proportion to the weights, with replacement", function()
    ddp.manual_seed(2)
    local p = ddp.tensor({ 1, 0, 3, 6 }, { dtype = "float32" })
    local s = ddp.multinomial(p, 20000, true)
    assert.are.same({ 20000 }, s:size())
    local count = { 0, 0, 0, 0 }
    for _, v in ipairs(vals(s)) do count[v] = count[v] + 1 end
    assert.are.equal(0, count[2]) -- a zero weight is never drawn
    for k, w in ipairs({ 0.1, 0, 0.3, 0.6 }) do
      assert.is_true(math.abs(count[k] / 20000 - w) < 0.015, "category " .. k .. ": " .. count[k])
    end
  end)

  it("without replacement never repeats, skips zero weights, and favours heavy ones first", function()
    ddp.manual_seed(3)
    local p = ddp.tensor({ { 0.1, 0.0, 0.2, 0.7 }, { 5, 5, 5, 5 } }, { dtype = "float64" })
    local first = { 0, 0, 0, 0 }
    for _ = 1, 2000 do
      local s = p:multinomial(3)
      local r1, r2 = vals(s[1]), vals(s[2])
      assert.are.same({ 2, 3 }, s:size())
      local seen = {}
      for _, v in ipairs(r1) do
        assert.is_true(v ~= 2 and not seen[v])
        seen[v] = true
      end
      seen = {}
      for _, v in ipairs(r2) do
        assert.is_false(seen[v] == true)
        seen[v] = true
      end
      first[r1[1]] = first[r1[1]] + 1
    end
    assert.is_true(math.abs(first[4] / 2000 - 0.7) < 0.04, "first draws of category 4: " .. first[4])
    local all = ddp.multinomial(ddp.ones(6), 6)
    local sorted = vals(all)
    table.sort(sorted)
    assert.are.same({ 1, 2, 3, 4, 5, 6 }, sorted) -- n = categories: a permutation
  end)

  it("is reproducible from a Generator", function()
    local p = ddp.rand(3, 10)
    local a = ddp.multinomial(p, 4, { generator = ddp.Generator(9) })
    local b = ddp.multinomial(p, 4, { generator = ddp.Generator(9) })
    assert.are.same(a:totable(), b:totable())
    local g = ddp.Generator(9)
    ddp.multinomial(p, 4, { replacement = true, generator = g })
    assert.are.equal(12, g.offset)
  end)

  it("rejects what PyTorch rejects", function()
    R.assert_error(function() ddp.multinomial(ddp.tensor({ 1.0, -1.0 }), 1) end, "probability -1 at category 2")
    R.assert_error(function() ddp.multinomial(ddp.tensor({ 0.0, 0.0 }), 1) end, "row 1 of the probabilities sums to 0")
    R.assert_error(function() ddp.multinomial(ddp.tensor({ 1.0, 0.0 }), 2) end,
      "cannot draw 2 samples without replacement from row 1, which has 1 categories with non-zero probability")
    R.assert_error(function() ddp.multinomial(ddp.tensor({ 1.0, 1.0 }), 3) end, "from 2 categories")
    R.assert_error(function() ddp.multinomial(ddp.tensor({ 1, 2 }), 1) end, "1- or 2-dimensional floating point")
    R.assert_error(function() ddp.multinomial(ddp.ones(2), 1, { replace = true }) end, "unknown option 'replace'")
    R.assert_error(function() ddp.multinomial(ddp.tensor({ 1.0, 0 / 0 }), 1) end, "probability", "nan at category 2")
  end)
end)

describe("bernoulli", function()
  it("draws 1 with probability p elementwise, in p's dtype", function()
    ddp.manual_seed(4)
    local p = ddp.tensor({ 0, 0.25, 0.5, 1 }, { dtype = "float64" }):view(4, 1):expand(4, 5000)
    local b = ddp.bernoulli(p)
    assert.are.equal("float64", b:dtype())
    local m = vals(b:mean(2))
    assert.are.same({ 0, 1 }, { m[1], m[4] })
    assert.is_true(math.abs(m[2] - 0.25) < 0.02 and math.abs(m[3] - 0.5) < 0.02, table.concat(m, " "))
    local g1, g2 = ddp.Generator(1), ddp.Generator(1)
    assert.are.same(ddp.full({ 30 }, 0.5):bernoulli({ generator = g1 }):totable(),
      ddp.full({ 30 }, 0.5):bernoulli({ generator = g2 }):totable())
    R.assert_error(function() ddp.bernoulli(ddp.tensor({ 1.5 })) end, "bernoulli: probability 1.5 at position 1")
    R.assert_error(function() ddp.bernoulli(ddp.tensor({ 1 })) end, "bernoulli: expected a floating point tensor")
  end)

  -- PyTorch's bernoulli(input, p): input gives the shape, dtype and device, p the probability everywhere
  it("takes one probability for every element of a tensor's shape", function()
    ddp.manual_seed(6)
    local x = ddp.zeros(4, 5000, { dtype = "float64" })
    local b = ddp.bernoulli(x, 0.3)
    assert.are.same({ 4, 5000 }, b:size())
    assert.are.equal("float64", b:dtype())
    assert.is_true(math.abs(b:mean():item() - 0.3) < 0.01, tostring(b:mean():item()))
    assert.are.equal(0, b:ne(0):logical_and(b:ne(1)):sum():item())
    ddp.manual_seed(6)
    assert.are.equal(0, ddp.bernoulli(ddp.full({ 4, 5000 }, 0.3, { dtype = "float64" })):ne(b):sum():item())
    assert.are.equal(0, x:bernoulli(0):sum():item())
    assert.are.equal(20000, x:bernoulli(1):sum():item())
    local g1, g2 = ddp.Generator(3), ddp.Generator(3)
    assert.are.same(ddp.bernoulli(ddp.zeros(40), 0.5, { generator = g1 }):totable(),
      ddp.bernoulli(ddp.zeros(40), 0.5, { generator = g2 }):totable())
    R.assert_error(function() ddp.bernoulli(x, 1.5) end, "bernoulli: p must be in [0, 1], got 1.5")
    R.assert_error(function() ddp.bernoulli(x, 0 / 0) end, "bernoulli: p must be in [0, 1]")
    R.assert_error(function() ddp.bernoulli(ddp.tensor({ 1 }), 0.5) end, "bernoulli: expected a floating point tensor")
  end)
end)
