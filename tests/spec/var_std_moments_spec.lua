-- var and std through the backend's moments (src/backends/cpu/cpu_moments.c): every layout the op layer sends
-- there (all dims, leading, trailing, a middle run; rows cut in chunks and merged; column blocks), the composed
-- path it leaves for other dims and dtypes, against a float64 reference summed in Lua from the float32 values,
-- finite differences and PyTorch.
local ddp = require "ddplua"
local gc = require "helpers.gradcheck"
local R = require "helpers.ref"
local TR = require "helpers.torch_ref"

-- var (or std) of a over dims (1-based, {} = all) with N - corr in the denominator, in Lua doubles
local function ref(a, dims, corr, keep, is_std)
  local m = R.mean(a, dims, true)
  local sq = R.map2(a, m, function(u, v) return (u - v) ^ 2 end)
  local n = 1
  for d = 1, #a.shape do
    local hit = #dims == 0
    for _, e in ipairs(dims) do hit = hit or e == d end
    if hit then n = n * a.shape[d] end
  end
  local s = R.reduce(sq, dims, keep, 0, function(acc, v) return acc + v end)
  local div = n - corr > 0 and n - corr or 0
  return R.map(s, function(v) return is_std and math.sqrt(v / div) or v / div end)
end

local function call(x, dims, corr, keep, is_std)
  local f = is_std and ddp.std or ddp.var
  if #dims == 0 then return f(x, { correction = corr, keepdim = keep }) end
  return f(x, #dims == 1 and dims[1] or dims, { correction = corr, keepdim = keep })
end

describe("var and std through the moments kernel", function()
  it("match the float64 sums of the float32 values for every run of dims, both dtypes", function()
    local cases = {
      { { 7 }, {} }, { { 3, 5 }, { 1 } }, { { 3, 5 }, { 2 } }, { { 2, 3, 4 }, { 2 } }, { { 2, 3, 4 }, { 1, 2 } },
      { { 2, 3, 4 }, { 2, 3 } }, { { 2, 600, 3 }, { 2 } }, { { 3, 2, 1100 }, { 2 } }, { { 2, 3, 5, 7 }, { 2, 3 } },
      { { 1, 1, 1 }, { 2 } }, { { 4 }, { 1 } },
    }
    for i, c in ipairs(cases) do
      local x64 = ddp.randn(c[1], { dtype = "float64" }) * 3 + 1
      local x32 = x64:float()
      local a = R.from(x32) -- the float32 values, exactly, as doubles
      for _, corr in ipairs({ 0, 1, 2 }) do
        for _, keep in ipairs({ false, true }) do
          for _, is_std in ipairs({ false, true }) do
            local want = ref(a, c[2], corr, keep, is_std)
            local what = string.format("case %d %s corr %d keep %s", i, is_std and "std" or "var", corr, keep)
            -- float32: the double result rounded once (1 ulp), float64: to 1e-13
            R.assert_close(call(x32, c[2], corr, keep, is_std), want, 0, 2.4e-7, what .. " float32")
            R.assert_close(call(x32:double(), c[2], corr, keep, is_std), want, 1e-14, 1e-13, what .. " float64")
          end
        end
      end
    end
  end)

  it("merges row chunks and reads strided, expanded and non-adjacent layouts", function()
    ddp.manual_seed(3)
    -- 70000 values a row: two chunks of the row path, merged (Chan et al.)
    local long = ddp.randn(2, 70000) * 0.01 + 1000
    local a = R.from(long)
    R.assert_close(long:var(2), ref(a, { 2 }, 1, false), 0, 2.4e-7, "rows of two chunks")
    R.assert_close(long:std(), ref(a, {}, 1, false, true), 0, 2.4e-7, "all of it")
    -- a transpose (copied contiguous first) and a stride-0 expansion
    local t = ddp.randn(5, 6)
    R.assert_close(t:t():var(2), ref(R.from(t:t():contiguous()), { 2 }, 1, false), 0, 2.4e-7, "transposed")
    local e = ddp.randn(4, 1):expand(4, 9)
    R.assert_close(e:var(2), ref(R.from(e:contiguous()), { 2 }, 1, false), 0, 0, "expanded rows: exactly 0")
    -- dims 1 and 3 are not one run: the composed path, the same values
    local x = ddp.randn(3, 4, 5)
    R.assert_close(x:var({ 1, 3 }), ref(R.from(x), { 1, 3 }, 1, false), 0, 2.4e-7, "dims 1 and 3")
    R.assert_close(x:double():std({ 1, 3 }, { keepdim = true }), ref(R.from(x), { 1, 3 }, 1, true, true), 1e-14, 1e-13,
      "dims 1 and 3, float64")
  end)

  it("keeps the edge values: constants, huge values, NaN, inf, too few values, empty, bfloat16", function()
    assert.are.equal(0, ddp.full({ 3, 100001 }, 0.1):var(2):max():item())
    assert.are.equal(0, ddp.full({ 700, 3 }, 0.1, { dtype = "float64" }):var(1):max():item())
    assert.are.equal(0, ddp.full({ 3 }, 0.1, { dtype = "float64" }):std():item())
    local big = ddp.tensor({ { 1e27, -1e27, 3e26 }, { 1, 2, 3 } }):t():contiguous():std(1):totable()
    assert.is_true(math.abs(big[1] - 1.0148892e27) <= 1e-6 * 1.0148892e27, tostring(big[1]))
    local v = ddp.tensor({ { 1, 0 / 0, 2 }, { 1, math.huge, 2 }, { 1, 2, 3 } }, { dtype = "float32" }):var(2):totable()
    assert.is_true(v[1] ~= v[1] and v[2] ~= v[2], "NaN and inf give NaN")
    assert.are.equal(1, v[3])
    -- float64's corrected sums keep a NaN too, along rows and down columns (the differential suite)
    local n64 = ddp.tensor({ { 1, 0 / 0, 2 }, { 1, 2, 3 } }, { dtype = "float64" })
    local r, cols = n64:var(2):totable(), n64:t():contiguous():var(1):totable()
    assert.is_true(r[1] ~= r[1] and cols[1] ~= cols[1], "NaN, float64")
    assert.are.same({ 1, 1 }, { r[2], cols[2] })
    local few = ddp.tensor({ { 5 }, { 6 } }, { dtype = "float32" }):var(2):totable() -- one value, unbiased: 0 / 0
    assert.is_true(few[1] ~= few[1] and few[2] ~= few[2])
    assert.are.equal(math.huge, ddp.tensor({ 1, 2 }, { dtype = "float32" }):var({ correction = 3 }):item()) -- N - 3 < 0: m2 / 0
    local empty = ddp.zeros(0, 3):var(1):totable()
    assert.are.equal(3, #empty)
    assert.is_true(empty[1] ~= empty[1], "an empty dim: NaN")
    local bf = ddp.tensor({ 1, 2, 3, 4 }, { dtype = "float32" }):to("bfloat16"):var()
    assert.are.equal("bfloat16", bf:dtype())
    assert.is_true(math.abs(bf:float():item() - 5 / 3) < 0.02)
  end)

  it("has PyTorch's gradients: finite differences, constants, the two paths alike", function()
    gc.assert_gradcheck(function(t) return t:var(2) end, { gc.smooth_input({ 2, 3, 4 }, 21) })
    gc.assert_gradcheck(function(t) return t:std({ 1, 2 }, { keepdim = true, correction = 0 }) end,
      { gc.smooth_input({ 2, 3, 4 }, 22) })
    gc.assert_gradcheck(function(t) return t:std() end, { gc.smooth_input({ 5 }, 23) })
    -- std's gradient is 0 on a constant row, not 0 * inf
    local c = ddp.tensor({ { 2, 2, 2 }, { 1, 2, 4 } }, { dtype = "float32" }):requires_grad_()
    c:std(2):sum():backward()
    local g = c.grad:totable()
    assert.are.same({ 0, 0, 0 }, g[1])
    -- the moments path (dims 2..3) and the composed one (dims 1 and 3, permuted to be the same values) agree
    local x = ddp.randn(3, 4, 5, { dtype = "float64" }):requires_grad_()
    x:var({ 2, 3 }):sum():backward()
    local g1 = x.grad:clone()
    local y = x:detach():permute(2, 1, 3):contiguous():requires_grad_()
    y:var({ 1, 3 }):sum():backward()
    R.assert_close(y.grad:permute(2, 1, 3), R.from(g1), 1e-14, 1e-12, "gradient of both paths")
  end)

  it("matches PyTorch on random shapes, values and gradients", function()
    if not TR.available() then return pending("skipped: /usr/bin/python3 cannot import torch") end
    ddp.manual_seed(41)
    local x = (ddp.randn(3, 7, 129) * 4 + 2):requires_grad_()
    local y = x:var(3):sum(2) + x:std({ 1, 2 }):sum() + x:var({ 2, 3 }, { correction = 0, keepdim = true }):sum(2):sum(2)
    y:sum():backward()
    local r = TR.run([[
x = T["x"].requires_grad_()
y = x.var(2).sum(1) + x.std((0, 1)).sum() + x.var((1, 2), unbiased=False, keepdim=True).sum(1).sum(1)
y.sum().backward()
OUT["y"], OUT["g"] = y, x.grad
]], { x = x })
    R.assert_close(y, R.from(r.y), 1e-5, 1e-5, "forward")
    R.assert_close(x.grad, R.from(r.g), 1e-5, 1e-5, "gradient")
  end)
end)
