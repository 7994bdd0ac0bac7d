-- Every op on CUDA against the CPU result: forward values and input
-- gradients, on contiguous and non-contiguous (transposed, sliced,
-- broadcast) inputs, in float32 and float64, plus casts, random numbers,
-- reductions on the split paths, wide rows, autocast and GradScaler on the
-- GPU. Run with: busted --tags=gpu tests/gpu
local ddp = require "ddplua"
local H = require("gpu.gpu_helper").setup(describe, it, pending)

-- f on CPU leaves and on GPU copies of them; outputs and the gradients of
-- sum(f(...) * w) (w fixed) must agree within tol.
local function check(what, f, inputs, tol)
  local function run(device)
    local leaves = {}
    for i, x in ipairs(inputs) do
      local t = x:to(device):detach()
      if x.requires_grad then t:requires_grad_() end
      leaves[i] = t
    end
    local y = f(table.unpack(leaves))
    local grads = {}
    if y.requires_grad then
      local state = ddp.get_rng_state()
      ddp.manual_seed(99)
      local w = ddp.randn(y:size(), { dtype = y:dtype() }):to(device)
      ddp.set_rng_state(state)
      local objective = (y * w):sum()
      objective:backward()
      for i, t in ipairs(leaves) do grads[i] = t.grad end
    end
    return y, grads
  end
  local yc, gc = run("cpu")
  local yg, gg = run(H.device)
  assert.are.equal(yc:dtype(), yg:dtype(), what .. ": dtype")
  assert.are.equal(H.device, yg:device(), what .. ": device")
  H.assert_close(yg, yc, tol, what .. " (forward)")
  for i, g in pairs(gc) do
    assert(gg[i] ~= nil, what .. ": no gradient for input " .. i .. " on the GPU")
    assert.are.equal(H.device, gg[i]:device())
    H.assert_close(gg[i], g, tol, what .. " (gradient of input " .. i .. ")")
  end
end

local function leaf(t) return t:requires_grad_() end
local TOL = { float32 = 2e-5, float64 = 1e-12 }

H.describe("cuda tensors", function()
  it("move, cast and copy exactly as on the CPU", function()
    ddp.manual_seed(1)
    local x = ddp.randn(17, 9) * 100
    for _, dt in ipairs({ "float32", "float64", "bfloat16", "float16", "int64", "uint8" }) do
      H.assert_equal(x:to(H.device):to(dt), x:to(dt), "cast to " .. dt)
      H.assert_equal(x:to(dt):to(H.device):to("float64"), x:to(dt):to("float64"), "cast from " .. dt)
    end
    local g = x:to(H.device)
    H.assert_equal(g:transpose(1, 2):contiguous(), x:transpose(1, 2):contiguous(), "transposed copy")
    H.assert_equal(g:narrow(2, 3, 4):clone(), x:narrow(2, 3, 4):clone(), "sliced copy")
    local z = ddp.zeros(3, 17, 9, { device = H.device })
    z:copy_(x) -- broadcast, across devices
    H.assert_equal(z, x:expand(3, 17, 9):contiguous(), "broadcast copy_")
    z:fill_(2.5)
    H.assert_equal(z, ddp.full({ 3, 17, 9 }, 2.5), "fill_")
    H.assert_equal(ddp.arange(0, 10, 0.5, { device = H.device }), ddp.arange(0, 10, 0.5), "arange")
    H.assert_equal(ddp.arange(3, 40, 3, { device = H.device, dtype = "int64" }),
                   ddp.arange(3, 40, 3, { dtype = "int64" }), "int64 arange")
    assert.are.equal(x[3][4]:item(), g[3][4]:item())
  end)

  it("draws the same random numbers as the CPU for a seed", function()
    ddp.manual_seed(1234)
    local a, an = ddp.rand(1000), ddp.randn(777, { dtype = "float64" })
    ddp.manual_seed(1234)
    local b, bn = ddp.rand(1000, { device = H.device }), ddp.randn(777, { dtype = "float64", device = H.device })
    H.assert_equal(b, a, "uniform")
    H.assert_close(bn, an, 1e-13, "normal")
  end)
end)

