-- Views (view, reshape, flatten, transpose, permute, narrow, select,
-- expand, squeeze, unsqueeze) and cat / stack: values against index maps
-- computed in Lua, storage sharing, gradients, and out-of-range errors.
local ddp = require "ddplua"
local gc = require "helpers.gradcheck"
local R = require "helpers.ref"

local x64 = R.randn({ 2, 3, 4 }, 901)
local X = R.from(x64)

-- out[idx] = a[src(idx)] for an output shape
local function remap(shape, a, src)
  local out = R.array(shape)
  R.each_index(shape, function(idx, k) out.v[k] = R.get(a, src(idx)) end)
  return out
end

local function permuted(a, perm)
  local shape = {}
  for d = 1, #perm do shape[d] = a.shape[perm[d]] end
  return remap(shape, a, function(idx)
    local s = {}
    for d = 1, #perm do s[perm[d]] = idx[d] end
    return s
  end)
end

local function reshaped(a, shape) return { shape = shape, v = a.v } end

describe("views", function()
  local cases = {
    { "view", function(t) return t:view(4, 6) end, reshaped(X, { 4, 6 }) },
    { "view with -1", function(t) return t:view(-1, 3) end, reshaped(X, { 8, 3 }) },
    { "reshape of a transposed tensor", function(t) return t:transpose(1, 3):reshape(4, 6) end,
      reshaped(permuted(X, { 3, 2, 1 }), { 4, 6 }) },
    { "flatten", function(t) return t:flatten(2) end, reshaped(X, { 2, 12 }) },
    { "flatten(1, 2)", function(t) return t:flatten(1, 2) end, reshaped(X, { 6, 4 }) },
    { "transpose", function(t) return t:transpose(1, -1) end, permuted(X, { 3, 2, 1 }) },
    { "permute", function(t) return t:permute(2, 3, 1) end, permuted(X, { 2, 3, 1 }) },
    { "permute with a table", function(t) return t:permute({ 3, 1, 2 }) end, permuted(X, { 3, 1, 2 }) },
    { "narrow", function(t) return t:narrow(3, 2, 2) end,
      remap({ 2, 3, 2 }, X, function(i) return { i[1], i[2], i[3] + 1 } end) },
    { "select", function(t) return t:select(2, 3) end, remap({ 2, 4 }, X, function(i) return { i[1], 3, i[2] } end) },
    { "select from the end", function(t) return t:select(1, -1) end,
      remap({ 3, 4 }, X, function(i) return { 2, i[1], i[2] } end) },
    { "index", function(t) return t[2] end, remap({ 3, 4 }, X, function(i) return { 2, i[1], i[2] } end) },
    { "expand", function(t) return t:narrow(2, 1, 1):expand(2, 5, 4) end,
      remap({ 2, 5, 4 }, X, function(i) return { i[1], 1, i[3] } end) },
    { "expand with new leading dims", function(t) return t:select(2, 1):expand(3, -1, -1) end,
      remap({ 3, 2, 4 }, X, function(i) return { i[2], 1, i[3] } end) },
    { "unsqueeze", function(t) return t:unsqueeze(2) end, reshaped(X, { 2, 1, 3, 4 }) },
    { "unsqueeze at the end", function(t) return t:unsqueeze(-1) end, reshaped(X, { 2, 3, 4, 1 }) },
    { "squeeze", function(t) return t:unsqueeze(1):unsqueeze(3):squeeze() end, X },
    { "squeeze(dim)", function(t) return t:unsqueeze(3):squeeze(3) end, X },
  }
  for _, c in ipairs(cases) do
    it(c[1] .. " gives the indexed values in float64 and float32", function()
      R.check_forward(c[2], { x64 }, c[3], { 0, 1e-7 }, { 0, 0 })
    end)
    it(c[1] .. " has finite-difference gradients", function()
      gc.assert_gradcheck(function(t) return c[2](t) end, { R.randn({ 2, 3, 4 }, 902):requires_grad_() })
    end)
  end

  it("share storage with their base", function()
    local base = ddp.zeros(2, 3)
    local t = base:t()
    t[3]:fill_(7)
    base:narrow(1, 2, 1):view(3)[1] = 5
    base:view(6)[2] = 4
    assert.are.same({ { 0, 4, 7 }, { 5, 0, 7 } }, base:totable())
    local e = ddp.tensor({ 1.0, 2.0 }):unsqueeze(1):expand(3, 2)
    assert.are.same({ 0, 1 }, e:stride())
    assert.is_false(t:is_contiguous())
    assert.are.equal(base:data_ptr() + 2 * 4, base:select(2, 3):data_ptr())
  end)

  it("name the shapes when a view is impossible", function()
    R.assert_error(function() return ddp.ones(2, 3):t():view(6) end, "view", "[6]", "[3, 2]", "reshape")
    R.assert_error(function() return ddp.ones(2, 3):view(4) end, "[4]", "6 elements")
    R.assert_error(function() return ddp.ones(2, 3):view(-1, -1) end, "only one dimension can be -1")
    R.assert_error(function() return ddp.ones(2, 3):reshape(5, -1) end, "[5, -1]", "6 elements")
    R.assert_error(function() return ddp.ones(2, 3):expand(4, 3) end, "expand", "[2, 3]", "[4, 3]")
    R.assert_error(function() return ddp.ones(2, 3):flatten(2, 1) end, "flatten", "start dimension 2")
  end)

  it("name a dimension out of range (0, too large, too negative)", function()
    local t = ddp.ones(2, 3)
    R.assert_error(function() return t:transpose(1, 3) end, "dimension 3", "1..2")
    R.assert_error(function() return t:transpose(0, 1) end, "dimension 0")
    R.assert_error(function() return t:permute(1, 1) end, "permute", "repeated")
    R.assert_error(function() return t:permute(1) end, "permute", "expected 2 dims")
    R.assert_error(function() return t:narrow(-3, 1, 1) end, "dimension -3")
    R.assert_error(function() return t:unsqueeze(4) end, "dimension 4", "1..3")
    R.assert_error(function() return t:squeeze(3) end, "dimension 3")
    R.assert_error(function() return t:size(0) end, "dimension 0")
  end)

  it("name a position out of range", function()
    local t = ddp.ones(2, 3)
    R.assert_error(function() return t:narrow(2, 3, 2) end, "narrow", "dimension 2 of size 3")
    R.assert_error(function() return t:narrow(2, 0, 1) end, "start 0")
    R.assert_error(function() return t:select(1, 3) end, "index 3", "size 2")
    R.assert_error(function() return t:select(1, 0) end, "index 0")
    R.assert_error(function() return t[-3] end, "index -3")
    R.assert_error(function() return t:view("a") end)
    R.assert_error(function() return t:narrow(1, {}, 1) end, "number expected", "table")
  end)
end)

