-- index_select: rows of a dimension picked by 1-based positions, forward
-- against a plain Lua reference, gradient against finite differences
-- (repeated positions accumulate), and the errors.
local ddp = require "ddplua"
local gc = require "helpers.gradcheck"

describe("index_select", function()
  local x = ddp.arange(12, { dtype = "float64" }):view(3, 4)

  it("picks rows along dimension 1 and 2, from a Lua list or an int64 tensor", function()
    assert.are.same({ { 8, 9, 10, 11 }, { 0, 1, 2, 3 }, { 8, 9, 10, 11 } }, x:index_select(1, { 3, 1, 3 }):totable())
    assert.are.same({ { 3, 1 }, { 7, 5 }, { 11, 9 } }, x:index_select(2, ddp.tensor({ 4, 2 })):totable())
    assert.are.same({ { 3, 1 }, { 7, 5 }, { 11, 9 } }, x:index_select(-1, { 4, 2 }):totable())
    assert.are.same({ 0, 4 }, { x:index_select(1, {}):size(1), x:index_select(1, {}):size(2) })
  end)

  it("matches finite differences, repeated positions accumulating", function()
    local a = gc.smooth_input({ 4, 3 }, 3)
    gc.assert_gradcheck(function(t) return t:index_select(1, { 2, 4, 2, 1 }) end, { a })
    local b = gc.smooth_input({ 3, 5 }, 4)
    gc.assert_gradcheck(function(t) return t:transpose(1, 2):index_select(2, { 3, 3 }) end, { b })
    local s = x:clone():requires_grad_()
    s:index_select(1, { 2, 2, 2 }):sum():backward()
    assert.are.same({ { 0, 0, 0, 0 }, { 3, 3, 3, 3 }, { 0, 0, 0, 0 } }, s.grad:totable())
  end)

  -- past the first dim the CPU selects in place (cpu_index_dim.c): every dim of a 4-d tensor, each element size,
  -- strided input, repeated and empty index lists, against positions picked by hand; the gradient of each dim
  -- (float32 and float64 in place, bfloat16 through the moved dim) against the index_add it is
  it("selects along every dim in place, each dtype, with the gradient of each", function()
    local shape = { 2, 3, 4, 5 }
    for _, dt in ipairs({ "float32", "float64", "bfloat16", "int64", "uint8" }) do
      local base = ddp.arange(2 * 3 * 4 * 5, { dtype = dt }):view(2, 3, 4, 5)
      for _, x4 in ipairs({ base, base:transpose(2, 4):contiguous():transpose(2, 4) }) do
        local src = x4:double():totable()
        for dim = 1, 4 do
          for _, list in ipairs({ { shape[dim], 1, shape[dim] }, {}, { 2 } }) do
            local got = x4:index_select(dim, list)
            local sz = got:size()
            assert.are.equal(#list, sz[dim])
            local g = got:double():totable()
            for a = 1, sz[1] do
              for b = 1, sz[2] do
                for c = 1, sz[3] do
                  for d = 1, sz[4] do
                    local p = { a, b, c, d }
                    p[dim] = list[p[dim]]
                    assert.are.equal(src[p[1]][p[2]][p[3]][p[4]], g[a][b][c][d],
                      string.format("%s dim %d at %d,%d,%d,%d", dt, dim, a, b, c, d))
                  end
                end
              end
            end
          end
        end
      end
    end
    for _, dt in ipairs({ "float32", "float64", "bfloat16" }) do
      for dim = 1, 4 do
        local x4 = ddp.randn(shape):to(dt):requires_grad_()
        local list = { shape[dim], 1, shape[dim], 2 }
        local w = ddp.randn(x4:index_select(dim, list):size()):to(dt)
        x4:index_select(dim, list):mul(w):sum():backward()
        local want = ddp.zeros(shape, { dtype = "float64" })
        for j, p in ipairs(list) do
          want:narrow(dim, p, 1):add_(w:double():narrow(dim, j, 1))
        end
        local tol = dt == "bfloat16" and 0.02 or 1e-6
        assert.is_true((x4.grad:double() - want):abs():max():item() <= tol, dt .. " gradient along dim " .. dim)
      end
    end
    local ok, err = pcall(function() return ddp.zeros(2, 3):index_select(2, { 4 }) end)
    assert.is_false(ok)
    assert.matches("index 4 at position 1 is out of range 1..3", err)
    assert.are.same({ 2, 0, 2 }, ddp.zeros(2, 0, 4):index_select(3, { 1, 4 }):size())
  end)

  it("names a position out of range, a wrong index type and a bad dimension", function()
    local ok, err = pcall(function() return x:index_select(1, { 1, 4 }) end)
    assert.is_false(ok)
    assert.matches("index 4 at position 2 is out of range 1..3", err)
    ok, err = pcall(function() return x:index_select(1, { 0 }) end)
    assert.is_false(ok)
    assert.matches("index 0 at position 1 is out of range", err)
    ok, err = pcall(function() return x:index_select(1, ddp.tensor({ 1.0, 2.0 })) end)
    assert.is_false(ok)
    assert.matches("1%-d int64 tensor, got float32", err)
    ok, err = pcall(function() return x:index_select(1, { 1.5 }) end)
    assert.is_false(ok)
    assert.matches("position 1 of the index list is not an integer", err)
    ok, err = pcall(function() return x:index_select(3, { 1 }) end)
    assert.is_false(ok)
    assert.matches("dimension 3 out of range", err)
  end)
end)