H.describe("cuda elementwise ops", function()
  local unary = { "neg", "exp", "relu", "gelu", "tanh", "sigmoid", "abs", "square", "sign" }
  local positive = { "log", "sqrt", "rsqrt", "reciprocal" }
  for _, dt in ipairs({ "float32", "float64" }) do
    it("unary ops and their gradients, " .. dt .. ", contiguous and transposed", function()
      ddp.manual_seed(2)
      local x = leaf(ddp.randn(13, 29, { dtype = dt }))
      local p = leaf((ddp.rand(13, 29, { dtype = dt }) + 0.2))
      for _, op in ipairs(unary) do
        check(op, function(a) return a[op](a) end, { x }, TOL[dt])
        check(op .. " of a transpose", function(a) return a:transpose(1, 2)[op](a:transpose(1, 2)) end, { x }, TOL[dt])
      end
      for _, op in ipairs(positive) do
        check(op, function(a) return a[op](a) end, { p }, TOL[dt])
        check(op .. " of a slice", function(a) local s = a:narrow(2, 5, 11) return s[op](s) end, { p }, TOL[dt])
      end
    end)

    it("binary ops with broadcasting and scalars, " .. dt, function()
      ddp.manual_seed(3)
      local a = leaf(ddp.randn(6, 1, 8, { dtype = dt }))
      local b = leaf(ddp.randn(5, 8, { dtype = dt }))
      local pa = leaf(ddp.rand(6, 5, 8, { dtype = dt }) + 0.5)
      check("add", function(x, y) return x + y end, { a, b }, TOL[dt])
      check("sub", function(x, y) return x - y end, { a, b }, TOL[dt])
      check("mul", function(x, y) return x * y end, { a, b }, TOL[dt])
      check("div", function(x, y) return x / (y:abs() + 1) end, { a, b }, TOL[dt])
      check("maximum", function(x, y) return x:maximum(y) end, { a, b }, TOL[dt])
      check("minimum", function(x, y) return x:minimum(y) end, { a, b }, TOL[dt])
      check("pow", function(x, y) return x:pow(y:transpose(1, 2):transpose(1, 2)) end, { pa, b }, 10 * TOL[dt])
      check("scalar ops", function(x) return (2 - x) * 3 + x / 4 - 1.5 / (x:abs() + 1) end, { a }, TOL[dt])
      check("transposed operands", function(x, y) return x:transpose(1, 3) * y:t():unsqueeze(3) end, { pa, b },
            TOL[dt])
      for _, cmp in ipairs({ "eq", "ne", "lt", "le", "gt", "ge" }) do
        local rc, rg = a:detach(), a:detach():to(H.device)
        local yc = rc[cmp](rc, b:detach())
        local yg = rg[cmp](rg, b:detach():to(H.device))
        assert.are.equal("uint8", yg:dtype())
        H.assert_equal(yg, yc, cmp)
        H.assert_equal(rg[cmp](rg, 0.25), rc[cmp](rc, 0.25), cmp .. " with a scalar")
      end
    end)
  end

  it("int64 arithmetic is exact beyond 2^53", function()
    local big = ddp.tensor({ (1 << 60) + 1, -(1 << 59) - 3, 7 }) -- integers: int64, not exact in double
    local small = ddp.tensor({ 3, 5, -2 }, { dtype = "int64" })
    local g, s = big:to(H.device), small:to(H.device)
    H.assert_equal(g + s, big + small, "add")
    H.assert_equal(g * s, big * small, "mul")
    H.assert_equal(g - s, big - small, "sub")
    H.assert_equal(g:maximum(s), big:maximum(small), "maximum")
    H.assert_equal(-g, -big, "neg")
    H.assert_equal(g:abs(), big:abs(), "abs")
    H.assert_equal(g:eq(g), big:eq(big), "eq")
  end)

  it("in-place ops broadcast and bump the version", function()
    ddp.manual_seed(4)
    local a, b = ddp.randn(4, 6), ddp.randn(6)
    local g = a:to(H.device)
    g:add_(b:to(H.device))
    g:mul_(2)
    a:add_(b)
    a:mul_(2)
    H.assert_close(g, a, 1e-6, "add_/mul_")
  end)

  it("bfloat16 and float16 compute in float32 like the CPU", function()
    ddp.manual_seed(5)
    for _, dt in ipairs({ "bfloat16", "float16" }) do
      local x = ddp.randn(40, 30):to(dt)
      local g = x:to(H.device)
      H.assert_close((g * g * 0.1 + 1):exp():to("float32"), (x * x * 0.1 + 1):exp():to("float32"), 1e-2, dt .. " exp")
      H.assert_close(g:sum(1):float(), x:sum(1):float(), 1e-2, dt .. " sum")
    end
  end)
end)

