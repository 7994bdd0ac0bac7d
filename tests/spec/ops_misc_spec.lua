-- dropout (mask from the Philox generator, recomputed in backward) and
-- embedding (1-based ids): forward against plain-Lua references (a Lua
-- Philox for the mask), gradients, and bad input.
local ddp = require "ddplua"
local gc = require "helpers.gradcheck"
local R = require "helpers.ref"
local N = require "helpers.ref_nn"

local function rng_offset() return ddp.get_rng_state().offset end

describe("dropout", function()
  local x = R.randn({ 4, 6 }, 3000)
  local X = R.from(x)

  it("drops the elements the Philox stream says, scaling the rest, in float64 and float32", function()
    ddp.manual_seed(1234)
    for _, p in ipairs({ 0.3, 0.5, 0.9 }) do
      for _, dt in ipairs({ "float64", "float32" }) do
        local off = rng_offset()
        local y = ddp.dropout(x:to(dt), p)
        assert.are.equal(off + 24, rng_offset()) -- one counter per element
        local tol = dt == "float64" and 1e-15 or 1e-6
        R.assert_close(y, N.dropout(X, p, 1234, off), tol, tol, dt .. " p=" .. p)
      end
    end
  end)

  it("masks a strided input in its logical element order", function()
    ddp.manual_seed(77)
    local off = rng_offset()
    local y = ddp.dropout(x:t(), 0.4)
    R.assert_close(y, N.dropout(R.from(x:t():contiguous()), 0.4, 77, off), 1e-15, 1e-15)
  end)

  it("recomputes the same mask in backward", function()
    ddp.manual_seed(99)
    local off = rng_offset()
    local xi = x:clone():requires_grad_()
    local gy = R.randn({ 4, 6 }, 3001)
    ddp.dropout(xi, 0.35):backward(gy)
    R.assert_close(xi.grad, N.dropout(R.from(gy), 0.35, 99, off), 1e-15, 1e-15)
    local state = ddp.get_rng_state()
    gc.assert_gradcheck(function(t)
      ddp.set_rng_state(state) -- the same mask on every evaluation
      return ddp.dropout(t:t(), 0.5)
    end, { R.randn({ 6, 4 }, 3002):requires_grad_() })
  end)

  it("keeps about 1 - p of a large tensor and is reproducible from the seed", function()
    ddp.manual_seed(5)
    local y = ddp.dropout(ddp.ones(100, 100), 0.3)
    local kept = y:gt(0):float():sum():item() / 10000
    assert.is_true(math.abs(kept - 0.7) < 0.02, "kept fraction " .. kept)
    R.assert_close(y:max(), { shape = {}, v = { 1 / 0.7 } }, 1e-6, 0)
    ddp.manual_seed(5)
    R.assert_close(ddp.dropout(ddp.ones(100, 100), 0.3), R.from(y), 0, 0, "same seed, same mask")
  end)

  it("is the identity for p = 0 or in evaluation, and zeros for p = 1", function()
    local xi = x:clone():requires_grad_()
    local off = rng_offset()
    R.assert_close(ddp.dropout(xi, 0), X, 0, 0, "p = 0")
    R.assert_close(ddp.dropout(xi, 0.5, false), X, 0, 0, "evaluation")
    assert.are.equal(off, rng_offset()) -- nothing drawn
    local z = ddp.dropout(xi, 1)
    R.assert_close(z, R.array({ 4, 6 }, 0), 0, 0, "p = 1")
    z:sum():backward()
    R.assert_close(xi.grad, R.array({ 4, 6 }, 0), 0, 0, "p = 1 gradient")
  end)

  it("names a bad probability and bad arguments", function()
    R.assert_error(function() return ddp.dropout(x, 1.5) end, "dropout", "between 0 and 1", "1.5")
    R.assert_error(function() return ddp.dropout(x, -0.1) end, "-0.1")
    R.assert_error(function() return ddp.dropout(ddp.tensor({ 1, 2 }), 0.5) end, "dropout", "int64")
    R.assert_error(function() return ddp.dropout(x, {}) end, "number expected", "table")
    R.assert_error(function() return ddp.dropout(x, 0.5, "yes") end, "boolean expected", "string")
  end)
end)

describe("embedding", function()
  local w = R.randn({ 5, 4 }, 3100)
  local W = R.from(w)

  it("gathers rows for 0-, 1- and 2-dimensional ids, in float64 and float32", function()
    for _, ids in ipairs({ ddp.tensor(3), ddp.tensor({ 5, 1, 1 }), ddp.tensor({ { 2, 5, 2 }, { 1, 4, 3 } }) }) do
      local ref = N.embedding(R.from(ids), W)
      R.check_forward(function(i, q) return ddp.embedding(i, q) end, { ids, w }, ref, { 0, 1e-7 }, { 0, 0 })
    end
    local ids = ddp.tensor({ { 2, 5 }, { 1, 4 }, { 3, 3 } })
    R.check_forward(function(i, q) return ddp.embedding(i:t(), q:t():t()) end, { ids, w },
      N.embedding(R.from(ids:t():contiguous()), W), { 0, 1e-7 }, { 0, 0 })
  end)

  it("accumulates the gradient of repeated ids", function()
    local ids = ddp.tensor({ { 2, 5, 2 }, { 2, 4, 3 } })
    gc.assert_gradcheck(function(q) return ddp.embedding(ids, q) end, { w:clone():requires_grad_() })
    gc.assert_gradcheck(function(q) return ddp.embedding(ids:t(), q:t()) end,
      { R.randn({ 4, 5 }, 3101):requires_grad_() })
    local wi = w:clone():requires_grad_()
    ddp.embedding(ids, wi):sum():backward()
    assert.are.same({ 3, 3, 3, 3 }, wi.grad[2]:totable())
    assert.are.same({ 0, 0, 0, 0 }, wi.grad[1]:totable())
  end)

  it("names an id out of range and its position", function()
    R.assert_error(function() return ddp.embedding(ddp.tensor({ { 1, 2 }, { 6, 1 } }), w) end, "id 6",
      "position (2, 1)", "1..5")
    R.assert_error(function() return ddp.embedding(ddp.tensor({ 3, 0 }), w) end, "id 0", "position 2", "1..5")
    R.assert_error(function() return ddp.embedding(ddp.tensor(-1), w) end, "id -1", "1..5")
  end)

  it("names bad id and weight types", function()
    R.assert_error(function() return ddp.embedding(ddp.ones(2), w) end, "ids must be int64", "float32")
    R.assert_error(function() return ddp.embedding(ddp.tensor({ 1 }), ddp.ones(5)) end, "weight", "2-dimensional",
      "[5]")
    R.assert_error(function() return ddp.embedding(ddp.tensor({ 1 }), ddp.tensor({ { 1, 2 } })) end, "weight",
      "int64")
    R.assert_error(function() return ddp.embedding({ 1, 2 }, w) end, "Tensor expected", "table")
  end)
end)
