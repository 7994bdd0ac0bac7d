-- split, chunk, cumsum, flip, repeat_, tile, norm, var, std, einsum:
-- forward against plain-Lua float64 references (float64 and float32),
-- gradients against finite differences through strided and broadcast
-- views, PyTorch on the same inputs, empty tensors and bad arguments.
local ddp = require "ddplua"
local gc = require "helpers.gradcheck"
local R = require "helpers.ref"
local TR = require "helpers.torch_ref"

local function vals(t) return gc.flat_values(t) end

describe("split and chunk", function()
  local x = ddp.arange(10, { dtype = "float64" }):view(2, 5)

  it("cut a dim into views of a size, of given sections, or into n chunks", function()
    local a, b, c = x:split(2, 2)
    assert.are.same({ { 0, 1 }, { 5, 6 } }, a:totable())
    assert.are.same({ { 2, 3 }, { 7, 8 } }, b:totable())
    assert.are.same({ { 4 }, { 9 } }, c:totable())
    local p, q = ddp.split(x, { 1, 4 }, -1)
    assert.are.same({ 2, 1 }, p:size())
    assert.are.same({ 2, 4 }, q:size())
    assert.are.equal(3, select("#", x:chunk(3, 2)))  -- sizes 2, 2, 1 (PyTorch's chunk)
    assert.are.equal(2, select("#", x:chunk(2)))      -- dim 1 by default
    assert.are.equal(2, select("#", x:chunk(5)))      -- no more chunks than rows
    local r1, r2 = x:chunk(2)
    assert.are.same({ { 5, 6, 7, 8, 9 } }, r2:totable())
    assert.are.equal(r1:data_ptr(), x:data_ptr()) -- views
    local parts = { x:split(5, 2) }
    assert.are.equal(1, #parts)
  end)

  it("pass gradients to the whole, and check their arguments", function()
    gc.assert_gradcheck(function(t)
      local a, b = t:t():split({ 2, 3 }, 1)
      return a:sum(1) * 2 + b:sum(1)
    end, { gc.smooth_input({ 3, 5 }, 1) })
    R.assert_error(function() x:split({ 1, 2 }, 2) end, "split: the sections sum to 3 but dimension 2 has size 5")
    R.assert_error(function() x:split(0, 2) end, "split: the split size must be positive")
    R.assert_error(function() x:chunk(0) end, "chunk: the number of chunks must be positive")
    R.assert_error(function() ddp.tensor(1.0):split(1) end, "cannot split a 0-dimensional tensor")
  end)

  it("chunk an empty dim into n empty parts, as PyTorch (the differential suite found 1)", function()
    local parts = { ddp.zeros(0, 3):chunk(3) }
    assert.are.equal(3, #parts)
    for _, t in ipairs(parts) do assert.are.same({ 0, 3 }, t:size()) end
    assert.are.equal(4, select("#", ddp.zeros(2, 0):chunk(4, 2)))
    assert.are.equal(1, select("#", ddp.zeros(0):split(2))) -- split keeps PyTorch's one empty part
  end)
end)

describe("cumsum and flip", function()
  it("cumsum sums prefixes along a dim, integers as int64, with the reversed sum as gradient", function()
    local x = R.randn({ 3, 4 }, 2)
    local ref = R.from(x)
    for r = 1, 3 do
      for c = 2, 4 do ref.v[(r - 1) * 4 + c] = ref.v[(r - 1) * 4 + c] + ref.v[(r - 1) * 4 + c - 1] end
    end
    R.check_forward(function(t) return t:cumsum(2) end, { x }, ref)
    R.check_forward(function(t) return ddp.cumsum(t:t(), 1):t() end, { x }, ref)
    local i = ddp.tensor({ 1, 2, 3 }):byte():cumsum(1)
    assert.are.same({ 1, 3, 6 }, i:totable())
    assert.are.equal("int64", i:dtype())
    gc.assert_gradcheck(function(t) return t:cumsum(1) end, { gc.smooth_input({ 4, 3 }, 3) })
    gc.assert_gradcheck(function(t) return t:t():cumsum(-1) end, { gc.smooth_input({ 4, 3 }, 4) })
    assert.are.same({ 0 }, ddp.zeros(0):cumsum(1):size())
    R.assert_error(function() x:cumsum() end, "cumsum: the dimension is required")
  end)

  it("flip reverses the given dims, as a copy, with the flipped gradient", function()
    local x = ddp.arange(6, { dtype = "float64" }):view(2, 3)
    assert.are.same({ { 2, 1, 0 }, { 5, 4, 3 } }, x:flip(2):totable())
    assert.are.same({ { 5, 4, 3 }, { 2, 1, 0 } }, x:flip({ 1, 2 }):totable())
    assert.are.same({ { 5, 4, 3 }, { 2, 1, 0 } }, ddp.flip(x, 1, -1):totable())
    assert.are_not.equal(x:data_ptr(), x:flip({}):data_ptr())
    gc.assert_gradcheck(function(t) return t:t():flip(1, 2) end, { gc.smooth_input({ 2, 3 }, 5) })
    R.assert_error(function() x:flip(1, 1) end, "flip: dimension 1 appears more than once")
  end)

  -- the flip reads a view with negative strides: every element size, strided, broadcast and empty inputs, and
  -- each subset of three dims, against positions reversed by hand
  it("flip matches reversed positions for every dtype, view and subset of dims", function()
    local views = {
      contiguous = function(b) return b end, transposed = function(b) return b:transpose(1, 3) end,
      narrowed = function(b) return b:narrow(3, 2, 3) end,
      broadcast = function(b) return b:narrow(1, 1, 1):narrow(2, 1, 1):expand(2, 3, 5) end,
    }
    for _, dt in ipairs({ "float32", "float64", "bfloat16", "int64", "uint8" }) do
      local base = ddp.arange(2 * 3 * 5, { dtype = dt }):view(2, 3, 5)
      for name, view in pairs(views) do
        local x = view(base)
        local sh, src = x:size(), x:double():totable()
        for mask = 0, 7 do
          local dims = {}
          for d = 1, 3 do
            if mask & (1 << (d - 1)) ~= 0 then dims[#dims + 1] = d end
          end
          local got = x:flip(dims)
          assert.are.equal(dt, got:dtype())
          assert.is_true(got:is_contiguous())
          local g = got:double():totable()
          for i = 1, sh[1] do
            for j = 1, sh[2] do
              for k = 1, sh[3] do
                local p = { i, j, k }
                for _, d in ipairs(dims) do p[d] = sh[d] + 1 - p[d] end
                assert.are.equal(src[p[1]][p[2]][p[3]], g[i][j][k],
                  string.format("%s %s dims %s at %d,%d,%d", dt, name, table.concat(dims, ","), i, j, k))
              end
            end
          end
        end
      end
    end
    assert.are.same({ 2, 0, 3 }, ddp.zeros(2, 0, 3):flip({ 1, 2, 3 }):size())
    assert.are.same({ 7 }, ddp.tensor({ 7 }):flip(1):totable())
  end)
end)

describe("repeat_ and tile", function()
  it("copy the tensor along each dim (leading dims added), as PyTorch's repeat and tile", function()
    local x = ddp.tensor({ { 1, 2 }, { 3, 4 } })
    assert.are.same({ { 1, 2, 1, 2 }, { 3, 4, 3, 4 }, { 1, 2, 1, 2 }, { 3, 4, 3, 4 } }, x:repeat_(2, 2):totable())
    assert.are.same({ 3, 2, 2 }, x:repeat_({ 3, 1, 1 }):size())
    assert.are.same({ { 1, 2, 1, 2 }, { 3, 4, 3, 4 } }, x:tile(2):totable()) -- reps padded with leading ones
    assert.are.same({ 2, 2, 2 }, ddp.tile(x, { 2, 1, 1 }):size())
    assert.are.same({ 0, 2 }, x:repeat_(0, 1):size())
    local y = x:repeat_(1, 1)
    assert.are_not.equal(x:data_ptr(), y:data_ptr())
    gc.assert_gradcheck(function(t) return t:t():repeat_(2, 1, 3) end, { gc.smooth_input({ 3, 2 }, 6) })
    R.assert_error(function() x:repeat_(2) end, "repeat: 1 repeat count(s) given for a 2-dimensional tensor")
    R.assert_error(function() x:repeat_(2, -1) end, "repeat: repeat count 2 is -1")
  end)
end)

describe("norm, var and std", function()
  local function pnorm(a, p)
    local s = 0
    for _, v in ipairs(a) do s = s + math.abs(v) ^ p end
    return s ^ (1 / p)
  end

  it("norm matches the reference for p = 1, 2, 3, 0.5, inf, -inf, 0 over all or some dims", function()
    local x = R.randn({ 3, 4 }, 7)
    local rows = {}
    for r = 1, 3 do rows[r] = vals(x[r]) end
    for _, p in ipairs({ 1, 2, 3, 0.5 }) do
      R.check_forward(function(t) return t:norm(p) end, { x }, { shape = {}, v = { pnorm(vals(x), p) } })
      local ref = { shape = { 3 }, v = {} }
      for r = 1, 3 do ref.v[r] = pnorm(rows[r], p) end
      R.check_forward(function(t) return t:norm(p, 2) end, { x }, ref)
      R.check_forward(function(t) return t:t():norm(p, 1, true) end, { x }, { shape = { 1, 3 }, v = ref.v })
    end
    local mx, mn = 0, math.huge
    for _, v in ipairs(vals(x)) do mx, mn = math.max(mx, math.abs(v)), math.min(mn, math.abs(v)) end
    assert.are.equal(mx, x:norm(math.huge):item())
    assert.are.equal(mn, x:norm(-math.huge):item())
    assert.are.equal(3, ddp.tensor({ 1.0, 0.0, -2.0, 5.0 }):norm(0):item())
    assert.are.equal(x:norm():item(), x:norm("fro"):item())
    assert.are.same({ 4 }, ddp.norm(x, 2, { dim = 1 }):size())
    assert.are.same({ 1, 4 }, x:norm(2, { dim = { 1 }, keepdim = true }):size())
  end)

  it("norm has PyTorch's gradient: finite differences, 0 at a zero vector, inf-norm ties split", function()
    for _, p in ipairs({ 1, 2, 3, 1.5 }) do
      gc.assert_gradcheck(function(t) return t:t():norm(p, 1) end, { gc.smooth_input({ 3, 4 }, 8) })
    end
    gc.assert_gradcheck(function(t) return t:expand(2, 3):norm() end, { gc.smooth_input({ 3 }, 9) })
    local z = ddp.zeros(3, { dtype = "float64" }):requires_grad_()
    z:norm():backward()
    assert.are.same({ 0, 0, 0 }, vals(z.grad))
    local t = ddp.tensor({ 2, -2, 1 }, { dtype = "float64" }):requires_grad_()
    t:norm(math.huge):backward()
    assert.are.same({ 0.5, -0.5, 0 }, vals(t.grad))
    -- float32, p < 2 and a tiny element: x |x|^(p-2) overflowed to inf where PyTorch's sign(x) |x|^(p-1) * norm^(1-p)
    -- stays finite (found by the differential suite)
    local tiny = ddp.tensor({ -1e-29, 4e27, 0 }):requires_grad_()
    tiny:norm(0.5):backward()
    local g = vals(tiny.grad)
    local n = (math.sqrt(1e-29) + math.sqrt(4e27)) ^ 2
    for _, v in ipairs(g) do assert.is_true(v == v and math.abs(v) < math.huge, tostring(v)) end
    assert.is_true(math.abs(g[1] - -(1e-29) ^ -0.5 * n ^ 0.5) <= 1e-5 * math.abs(g[1]), tostring(g[1]))
    assert.is_true(math.abs(g[2] - (4e27) ^ -0.5 * n ^ 0.5) <= 1e-5 * math.abs(g[2]), tostring(g[2]))
    assert.are.equal(0, g[3]) -- 0 at a zero element for p < 1, as PyTorch
    -- a NaN attains the inf-norm (PyTorch's mask): its row gets 0, not 0/0 = NaN (the differential suite)
    local withnan = ddp.tensor({ 0 / 0, 1, -2 }, { dtype = "float64" }):requires_grad_()
    withnan:norm(math.huge):backward()
    assert.are.same({ 0, 0, 0 }, vals(withnan.grad)) -- PyTorch gives 0 at the NaN too
    -- the inf-norms of an empty tensor are 0, as torch.norm gives (was an error; the differential suite)
    assert.are.same({ { 0, 0, 0 } }, ddp.zeros(0, 3):norm(math.huge, 1, true):totable())
    assert.are.equal(0, ddp.zeros(0, 3):norm(-math.huge):item())
    assert.are.same({ 0 }, ddp.zeros(3, 0):norm(math.huge, 1):size())
    local one = ddp.tensor({ 1e-30, 3e30 }):requires_grad_()
    one:norm(1.5):backward()
    for _, v in ipairs(vals(one.grad)) do assert.is_true(v == v and math.abs(v) < math.huge, tostring(v)) end
  end)

  it("var and std match the reference with unbiased, correction and keepdim, and their gradients", function()
    local x = R.randn({ 3, 5 }, 10)
    local function ref(dim, corr, keep)
      local a = R.from(x)
      local m = R.mean(a, { dim }, true)
      local s = R.reduce(R.map2(a, m, function(u, v) return (u - v) ^ 2 end), { dim }, keep, 0,
        function(acc, v) return acc + v end)
      local n = a.shape[dim]
      return R.map(s, function(v) return v / (n - corr) end)
    end
    R.check_forward(function(t) return t:var(2) end, { x }, ref(2, 1, false))
    R.check_forward(function(t) return t:var(1, { unbiased = false, keepdim = true }) end, { x }, ref(1, 0, true))
    R.check_forward(function(t) return ddp.var(t, 2, { correction = 2 }) end, { x }, ref(2, 2, false))
    R.check_forward(function(t) return t:var(2, false, true) end, { x }, ref(2, 0, true)) -- (dim, unbiased, keepdim)
    R.check_forward(function(t) return t:std(2) end, { x }, R.map(ref(2, 1, false), math.sqrt))
    local all = R.from(x)
    local mean, ss = 0, 0
    for _, v in ipairs(all.v) do mean = mean + v / #all.v end
    for _, v in ipairs(all.v) do ss = ss + (v - mean) ^ 2 end
    R.check_forward(function(t) return t:var() end, { x }, { shape = {}, v = { ss / (#all.v - 1) } })
    R.check_forward(function(t) return t:std({ unbiased = false }) end, { x }, { shape = {}, v = { math.sqrt(ss / #all.v) } })
    gc.assert_gradcheck(function(t) return t:t():var(1) end, { gc.smooth_input({ 3, 4 }, 11) })
    gc.assert_gradcheck(function(t) return t:std(2, { keepdim = true }) end, { gc.smooth_input({ 3, 4 }, 12) })
    -- a constant row has std 0 and PyTorch's gradient 0 there, not sqrt's 0 * inf = NaN (the differential suite)
    local c = ddp.tensor({ { 2, 2, 2 }, { 1, 2, 4 } }, { dtype = "float64" }):requires_grad_()
    c:std(2):sum():backward()
    local cg = vals(c.grad)
    assert.are.same({ 0, 0, 0 }, { cg[1], cg[2], cg[3] })
    assert.are.same({ 0, 1 }, { c:std(2):totable()[1], c:std(2):totable()[2] > 0 and 1 or 0 })
    -- identical values have variance exactly 0 (the mean of three 0.1s is an ulp off 0.1; PyTorch's Welford gives 0)
    assert.are.equal(0, ddp.full({ 3 }, 0.1, { dtype = "float64" }):std():item())
    assert.are.equal(0, ddp.full({ 2, 3 }, 1e30, { dtype = "float64" }):var(2, { unbiased = false }):max():item())
    -- float32 accumulates in float64 (as PyTorch): squares of 1e27 overflow float32, their std does not
    local big = ddp.tensor({ 1e27, -1e27, 3e26 }):std():item()
    assert.is_true(math.abs(big - 1.0148892e27) <= 1e-6 * 1.0148892e27, tostring(big))
    assert.are.equal("float32", ddp.tensor({ 1e27, -1e27 }):var(1):dtype())
    R.assert_error(function() ddp.tensor({ 1, 2 }):var() end, "var: expected a floating point tensor")
    R.assert_error(function() x:var(1, { unbiased = true, correction = 1 }) end, "pass unbiased or correction, not both")
    R.assert_error(function() x:std(1, { bias = 1 }) end, "std: unknown option 'bias'")
    R.assert_error(function() x:norm(-1) end, "norm: p must be >= 0 or +-inf")
  end)

  it("match PyTorch, values and gradients", function()
    if not TR.available() then return pending("skipped: /usr/bin/python3 cannot import torch") end
    local x = R.randn({ 2, 3, 4 }, 13):requires_grad_()
    local y = x:norm(3, { 2, 3 }) + x:var(2):sum(2) + x:std({ 1, 3 }, { correction = 0 }):sum() + x:norm(math.huge, 3):sum(2)
      + x:cumsum(3):flip(1):sum({ 2, 3 })
    y:sum():backward()
    local ref = TR.run([[
x = T["x"].requires_grad_()
y = x.norm(3, (1, 2)) + x.var(1).sum(1) + x.std((0, 2), unbiased=False).sum() + x.norm(float("inf"), 2).sum(1) \
    + x.cumsum(2).flip(0).sum((1, 2))
y.sum().backward()
OUT["y"], OUT["g"] = y, x.grad
]], { x = x })
    R.assert_close(y, R.from(ref.y), 1e-13, 1e-13, "forward")
    R.assert_close(x.grad, R.from(ref.g), 1e-13, 1e-13, "gradient")
  end)
end)

describe("einsum", function()
  local a, b = R.randn({ 3, 4 }, 20), R.randn({ 4, 5 }, 21)
  local A, B = R.randn({ 2, 3, 4 }, 22), R.randn({ 2, 4, 5 }, 23)

  it("computes the common contractions as matmul, transposes, sums and outer products", function()
    R.check_forward(function(x, y) return ddp.einsum("ij,jk->ik", x, y) end, { a, b }, R.from(a:matmul(b)))
    R.check_forward(function(x, y) return ddp.einsum("bij,bjk->bik", { x, y }) end, { A, B }, R.from(A:matmul(B)))
    R.check_forward(function(x) return ddp.einsum("ij->ji", x) end, { a }, R.from(a:t():contiguous()))
    R.check_forward(function(x) return ddp.einsum("ij->", x) end, { a }, R.from(a:sum()))
    R.check_forward(function(x) return ddp.einsum("ij->j", x) end, { a }, R.from(a:sum(1)))
    R.check_forward(function(x, y) return ddp.einsum("i,j->ij", x, y) end, { a[1], b[1] },
      R.from(a[1]:view(4, 1):matmul(b[1]:view(1, 5))))
    R.check_forward(function(x, y) return ddp.einsum("ij,kj", x, y) end, { a, b:t():contiguous() },
      R.from(a:matmul(b)))                                                   -- implicit result: "ik"
    local q, k = R.randn({ 2, 3, 5, 4 }, 24), R.randn({ 2, 3, 6, 4 }, 25)
    R.check_forward(function(x, y) return ddp.einsum("bhtd,bhsd->bhts", x, y) end, { q, k },
      R.from(q:matmul(k:transpose(3, 4))))
    R.check_forward(function(x, y, z) return ddp.einsum("ij,jk,kl->il", x, y, z) end, { a, b, b:t():contiguous() },
      R.from(a:matmul(b):matmul(b:t())))
  end)

  it("has the gradient of the ops it is made of", function()
    gc.assert_gradcheck(function(x, y) return ddp.einsum("bji,bjk->bik", x, y) end,
      { gc.smooth_input({ 2, 3, 2 }, 26), gc.smooth_input({ 2, 3, 4 }, 27) })
    gc.assert_gradcheck(function(x, y) return ddp.einsum("ij,j->i", x:t(), y) end,
      { gc.smooth_input({ 3, 2 }, 28), gc.smooth_input({ 3 }, 29) })
  end)

  it("matches PyTorch", function()
    if not TR.available() then return pending("skipped: /usr/bin/python3 cannot import torch") end
    local x, y = R.randn({ 2, 3, 4, 5 }, 30), R.randn({ 3, 5, 2 }, 31)
    local z = ddp.einsum("abcd,bde->aec", x, y)
    local ref = TR.run([[OUT["z"] = torch.einsum("abcd,bde->aec", T["x"], T["y"])]], { x = x, y = y })
    R.assert_close(z, R.from(ref.z), 1e-13, 1e-13, "einsum")
  end)

  it("names what is wrong with an equation", function()
    R.assert_error(function() ddp.einsum("ij,jk->ik", a) end, "einsum: the equation names 2 operand(s), got 1")
    R.assert_error(function() ddp.einsum("ij,jk->ik", a, a) end, "einsum: the label 'j' has size 3 in operand 2 but 4")
    R.assert_error(function() ddp.einsum("ijk->i", a) end, "operand 1 has 2 dimensions but its subscripts 'ijk'")
    R.assert_error(function() ddp.einsum("ii->i", a) end, "repeats within operand 1")
    R.assert_error(function() ddp.einsum("...ij->ij", a) end, "ellipses")
    R.assert_error(function() ddp.einsum("ij->ix", a) end, "the result's label 'x' is not in any operand")
    R.assert_error(function() ddp.einsum("ij->ij", "a") end, "operand 1 is a string")
  end)
end)