H.describe("cuda reductions", function()
  for _, dt in ipairs({ "float32", "float64" }) do
    it("sum, mean, max, min and argmax over dims, " .. dt, function()
      ddp.manual_seed(6)
      local x = leaf(ddp.randn(5, 7, 9, { dtype = dt }))
      check("sum all", function(a) return a:sum() end, { x }, TOL[dt])
      check("sum 2", function(a) return a:sum(2) end, { x }, TOL[dt])
      check("sum {1, 3} keepdim", function(a) return a:sum({ 1, 3 }, true) end, { x }, TOL[dt])
      check("mean -1", function(a) return a:mean(-1) end, { x }, TOL[dt])
      check("mean of a transpose", function(a) return a:transpose(1, 3):mean(1) end, { x }, TOL[dt])
      check("max 3", function(a) return (a:max(3)) end, { x }, TOL[dt])
      check("min 1", function(a) return (a:min(1)) end, { x }, TOL[dt])
      check("max all", function(a) return a:max() end, { x }, TOL[dt])
      local xc, xg = x:detach(), x:detach():to(H.device)
      local _, ic = xc:max(2)
      local _, ig = xg:max(2)
      H.assert_equal(ig, ic, "max indices")
      H.assert_equal(xg:argmax(3), xc:argmax(3), "argmax")
      H.assert_equal(xg:argmin(1), xc:argmin(1), "argmin")
      H.assert_equal(xg:argmax(), xc:argmax(), "argmax of all")
    end)
  end

  it("long rows and columns (the split paths) and integer sums", function()
    ddp.manual_seed(7)
    local rows = ddp.randn(3, 300000)
    H.assert_close(rows:to(H.device):sum(2), rows:sum(2), 1e-6, "long rows")
    local cols = ddp.randn(100000, 5, { dtype = "float64" })
    H.assert_close(cols:to(H.device):mean(1), cols:mean(1), 1e-12, "long columns")
    H.assert_equal(cols:to(H.device):argmax(1), cols:argmax(1), "argmax down long columns")
    local ints = ddp.arange(0, 200000, 1, { dtype = "int64" }) * 12345
    H.assert_equal(ints:to(H.device):sum(), ints:sum(), "int64 sum")
    local nan = ddp.tensor({ 1.0, 0 / 0, 3.0, 0 / 0 })
    assert.are.equal(2, nan:to(H.device):argmax():item())
    assert.are.equal(nan:argmax():item(), nan:to(H.device):argmax():item())
  end)
end)

