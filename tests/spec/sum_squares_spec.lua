-- norm (p = 2) and mse_loss through the backend's one-pass sum of squares (src/backends/cpu/cpu_moments.c's
-- dp_cpu_sum_squares, the vec tables' sum_sq and col_sum_sq): every layout the op layer sends there (all dims, a
-- leading, trailing or middle run; rows cut in chunks; column blocks), on every kernel set and thread count, against
-- a float64 reference summed in Lua from the float32 squares, PyTorch (values, its inf for squares past float32,
-- gradients) and the composed path left for the other cases.
local ddp = require "ddplua"
local R = require "helpers.ref"
local TR = require "helpers.torch_ref"

-- sqrt of the sum over dims (1-based, {} = all) of the float32 squares of a (R.from values), in Lua doubles
local function f32(v) return string.unpack("f", string.pack("f", v)) end
local function ref_norm(a, dims, keep)
  local sq = R.map(a, function(u) return f32(u * u) end)
  return R.map(R.reduce(sq, dims, keep, 0, function(acc, v) return acc + v end), math.sqrt)
end

local function norm_of(x, dims, keep)
  if #dims == 0 and not keep then return x:norm() end
  if #dims == 0 then
    for d = 1, x:dim() do dims[d] = d end
  end
  return x:norm(2, #dims == 1 and dims[1] or dims, keep)
end

-- the inputs and their Lua references, made once for every kernel set and thread count (the references of the
-- 140002-value cases are most of this file's time)
local norm_cases, mse_cases
local function make_cases()
  if norm_cases then return end
  ddp.manual_seed(5)
  norm_cases = {}
  for i, c in ipairs({
    { { 7 }, {} }, { { 3, 5 }, { 1 } }, { { 3, 5 }, { 2 } }, { { 2, 3, 17 }, { 3 } }, { { 2, 3, 4 }, { 1, 2 } },
    { { 2, 3, 4 }, { 2, 3 } }, { { 2, 600, 3 }, { 2 } }, { { 3, 2, 1100 }, { 2 } }, { { 2, 3, 5, 7 }, { 2, 3 } },
    { { 1, 1, 1 }, { 2 } }, { { 2, 70001 }, { 2 } }, { { 3, 1030 }, { 1 } }, { { 33 }, { 1 } },
  }) do
    local x = ddp.randn(c[1]) * 3 + 1
    local a = R.from(x)
    norm_cases[i] = { x = x, dims = c[2], ref = { [false] = ref_norm(a, c[2], false), [true] = ref_norm(a, c[2], true) } }
  end
  ddp.manual_seed(6)
  mse_cases = {}
  for i, shape in ipairs({ { 1 }, { 17 }, { 3, 129 }, { 2, 70001 }, { 4, 3, 5 } }) do
    local a, b = ddp.randn(shape), ddp.randn(shape) * 2
    local da, db = R.from(a), R.from(b)
    local s, n = 0, #da.v
    for j = 1, n do
      local d = f32(da.v[j] - db.v[j])
      s = s + f32(d * d)
    end
    mse_cases[i] = { a = a, b = b, sum = s, n = n, shape = shape }
  end
end

R.describe_kernel_sets(_ENV, { 1, 2 }, function(isa)
  describe("norm through the sum of squares", function()
    it("matches the float64 sums of the float32 squares for every run of dims (" .. isa .. ")", function()
      make_cases()
      for i, c in ipairs(norm_cases) do
        for _, keep in ipairs({ false, true }) do
          -- the double sum's sqrt rounded once; 16-square float lanes add ~1e-7 relative
          R.assert_close(norm_of(c.x, { table.unpack(c.dims) }, keep), c.ref[keep], 0, 1e-6,
            string.format("case %d keep %s", i, keep))
        end
      end
    end)

    it("reads strided and expanded inputs, leaves non-adjacent dims to the composition, keeps edge values", function()
      local t = ddp.randn(5, 600)
      R.assert_close(t:t():norm(2, 2), ref_norm(R.from(t:t():contiguous()), { 2 }, false), 0, 1e-6, "transposed")
      local e = ddp.full({ 4, 1 }, 3, { dtype = "float32" }):expand(4, 9)
      assert.are.same({ 9, 9, 9, 9 }, e:norm(2, 2):totable())
      local x = ddp.randn(3, 4, 5)
      R.assert_close(x:norm(2, { 1, 3 }), ref_norm(R.from(x), { 1, 3 }, false), 0, 1e-6, "dims 1 and 3")
      local v = ddp.tensor({ { 1, 0 / 0, 2 }, { 1, math.huge, 2 }, { 3, 4, 0 }, { 1e20, 0, 0 }, { -1e-30, 0, 0 } })
      local n = v:norm(2, 2):totable()
      assert.is_true(n[1] ~= n[1], "NaN")
      assert.are.same({ math.huge, 5, math.huge, 0 }, { n[2], n[3], n[4], n[5] }) -- 1e20^2 is inf in float32
      assert.are.equal(0, ddp.zeros(0, 3):norm():item())
      assert.are.same({ 0, 0, 0 }, ddp.zeros(0, 3):norm(2, 1):totable())
    end)
  end)

  describe("mse_loss through the sum of squares", function()
    it("matches the float64 mean and sum of the float32 squared differences (" .. isa .. ")", function()
      make_cases()
      for _, c in ipairs(mse_cases) do
        local a, b, s, n, shape = c.a, c.b, c.sum, c.n, c.shape
        local mean, sum = ddp.mse_loss(a, b), ddp.mse_loss(a, b, { reduction = "sum" })
        assert.are.same({}, mean:size())
        assert.is_true(math.abs(mean:item() - s / n) <= 1e-6 * (s / n), table.concat(shape, "x") .. " mean")
        assert.is_true(math.abs(sum:item() - s) <= 1e-6 * s, table.concat(shape, "x") .. " sum")
        -- a transposed operand: the same values as its contiguous copy
        if #shape == 2 then
          local at = a:t():contiguous():t()
          assert.are.equal(mean:item(), ddp.mse_loss(at, b):item())
        end
      end
    end)
  end)
end)

describe("norm and mse_loss against PyTorch", function()
  it("match PyTorch's values and gradients, with the composed paths alike", function()
    if not TR.available() then return pending("skipped: /usr/bin/python3 cannot import torch") end
    ddp.manual_seed(43)
    local x = (ddp.randn(3, 7, 129) * 4 + 2):requires_grad_()
    local a, b = ddp.randn(5, 33):requires_grad_(), ddp.randn(5, 33):requires_grad_()
    local big = ddp.tensor({ { 1e20, 1 }, { 3, 4 } })
    local y = x:norm(2, 3):sum() + x:norm(2, { 1, 2 }, true):sum() + x:norm() + ddp.mse_loss(a, b) +
      ddp.mse_loss(a, b, { reduction = "sum" }) * 0.5
    y:backward()
    local r = TR.run([[
x, a, b = T["x"].requires_grad_(), T["a"].requires_grad_(), T["b"].requires_grad_()
F = torch.nn.functional
y = x.norm(dim=2).sum() + x.norm(dim=(0, 1), keepdim=True).sum() + x.norm() + F.mse_loss(a, b) + \
    F.mse_loss(a, b, reduction="sum") * 0.5
y.backward()
OUT.update(y=y, gx=x.grad, ga=a.grad, gb=b.grad, big=T["big"].norm(dim=1), bigall=T["big"].norm())
]], { x = x, a = a, b = b, big = big })
    R.assert_close(y, R.from(r.y), 1e-5, 1e-5, "forward")
    R.assert_close(x.grad, R.from(r.gx), 1e-5, 1e-5, "norm's gradient")
    R.assert_close(a.grad, R.from(r.ga), 1e-6, 1e-5, "mse_loss's gradient for the input")
    R.assert_close(b.grad, R.from(r.gb), 1e-6, 1e-5, "mse_loss's gradient for the target")
    assert.are.same(r.big:totable(), big:norm(2, 2):totable())
    assert.are.equal(r.bigall:item(), big:norm():item())
    -- the fused mse_loss and the composition (float64 takes the composed path) agree on values and gradients
    local a64, b64 = a:detach():double():requires_grad_(), b:detach():double():requires_grad_()
    ddp.mse_loss(a64, b64):backward()
    local a2, b2 = a:detach():requires_grad_(), b:detach():requires_grad_()
    ddp.mse_loss(a2, b2):backward()
    R.assert_close(a2.grad, R.from(a64.grad), 1e-7, 1e-5, "fused and composed gradients")
    R.assert_close(b2.grad, R.from(b64.grad), 1e-7, 1e-5, "fused and composed target gradients")
    -- only the target needing a gradient
    local c = ddp.randn(4):requires_grad_()
    ddp.mse_loss(ddp.zeros(4), c):backward()
    R.assert_close(c.grad, R.from(c:detach() * 0.5), 1e-7, 1e-6, "d/dc mean((0 - c)^2) = 2c / 4")
  end)

  it("keeps the errors of mismatched operands", function()
    R.assert_error(function() ddp.mse_loss(ddp.randn(3), ddp.randn(4)) end, "mse_loss")
    R.assert_error(function() ddp.randn(3):norm(2, 3) end, "norm: dimension 3 out of range")
    R.assert_error(function() ddp.randn(3):norm(2, { 1, 1 }) end, "norm: dimension 1 appears more than once")
  end)
end)