describe("cat and stack", function()
  local a, b = R.randn({ 2, 3 }, 911), R.randn({ 2, 2 }, 912)
  local c = R.randn({ 2, 3 }, 913)

  -- the concatenation of arrays along dim
  local function cat_values(parts, dim)
    local shape = {}
    for d = 1, #parts[1].shape do shape[d] = parts[1].shape[d] end
    shape[dim] = 0
    for _, p in ipairs(parts) do shape[dim] = shape[dim] + p.shape[dim] end
    local out = R.array(shape)
    R.each_index(shape, function(idx, k)
      local i = idx[dim]
      for _, p in ipairs(parts) do
        if i <= p.shape[dim] then
          local s = { table.unpack(idx) }
          s[dim] = i
          out.v[k] = R.get(p, s)
          return
        end
        i = i - p.shape[dim]
      end
    end)
    return out
  end

  it("cat along each dim matches the reference", function()
    R.check_forward(function(p, q) return ddp.cat({ p, q }, 2) end, { a, b }, cat_values({ R.from(a), R.from(b) }, 2),
      { 0, 1e-7 }, { 0, 0 })
    R.check_forward(function(p, q) return ddp.cat({ p, q, p }, -2) end, { a, c },
      cat_values({ R.from(a), R.from(c), R.from(a) }, 1), { 0, 1e-7 }, { 0, 0 })
    R.check_forward(function(p, q) return ddp.cat({ p:t(), q:t() }) end, { a, c },
      cat_values({ R.from(a:t():contiguous()), R.from(c:t():contiguous()) }, 1), { 0, 1e-7 }, { 0, 0 })
  end)

  it("stack adds a new dim at any position", function()
    local A, C = R.from(a), R.from(c)
    R.check_forward(function(p, q) return ddp.stack({ p, q }) end, { a, c },
      cat_values({ reshaped(A, { 1, 2, 3 }), reshaped(C, { 1, 2, 3 }) }, 1), { 0, 1e-7 }, { 0, 0 })
    local ref3 = remap({ 2, 3, 2 }, A, function(i) return { i[1], i[2] } end)
    R.each_index({ 2, 3, 2 }, function(idx, k) ref3.v[k] = R.get(idx[3] == 1 and A or C, { idx[1], idx[2] }) end)
    R.check_forward(function(p, q) return ddp.stack({ p, q }, 3) end, { a, c }, ref3, { 0, 1e-7 }, { 0, 0 })
  end)

  it("have finite-difference gradients for every input", function()
    gc.assert_gradcheck(function(p, q) return ddp.cat({ p, q:t(), p }, 2) end,
      { a:clone():requires_grad_(), R.randn({ 2, 2 }, 914):requires_grad_() })
    gc.assert_gradcheck(function(p, q) return ddp.stack({ p, q }, 2) end,
      { a:clone():requires_grad_(), c:clone():requires_grad_() })
  end)

  it("name the mismatched tensor and shapes", function()
    R.assert_error(function() return ddp.cat({ ddp.ones(2, 3), ddp.ones(3, 2) }, 1) end, "tensor 2", "[3, 2]",
      "[2, 3]")
    R.assert_error(function() return ddp.cat({ ddp.ones(2, 3), ddp.ones(3) }) end, "tensor 2", "1 dimensions")
    R.assert_error(function() return ddp.stack({ ddp.ones(2), ddp.ones(3) }) end, "[1, 3]", "[1, 2]")
    R.assert_error(function() return ddp.cat({ ddp.ones(2), "x" }) end, "element 2", "string")
    R.assert_error(function() return ddp.cat({}) end, "non-empty")
    R.assert_error(function() return ddp.cat({ ddp.ones(2) }, 2) end, "dimension 2")
    R.assert_error(function() return ddp.cat(ddp.ones(2)) end, "table expected")
  end)
end)