-- Kernels that give a block (or a warp) one row or channel launch at most
-- 65535 blocks and loop over the rest; before that, their grid was the item
-- count cast to unsigned, which the driver refuses from 2^31 blocks on and
-- which wraps around (reducing only some rows) from 2^32.
H.describe("cuda launch grids", function()
  it("reduces 2^31 + 3 rows, one block per row before the cap", function()
    local n = math.tointeger(2 ^ 31 + 3)
    ddp.manual_seed(21)
    local x = ddp.rand(n, 1, { device = H.device }) -- 8 GiB
    local s = x:sum(2)
    assert.are.same({ n }, s:size())
    -- each row holds one element: its sum is that element, exactly
    assert.are.equal(0, (s - x:view(-1)):abs():max():item())
    assert.are.equal(x[n][1]:item(), s[n]:item())
    x, s = nil, nil
    collectgarbage()
    ddp.cuda_empty_cache()
  end)

  for _, dt in ipairs({ "float32", "float64" }) do
    it("row and channel kernels past 65535 blocks give the CPU's results, " .. dt, function()
      ddp.manual_seed(22)
      local rows = 65535 + 5
      local wide = leaf(ddp.randn(rows, 1030, { dtype = dt })) -- a block per row (more than 1024 columns)
      local y = (ddp.rand(rows) * 1030):long() + 1
      check("cross_entropy, block rows", function(a) return ddp.cross_entropy(a, y:to(a:device())) end, { wide },
            TOL[dt] * 10)
      check("layer_norm, block rows", function(a) return ddp.layer_norm(a, { 1030 }) end, { wide }, TOL[dt] * 50)
      check("log_softmax, block rows", function(a) return ddp.log_softmax(a) end, { wide }, TOL[dt] * 10)
      local channels = leaf(ddp.randn(3, 70000, { dtype = dt })) -- a block per channel
      check("batch_norm, 70000 channels", function(a) return ddp.batch_norm(a, nil, nil, nil, nil, true) end,
            { channels }, TOL[dt] * 50)
    end)
  end

  it("arange from a non-zero start and Philox uniforms match the CPU bit for bit", function()
    for _, dt in ipairs({ "float32", "float64" }) do
      H.assert_equal(ddp.arange(0.1, 5000, 0.37, { dtype = dt, device = H.device }),
                     ddp.arange(0.1, 5000, 0.37, { dtype = dt }), "arange(0.1, 5000, 0.37) " .. dt)
      H.assert_equal(ddp.arange(-7.25, 9.5, 0.013, { dtype = dt, device = H.device }),
                     ddp.arange(-7.25, 9.5, 0.013, { dtype = dt }), "arange(-7.25, 9.5, 0.013) " .. dt)
      ddp.manual_seed(23)
      local c = ddp.rand(100003, { dtype = dt })
      ddp.manual_seed(23)
      H.assert_equal(ddp.rand(100003, { dtype = dt, device = H.device }), c, "rand " .. dt)
    end
  end)
end)

