-- Tensor basics: creation, tostring in PyTorch's format, totable / item,
-- storage sharing between views, and in-place ops.
local ddp = require "ddplua"
local R = require "helpers.ref"

describe("tensor creation", function()
  it("infers shape and dtype from nested tables, as torch.tensor", function()
    local t = ddp.tensor({ { 1, 2, 3 }, { 4, 5, 6 } })
    assert.are.same({ 2, 3 }, t:size())
    assert.are.equal("int64", t:dtype())
    assert.are.equal("float32", ddp.tensor({ 1.5, 2 }):dtype())
    assert.are.equal("uint8", ddp.tensor({ true, false }):dtype())
    assert.are.equal("float64", ddp.tensor({ 1, 2 }, { dtype = "float64" }):dtype())
    assert.are.same({}, ddp.tensor(3.5):size())
    assert.are.equal(3.5, ddp.tensor(3.5):item())
    assert.are.same({ { 1, 2, 3 }, { 4, 5, 6 } }, t:totable())
  end)

  it("fills zeros, ones, full and arange with the values asked for", function()
    assert.are.same({ { 0, 0, 0 }, { 0, 0, 0 } }, ddp.zeros(2, 3):totable())
    assert.are.same({ 1, 1 }, ddp.ones({ 2 }, { dtype = "int64" }):totable())
    assert.are.same({ { 7, 7 } }, ddp.full({ 1, 2 }, 7):totable())
    assert.are.equal("int64", ddp.full({ 1 }, 7):dtype())
    assert.are.same({ 2, 3 }, ddp.empty(2, 3):size())
    assert.are.same({ 0, 1, 2, 3, 4 }, ddp.arange(5):totable())
    assert.are.same({ 2, 4, 6 }, ddp.arange(2, 8, 2):totable())
    assert.are.same({ 0, 0.25, 0.5, 0.75 }, ddp.arange(0, 1, 0.25):totable())
    assert.are.equal("float32", ddp.arange(0, 1, 0.25):dtype())
  end)

  it("draws rand in [0, 1), randn around 0, and a 1-based randperm, reproducibly", function()
    ddp.manual_seed(3)
    local u = R.from(ddp.rand(1000, { dtype = "float64" }))
    local n = R.from(ddp.randn(1000, { dtype = "float64" }))
    local lo, hi, s, q = math.huge, -math.huge, 0, 0
    for k = 1, 1000 do
      lo, hi = math.min(lo, u.v[k]), math.max(hi, u.v[k])
      s, q = s + n.v[k], q + n.v[k] ^ 2
    end
    assert.is_true(lo >= 0 and hi < 1 and lo < 0.01 and hi > 0.99)
    assert.is_true(math.abs(s / 1000) < 0.12 and math.abs(q / 1000 - 1) < 0.15)
    local p = ddp.randperm(10):totable()
    table.sort(p)
    assert.are.same({ 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 }, p)
    ddp.manual_seed(3)
    R.assert_close(ddp.rand(1000, { dtype = "float64" }), u, 0, 0, "same seed, same numbers")
  end)

  it("names what is wrong with a bad table or option", function()
    R.assert_error(function() return ddp.tensor({ { 1, 2 }, { 3 } }) end, "ragged")
    R.assert_error(function() return ddp.tensor({ 1, "x" }) end, "string", "position 2")
    R.assert_error(function() return ddp.tensor({ 1 }, { dtype = "float8" }) end, "float8")
    R.assert_error(function() return ddp.tensor({ 1 }, { dtyp = "float32" }) end, "dtyp", "valid options")
    R.assert_error(function() return ddp.tensor({ 1, 2 }, { requires_grad = true }) end, "floating point", "int64")
    R.assert_error(function() return ddp.zeros(2, -1) end, "[2, -1]", ">= 0")
    R.assert_error(function() return ddp.zeros({ 2, "a" }) end, "entry 2", "string")
    R.assert_error(function() return ddp.ones(2, { device = "tpu" }) end, "tpu")
  end)
end)

