-- cross_entropy (reductions, label smoothing, ignore_index, [N, C, d...]
-- logits) and mse_loss: forward against plain-Lua float64 references,
-- gradients against finite differences, bad targets and shapes.
local ddp = require "ddplua"
local gc = require "helpers.gradcheck"
local R = require "helpers.ref"

local function targets(t) return ddp.tensor(t) end -- int64, 1-based classes

describe("cross_entropy", function()
  local x = R.randn({ 5, 4 }, 801)
  local y = targets({ 1, 4, 2, 2, 3 })
  local X, Y = R.from(x), R.from(y)

  local option_sets = {
    {},
    { reduction = "sum" },
    { reduction = "none" },
    { label_smoothing = 0.1 },
    { label_smoothing = 0.25, reduction = "sum" },
    { label_smoothing = 0.1, reduction = "none" },
    { ignore_index = 2 },
    { ignore_index = 2, reduction = "none" },
    { ignore_index = 2, label_smoothing = 0.2, reduction = "sum" },
  }

  local function label(o)
    local parts = {}
    for _, k in ipairs({ "reduction", "label_smoothing", "ignore_index" }) do
      if o[k] ~= nil then parts[#parts + 1] = k .. "=" .. tostring(o[k]) end
    end
    return #parts > 0 and table.concat(parts, ", ") or "defaults"
  end

  for _, o in ipairs(option_sets) do
    it("[N, C] with " .. label(o) .. " matches the reference in float64 and float32", function()
      R.check_forward(function(l, t) return ddp.cross_entropy(l, t, o) end, { x, y }, R.cross_entropy(X, Y, o))
    end)

    it("[N, C] with " .. label(o) .. " has finite-difference gradients (transposed logits)", function()
      local xt = R.randn({ 4, 5 }, 802):requires_grad_()
      gc.assert_gradcheck(function(l) return ddp.cross_entropy(l:t(), y, o) end, { xt })
    end)
  end

  it("[N, C, d] and [N, C, d1, d2] logits match the reference and have gradients", function()
    local x3, y3 = R.randn({ 2, 4, 3 }, 803), targets({ { 1, 4, 2 }, { 3, 3, 1 } })
    for _, o in ipairs({ {}, { reduction = "none" }, { label_smoothing = 0.1, ignore_index = 3 } }) do
      R.check_forward(function(l, t) return ddp.cross_entropy(l, t, o) end, { x3, y3 },
        R.cross_entropy(R.from(x3), R.from(y3), o))
      gc.assert_gradcheck(function(l) return ddp.cross_entropy(l, y3, o) end, { x3:clone():requires_grad_() })
    end
    local x4, y4 = R.randn({ 2, 3, 2, 2 }, 804), targets({ { { 1, 2 }, { 3, 1 } }, { { 2, 2 }, { 3, 3 } } })
    R.check_forward(function(l, t) return ddp.cross_entropy(l, t, { reduction = "none" }) end, { x4, y4 },
      R.cross_entropy(R.from(x4), R.from(y4), { reduction = "none" }))
    gc.assert_gradcheck(function(l) return ddp.cross_entropy(l:permute(1, 4, 2, 3), y4) end,
      { R.randn({ 2, 2, 2, 3 }, 805):requires_grad_() })
  end)

  it("gives NaN for a mean over only ignored targets, as PyTorch", function()
    local v = ddp.cross_entropy(x, targets({ 2, 2, 2, 2, 2 }), { ignore_index = 2 }):item()
    assert.is_true(v ~= v)
  end)

  it("names a class out of range and its position", function()
    R.assert_error(function() return ddp.cross_entropy(x, targets({ 1, 5, 2, 2, 3 })) end, "target 5",
      "position 2", "1..4")
    R.assert_error(function() return ddp.cross_entropy(x, targets({ 1, 2, 0, 2, 3 })) end, "target 0",
      "position 3", "1..4")
  end)

  it("names the shapes when targets do not fit the logits", function()
    R.assert_error(function() return ddp.cross_entropy(x, targets({ 1, 2, 3 })) end, "[5, 4]", "[3]")
    R.assert_error(function() return ddp.cross_entropy(x, targets({ { 1, 2, 3, 4, 1 } })) end, "[5, 4]", "[1, 5]")
  end)

  it("refuses float targets of another shape and integer logits, naming them", function()
    -- float targets are class probabilities: they need the logits' shape
    R.assert_error(function() return ddp.cross_entropy(x, ddp.ones(5)) end, "probability targets", "[5, 4]", "[5]")
    R.assert_error(function() return ddp.cross_entropy(targets({ { 1, 2 } }), targets({ 1 })) end, "int64")
  end)

  it("checks its options", function()
    R.assert_error(function() return ddp.cross_entropy(x, y, { label_smoothing = 1.5 }) end, "label_smoothing",
      "1.5")
    R.assert_error(function() return ddp.cross_entropy(x, y, { reduction = "avg" }) end, "avg")
    R.assert_error(function() return ddp.cross_entropy(x, y, { weights = 1 }) end, "weights")
    R.assert_error(function() return ddp.cross_entropy(x, "y") end, "Tensor expected", "string")
  end)
end)

describe("mse_loss", function()
  local a, b = R.randn({ 3, 4 }, 811), R.randn({ 3, 4 }, 812)
  for _, red in ipairs({ "mean", "sum", "none" }) do
    it("with reduction " .. red .. " matches the reference and has gradients for both inputs", function()
      R.check_forward(function(p, q) return ddp.mse_loss(p, q, { reduction = red }) end, { a, b },
        R.mse(R.from(a), R.from(b), red))
      gc.assert_gradcheck(function(p, q) return ddp.mse_loss(p:t(), q, { reduction = red }) end,
        { R.randn({ 4, 3 }, 813):requires_grad_(), b:clone():requires_grad_() })
    end)
  end

  it("broadcasts shapes that differ, as PyTorch, and names both when they cannot broadcast", function()
    local p, q = R.randn({ 3, 4 }, 814), R.randn({ 4 }, 815)
    assert.are.same(ddp.mse_loss(p, q:expand(3, 4)):item(), ddp.mse_loss(p, q):item())
    R.assert_error(function() return ddp.mse_loss(ddp.ones(3, 4), ddp.ones(3)) end, "mse_loss", "[3, 4]", "[3]")
  end)
end)