H.describe("cuda linear algebra and nn functions", function()
  for _, dt in ipairs({ "float32", "float64" }) do
    local tol = dt == "float32" and 1e-4 or 1e-11
    it("matmul in every shape PyTorch allows, " .. dt, function()
      ddp.manual_seed(8)
      local A = leaf(ddp.randn(4, 9, 11, { dtype = dt }))
      local B = leaf(ddp.randn(11, 6, { dtype = dt }))
      local v = leaf(ddp.randn(11, { dtype = dt }))
      local M = leaf(ddp.randn(9, 11, { dtype = dt }))
      check("batched @ matrix", function(a, b) return a:matmul(b) end, { A, B }, tol)
      check("matrix @ vector", function(m, x) return m:matmul(x) end, { M, v }, tol)
      check("vector @ matrix", function(x, b) return x:matmul(b) end, { v, B }, tol)
      check("vector @ vector", function(x) return x:matmul(x) end, { v }, tol)
      check("transposed left operand", function(a, m) return a:transpose(2, 3):matmul(m) end, { A, M }, tol)
      check("transposed right operand", function(a, b) return a:matmul(b:t():contiguous():t()) end, { A, B }, tol)
      check("broadcast batch", function(a, b) return a:matmul(b:expand(4, 11, 6)) end, { A, B }, tol)
    end)

    it("linear with bias and fused activations, " .. dt, function()
      ddp.manual_seed(9)
      local x = leaf(ddp.randn(8, 3, 20, { dtype = dt }))
      local w = leaf(ddp.randn(12, 20, { dtype = dt }))
      local b = leaf(ddp.randn(12, { dtype = dt }))
      check("linear", function(a, ww, bb) return ddp.linear(a, ww, bb) end, { x, w, b }, tol)
      check("linear without bias", function(a, ww) return ddp.linear(a, ww) end, { x, w }, tol)
      for _, act in ipairs({ "relu", "tanh", "sigmoid" }) do
        check("linear + " .. act, function(a, ww, bb) return ddp.linear(a, ww, bb, act) end, { x, w, b }, tol)
      end
    end)

    it("softmax and log_softmax, narrow and wide rows, any dim, " .. dt, function()
      ddp.manual_seed(10)
      local x = leaf(ddp.randn(6, 10, 7, { dtype = dt }))
      local wide = leaf(ddp.randn(5, 3000, { dtype = dt }) * 3)
      for _, f in ipairs({ "softmax", "log_softmax" }) do
        check(f .. " last dim", function(a) return ddp[f](a) end, { x }, TOL[dt])
        check(f .. " dim 2", function(a) return ddp[f](a, 2) end, { x }, TOL[dt])
        check(f .. " wide rows", function(a) return ddp[f](a) end, { wide }, TOL[dt])
      end
    end)

    it("cross_entropy with reductions, smoothing and ignore_index, " .. dt, function()
      ddp.manual_seed(11)
      for _, C in ipairs({ 10, 2500 }) do
        local x = leaf(ddp.randn(16, C, { dtype = dt }))
        local y = (ddp.rand(16) * C):long() + 1
        y[3] = -100
        for _, opts in ipairs({ {}, { reduction = "sum" }, { reduction = "none" }, { label_smoothing = 0.1 },
                                { ignore_index = -100, reduction = "mean" } }) do
          check("cross_entropy C=" .. C,
                function(a) return ddp.cross_entropy(a, y:to(a:device()), opts) end, { x }, TOL[dt] * 10)
        end
      end
      local a = leaf(ddp.randn(9, 4, { dtype = dt }))
      local b = leaf(ddp.randn(9, 4, { dtype = dt }))
      check("mse_loss", function(p, q) return ddp.mse_loss(p, q) end, { a, b }, TOL[dt])
    end)
  end

  it("cross_entropy on bfloat16 logits matches float32 within bfloat16 precision", function()
    ddp.manual_seed(12)
    local x = ddp.randn(32, 10)
    local y = (ddp.rand(32) * 10):long() + 1
    local ref = ddp.cross_entropy(x:to("bfloat16"):float(), y)
    local got = ddp.cross_entropy(x:to(H.device):to("bfloat16"), y:to(H.device))
    H.assert_close(got:float(), ref, 1e-2, "bfloat16 cross_entropy")
  end)

  it("raises a class label out of range at the next sync point, naming it", function()
    local x = ddp.zeros(4, 3, { device = H.device })
    local y = ddp.tensor({ 1, 2, 7, 3 }, { device = H.device })
    local ok, err = pcall(function() return ddp.cross_entropy(x, y):item() end)
    assert.is_false(ok)
    assert.matches("target 7 at position 3 is out of range: classes are 1..3", err)
    -- the device is usable afterwards: uniform logits give log(3)
    local fine = ddp.cross_entropy(x, ddp.tensor({ 1, 2, 3, 3 }, { device = H.device })):item()
    assert.is_true(math.abs(fine - math.log(3)) < 1e-6)
  end)

  it("refuses to mix devices, naming both", function()
    local ok, err = pcall(function() return ddp.ones(2) + ddp.ones(2, { device = H.device }) end)
    assert.is_false(ok)
    assert.matches("cpu", err)
    assert.matches(H.device, err)
  end)

  it("cat and stack on the GPU", function()
    ddp.manual_seed(13)
    local a, b = ddp.randn(2, 3), ddp.randn(4, 3)
    H.assert_equal(ddp.cat({ a:to(H.device), b:to(H.device) }, 1), ddp.cat({ a, b }, 1), "cat")
    H.assert_equal(ddp.stack({ a:to(H.device), a:to(H.device) }, 2), ddp.stack({ a, a }, 2), "stack")
  end)
end)