describe("tostring", function()
  -- the expected strings are what PyTorch 2 prints for the same tensors
  -- (dtypes are named as ddplua spells them: dtype=float64)
  local cases = {
    { ddp.tensor({ { 1.0, 2.0 }, { 3.0, 4.0 } }), "tensor([[1., 2.],\n        [3., 4.]])" },
    { ddp.tensor({ 1.5, -2.25 }), "tensor([ 1.5000, -2.2500])" },
    { ddp.tensor({ 1, 20, 300 }), "tensor([  1,  20, 300])" },
    { ddp.tensor({ 1.0, 2.0 }, { dtype = "float64" }), "tensor([1., 2.], dtype=float64)" },
    { ddp.tensor(3.5), "tensor(3.5000)" },
    { ddp.tensor({ 1e-5, 1.0 }), "tensor([1.0000e-05, 1.0000e+00])" },
    { ddp.tensor({ 1e8, 2.0 }), "tensor([1.0000e+08, 2.0000e+00])" },
    { ddp.tensor({ 100.25, 0.001 }), "tensor([1.0025e+02, 1.0000e-03])" },
    { ddp.tensor({ 0 / 0, 1.0, math.huge }), "tensor([nan, 1., inf])" },
    { ddp.arange(1001), "tensor([   0,    1,    2,  ...,  998,  999, 1000])" },
    { ddp.arange(0, 12, 1, { dtype = "float32" }):view(2, 2, 3),
      "tensor([[[ 0.,  1.,  2.],\n         [ 3.,  4.,  5.]],\n\n" ..
      "        [[ 6.,  7.,  8.],\n         [ 9., 10., 11.]]])" },
    { ddp.zeros(0), "tensor([])" },
    { ddp.zeros(2, 0), "tensor([], size=(2, 0))" },
    { ddp.tensor({ 1, 2 }, { dtype = "uint8" }), "tensor([1, 2], dtype=uint8)" },
    { ddp.tensor({ 1.0, 2.0 }, { requires_grad = true }), "tensor([1., 2.], requires_grad=True)" },
  }
  for i, c in ipairs(cases) do
    it("prints case " .. i .. " as PyTorch does", function() assert.are.equal(c[2], tostring(c[1])) end)
  end

  it("summarises rows of large matrices like PyTorch", function()
    local t = ddp.arange(0, 1001, 1, { dtype = "float32" }):view(7, 143)
    assert.are.equal(table.concat({
      "tensor([[   0.,    1.,    2.,  ...,  140.,  141.,  142.],",
      "        [ 143.,  144.,  145.,  ...,  283.,  284.,  285.],",
      "        [ 286.,  287.,  288.,  ...,  426.,  427.,  428.],",
      "        ...,",
      "        [ 572.,  573.,  574.,  ...,  712.,  713.,  714.],",
      "        [ 715.,  716.,  717.,  ...,  855.,  856.,  857.],",
      "        [ 858.,  859.,  860.,  ...,  998.,  999., 1000.]])" }, "\n"), tostring(t))
  end)

  it("names the grad_fn of a computed tensor", function()
    local x = ddp.ones(2, { requires_grad = true })
    assert.matches("grad_fn=<MulBackward>", tostring(x * 2))
  end)
end)

describe("totable and item", function()
  it("read views in their logical order", function()
    local t = ddp.tensor({ { 1, 2, 3 }, { 4, 5, 6 } })
    assert.are.same({ { 1, 4 }, { 2, 5 }, { 3, 6 } }, t:t():totable())
    assert.are.same({ 2, 5 }, t:select(2, 2):totable())
    assert.are.equal(6, t[2][3]:item())
    assert.are.equal("integer", math.type(t[1][1]:item()))
    assert.are.equal(0.5, ddp.tensor({ 0.5 }, { dtype = "float64" }):item())
  end)

  it("item() names the shape of a tensor with more than one element", function()
    R.assert_error(function() return ddp.ones(2, 3):item() end, "one element", "[2, 3]")
  end)
end)

describe("storage sharing", function()
  it("views, detach and data write through to the base; clone does not", function()
    local base = ddp.zeros(2, 3)
    base:view(6)[4] = 1
    base:t()[3][1] = 2
    base:detach()[2][3]:fill_(3)
    base.data[1][2] = 4
    local c = base:clone()
    c:fill_(9)
    assert.are.same({ { 0, 4, 2 }, { 1, 0, 3 } }, base:totable())
    assert.are.equal(base:data_ptr(), base:contiguous():data_ptr())
    assert.are_not.equal(base:data_ptr(), base:t():contiguous():data_ptr())
  end)
end)

describe("in-place ops", function()
  it("add_, sub_, mul_, div_ with tensors (broadcast), numbers and alpha", function()
    local t = ddp.tensor({ { 1.0, 2.0 }, { 3.0, 4.0 } }, { dtype = "float64" })
    t:add_(ddp.tensor({ 10.0, 20.0 }, { dtype = "float64" }))
    assert.are.same({ { 11, 22 }, { 13, 24 } }, t:totable())
    t:sub_(1):mul_(2)
    assert.are.same({ { 20, 42 }, { 24, 46 } }, t:totable())
    t:div_(ddp.tensor({ { 2.0 }, { 4.0 } }, { dtype = "float64" }))
    assert.are.same({ { 10, 21 }, { 6, 11.5 } }, t:totable())
    t:add_(ddp.ones(2, 2, { dtype = "float64" }), -0.5)
    assert.are.same({ { 9.5, 20.5 }, { 5.5, 11 } }, t:totable())
  end)

  it("fill_, zero_ and copy_ (broadcasting and casting) update views of a tensor", function()
    local t = ddp.zeros(2, 3, { dtype = "float64" })
    t:narrow(2, 2, 2):fill_(5)
    t[1]:copy_(ddp.tensor({ 1, 2, 3 }))
    assert.are.same({ { 1, 2, 3 }, { 0, 5, 5 } }, t:totable())
    t:t():copy_(ddp.tensor({ { 7 }, { 8 }, { 9 } }))
    assert.are.same({ { 7, 8, 9 }, { 7, 8, 9 } }, t:totable())
    t:zero_()
    assert.are.same({ { 0, 0, 0 }, { 0, 0, 0 } }, t:totable())
  end)

  it("names the shapes when copy_ or an in-place op cannot broadcast", function()
    R.assert_error(function() ddp.zeros(2, 3):copy_(ddp.ones(4)) end, "copy_", "[4]", "[2, 3]")
    R.assert_error(function() ddp.zeros(2, 3):add_(ddp.ones(3, 2)) end, "[3, 2]", "[2, 3]")
  end)

  it("refuses to modify a leaf that requires grad outside no_grad", function()
    local x = ddp.ones(2, { requires_grad = true })
    R.assert_error(function() x:fill_(0) end, "fill_", "requires grad", "no_grad")
    R.assert_error(function() x:copy_(ddp.zeros(2)) end, "copy_", "requires grad")
    ddp.no_grad(function() x:mul_(3) end)
    assert.are.same({ 3, 3 }, x:totable())
  end)
end)