H.describe("cuda sorting and scans", function()
  -- rows long enough for the CPU's radix sort (48 and up), with ties, both zeros and NaN: the GPU's selection
  -- kernel must give the same values and positions
  local function hostile(rows, n, seed)
    ddp.manual_seed(seed)
    local x = (ddp.rand(rows, n) * 20):floor() - 10
    x[1][3], x[1][5], x[2][7] = 0 / 0, -0.0, 0 / 0
    return x
  end
  for _, dt in ipairs({ "float32", "float64", "int64" }) do
    it("sort, topk, cumsum, searchsorted, cummax and cummin give the CPU's values and positions, " .. dt, function()
      local x = hostile(3, 600, 21)
      if dt == "int64" then x = x:nan_to_num(0):long() else x = x:to(dt) end
      local g = x:to(H.device)
      for _, desc in ipairs({ false, true }) do
        local v, i = x:sort(2, desc)
        local gv, gi = g:sort(2, desc)
        H.assert_equal(gv, v, "sort values")
        H.assert_equal(gi, i, "sort positions")
      end
      local tv, ti = x:t():topk(5, 1)
      local gtv, gti = g:t():topk(5, 1)
      H.assert_equal(gtv, tv, "topk values")
      H.assert_equal(gti, ti, "topk positions")
      local finite = dt == "int64" and x or x:nan_to_num(0)
      H.assert_close(finite:to(H.device):cumsum(2), finite:cumsum(2), 1e-6, "cumsum")
      local bounds = x:narrow(2, 1, 100):sort(2)
      for _, right in ipairs({ false, true }) do
        local want = ddp.searchsorted(bounds, x, { right = right })
        H.assert_equal(ddp.searchsorted(bounds:to(H.device), g, { right = right }), want, "searchsorted")
        H.assert_equal(ddp.searchsorted(bounds[1]:to(H.device), g, { right = right }),
          ddp.searchsorted(bounds[1], x, { right = right }), "searchsorted, one row of boundaries")
      end
      for _, name in ipairs({ "cummax", "cummin" }) do
        local cv, ci = x[name](x, 2)
        local gcv, gci = g[name](g, 2)
        H.assert_equal(gcv, cv, name .. " values")
        H.assert_equal(gci, ci, name .. " positions")
      end
    end)
  end
  it("cummax's gradient reaches the positions it chose", function()
    ddp.manual_seed(22)
    check("cummax", function(a) return (a:cummax(1)) end, { leaf(ddp.randn(70, 3)) }, 1e-6)
  end)
  it("cumprod and logcumsumexp (core.cum_scan) and their gradients give the CPU's, zeros included", function()
    ddp.manual_seed(23)
    local z = ddp.where(ddp.rand(9, 40):lt(0.1), 0, ddp.rand(9, 40) * 3 - 1.5)
    check("cumprod rows", function(a) return a:cumprod(2) end, { leaf(z) }, 1e-5)
    check("cumprod columns", function(a) return a:cumprod(1) end, { leaf(z) }, 1e-5)
    check("logcumsumexp", function(a) return a:logcumsumexp(2) end, { leaf(ddp.randn(9, 40) * 10) }, 1e-5)
    local i = (ddp.rand(4, 50) * 3 + 1):long()
    H.assert_equal(i:to(H.device):cumprod(2), i:cumprod(2), "int64 cumprod")
  end)
end)

H.describe("cuda mixed precision", function()
  it("autocast runs linear and matmul in bfloat16 with float32 master weights", function()
    ddp.manual_seed(14)
    local x = ddp.randn(32, 64, { device = H.device })
    local w = ddp.randn(16, 64, { device = H.device }):requires_grad_()
    local b = ddp.randn(16, { device = H.device }):requires_grad_()
    local ref = ddp.linear(x, w, b)
    local y
    do
      local _ <close> = ddp.autocast("bfloat16")
      y = ddp.linear(x, w, b, "relu")
      assert.are.equal("bfloat16", y:dtype())
      assert.are.equal("bfloat16", x:matmul(w:t()):dtype())
    end
    H.assert_close(y:float(), ref:relu(), 3e-2, "bfloat16 linear")
    y:float():sum():backward()
    assert.are.equal("float32", w.grad:dtype())
    assert.are.equal("float32", b.grad:dtype())
    -- the gradient of the bias is the number of positive outputs per unit
    H.assert_close(b.grad, y:float():gt(0):float():sum(1), 1e-6, "bias gradient")
    -- float64 and CPU tensors are left alone
    do
      local _ <close> = ddp.autocast("float16")
      assert.are.equal("float64", x:double():matmul(w:detach():double():t()):dtype())
      assert.are.equal("float16", x:matmul(w:t()):dtype())
      assert.are.equal("float32", ddp.ones(2, 3):matmul(ddp.ones(3, 2)):dtype())
    end
  end)

  it("GradScaler trains through float16 autocast and skips overflowing steps", function()
    ddp.manual_seed(15)
    local w = ddp.randn(8, 16, { device = H.device }):requires_grad_()
    local x, t = ddp.randn(64, 16, { device = H.device }), ddp.randn(64, 8, { device = H.device })
    local opt = { param_groups = { { params = { w } } }, steps = 0 }
    function opt:step()
      self.steps = self.steps + 1
      ddp.no_grad(function() w:sub_(w.grad * 0.05) end)
    end
    local scaler = ddp.amp.GradScaler { init_scale = 1024.0, growth_interval = 2 }
    local first, last
    for i = 1, 6 do
      w.grad = nil
      local loss
      do
        local _ <close> = ddp.autocast("float16")
        loss = ddp.mse_loss(x:matmul(w:t()):float(), t)
      end
      first = first or loss:item()
      last = loss:item()
      scaler:scale(loss):backward()
      if i == 3 then w.grad:fill_(math.huge) end -- an overflow: the step is skipped
      scaler:step(opt)
      scaler:update()
    end
    assert.are.equal(5, opt.steps)
    assert.is_true(last < first)
    -- 1024 -> 2048 (2 clean) -> 1024 (inf) -> 2048 (2 clean) -> one more clean step
    assert.are.equal(2048.0, scaler:get_scale())
  end)
end)

H.describe("cuda device controls", function()
  it("reports memory, empties the cache and synchronises", function()
    -- earlier tests' tensors go first: a collection during the allocation
    -- below would otherwise free them and lower live_bytes under the check
    collectgarbage()
    collectgarbage()
    ddp.synchronize()
    local before = ddp.cuda_memory_stats()
    do
      local t = ddp.empty(1024, 1024, { device = H.device })
      assert.is_true(ddp.cuda_memory_stats().live_bytes >= before.live_bytes + 4 * 1024 * 1024)
      t:free()
    end
    collectgarbage()
    ddp.synchronize()
    ddp.cuda_empty_cache()
    local after = ddp.cuda_memory_stats()
    assert.are.equal(0, after.cached_bytes)
    assert.is_true(after.device_total > 0)
    assert.is_string(ddp.cuda_device_name(0))
    ddp.set_float32_matmul_precision("high")
    assert.is_true(ddp.core.cuda_get_option("tf32"))
    ddp.set_float32_matmul_precision("highest")
    assert.is_false(ddp.core.cuda_get_option("tf32"))
  end)
end)
