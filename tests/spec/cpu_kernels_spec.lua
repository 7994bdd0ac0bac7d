-- The per-ISA float32 CPU kernels (src/backends/cpu/cpu_vec*.c: AVX-512,
-- AVX2, the baseline), each held against the float64 reference path on the
-- same values: every op of the op table forward and backward on values
-- that include 0, -0, +-inf, NaN and large magnitudes, binary ops with
-- broadcasting and comparisons, softmax, log_softmax, cross-entropy, layer
-- and batch norm, pooling, reductions, dropout, the optimizer steps and the
-- bfloat16 casts, at lengths that leave partial vectors, with one thread
-- and with two (split loops). Then softmax, log_softmax and cross-entropy
-- at large logits (issue 11, bug 13): computed from x - max, they keep full
-- precision at 1e10 and the cross-entropy gradient rows sum to 0 at 1e4.
local ddp = require "ddplua"
local R = require "helpers.ref"
local core = ddp.core

-- the float32 result against the float64 one rounded to float32 (so both
-- overflow alike)
local function close(got32, ref64, atol, rtol, what)
  R.assert_close(got32, R.from(ref64:float()), atol, rtol, what)
end

local SPECIAL = { 0, -0.0, 1e-30, -1e-30, 0.5, -0.5, 1, -1, 3, -3, 9.5, -9.5, 20.5, -20.5, 88, -88, 100, -100, 1e30,
  -1e30, math.huge, -math.huge, 0 / 0 }

-- n values: the specials, then normal values of scale 4
local function inputs(n, seed)
  local r = R.randn({ n }, seed, 1):mul(4)
  local t = r:totable()
  for i, v in ipairs(SPECIAL) do if i <= n then t[i] = v end end
  return ddp.tensor(t, { dtype = "float64" })
end

local UNARY = {
  { "neg" }, { "exp" }, { "log" }, { "relu" }, { "gelu" }, { "tanh" }, { "sigmoid" }, { "sqrt" }, { "rsqrt" },
  { "abs" }, { "square" }, { "reciprocal" }, { "sign" }, { "clamp", -0.5, 0.7 }, { "leaky_relu", 0.2 },
  { "elu", 0.7 }, { "silu" }, { "softplus", 2, 3 },
}

local kernels = R.cpu_kernel_sets

local ISAS = kernels()

describe("float32 CPU kernels", function()
  it("run on every kernel set this CPU has (at least the baseline)", function()
    assert.is_true(#ISAS >= 1)
    assert.equal("base", ISAS[#ISAS])
    assert.matches("kernels %a", core.cpu_info())
  end)

  R.describe_kernel_sets(_ENV, { 1, 2 }, function(isa, threads)
    -- large enough for the threads to split it
    local N = threads == 1 and 1037 or 140001

    it("unary ops and their gradients match float64", function()
      local x64 = inputs(N, 3)
      local gy64 = R.randn({ N }, 4, 1)
      for _, u in ipairs(UNARY) do
        local name = u[1]
        local a = x64:clone():requires_grad_()
        local b = x64:float():requires_grad_()
        local ya, yb = ddp[name](a, table.unpack(u, 2)), ddp[name](b, table.unpack(u, 2))
        close(yb, ya:detach(), 1e-6, 3e-6, name .. " forward")
        ya:backward(gy64)
        yb:backward(gy64:float())
        close(b.grad, a.grad, 1e-6, 5e-6, name .. " gradient")
      end
    end)

    it("a broadcast value over many chunks gives what the same values in memory give, bit for bit", function()
      -- a stride-0 operand fills its chunk buffer once a row and reuses it (rows of 1500: three chunks)
      local x = inputs(3 * 1500, 12):float():view(3, 1500)
      for _, name in ipairs({ "tanh", "leaky_relu", "gelu", "sigmoid" }) do
        for _, dt in ipairs({ "float32", "bfloat16" }) do
          local a, b = x:to(dt):clone():requires_grad_(), x:to(dt):clone():requires_grad_()
          ddp[name](a):backward(ddp.full({}, 0.75, { dtype = dt }):expand(3, 1500))
          ddp[name](b):backward(ddp.full({ 3, 1500 }, 0.75, { dtype = dt }))
          -- (NaN inputs give NaN gradients in the same places: ne counts each of them once)
          local nan = a.grad:isnan():sum():item()
          assert.equal(nan, b.grad:isnan():sum():item(), name .. " " .. dt .. ": NaN places")
          assert.equal(nan, a.grad:ne(b.grad):sum():item(), name .. " " .. dt)
        end
      end
      local v = ddp.full({}, -1.25):expand(1500)
      for _, op in ipairs({ "add", "mul", "div", "maximum" }) do
        local y = x[2]
        assert.equal(0, ddp[op](y, v):ne(ddp[op](y, v:contiguous())):sum():item(), op .. " with a broadcast operand")
        assert.equal(0, ddp[op](v, y):ne(ddp[op](v:contiguous(), y)):sum():item(), op .. " with it first")
      end
    end)

    it("unary and binary ops on strided views and expanded gradients match float64", function()
      -- the rows of a transposed view and the stride-0 gradient of a sum
      -- go through the vector kernels in gathered chunks
      local rows = threads == 1 and 37 or 5003
      local x64 = inputs(rows * 29, 8):view(rows, 29)
      local o64 = R.randn({ 29, rows }, 9, 1)
      for _, u in ipairs(UNARY) do
        local name = u[1]
        local a = x64:clone():requires_grad_()
        local b = x64:float():requires_grad_()
        local ya, yb = ddp[name](a:t(), table.unpack(u, 2)), ddp[name](b:t(), table.unpack(u, 2))
        close(yb, ya:detach(), 1e-6, 3e-6, name .. " of a transposed view")
        ya:sum():backward()
        yb:sum():backward()
        close(b.grad, a.grad, 1e-6, 5e-6, name .. " gradient from an expanded ones")
      end
      for _, op in ipairs({ "add", "sub", "mul", "div", "maximum", "minimum" }) do
        local a, o = x64:float(), o64:float()
        close(ddp[op](a:t(), o), ddp[op](x64:t(), o64), 1e-6, 1e-6, op .. " with a transposed operand")
        close(ddp[op](o, a:t()), ddp[op](o64, x64:t()), 1e-6, 1e-6, op .. " transposed second")
      end
      for _, op in ipairs({ "add_", "mul_" }) do -- a strided output
        local got, want = x64:float(), x64:clone()
        got:t()[op](got:t(), o64:float())
        want:t()[op](want:t(), o64)
        close(got, want, 1e-6, 1e-6, op .. " into a transposed view")
      end
    end)

    it("copies a transposed view element by element, bit for bit, at 2, 4 and 8 bytes and ragged shapes",
      function()
        -- the 16 x 16 tiles (a register transpose on AVX-512) with partial tiles at both edges; NaN and -0
        -- keep their bits because nothing computes on the values
        for _, shape in ipairs({ { 16, 16 }, { 17, 33 }, { 40, 16 }, { 100, 23 }, { 129, 257 } }) do
          local r, c = shape[1], shape[2]
          local t = R.randn({ r, c }, 7 + r, 1):totable()
          local ints = {}
          for i = 1, r do
            ints[i] = {}
            for j = 1, c do ints[i][j] = math.floor(t[i][j] * 1000) end
          end
          t[1][1], t[r][c] = 0 / 0, -0.0
          local x = ddp.tensor(t, { dtype = "float64" })
          for _, dtype in ipairs({ "float32", "float64", "bfloat16", "int64" }) do
            local src = dtype == "int64" and ddp.tensor(ints, { dtype = "int64" }) or x:to(dtype)
            local got = src:t():contiguous()
            assert.same({ c, r }, got:size())
            assert.is_true(got:is_contiguous())
            local g, w = got:to("float64"):totable(), src:to("float64"):totable()
            for i = 1, c do
              for j = 1, r do
                local a, b = g[i][j], w[j][i]
                assert(a == b and 1 / a == 1 / b or (a ~= a and b ~= b),
                  string.format("%s [%d, %d] element (%d, %d): %s vs %s", dtype, r, c, i, j, a, b))
              end
            end
          end
        end
        -- large enough that the row blocks are split over the threads (the 2-thread runs)
        local big = R.randn({ 1000, 530 }, 31, 1)
        for _, dtype in ipairs({ "float32", "float64" }) do
          local src = big:to(dtype)
          local got = src:t():contiguous()
          assert.same({ 530, 1000 }, got:size())
          assert.equal(0, got:ne(src:t()):sum():item(), dtype .. " [1000, 530] transposed")
        end
      end)

    it("copies blocks of 8 MiB and more (streamed) whole, at any alignment and length", function()
      -- src and dst offsets that leave a head before the first cache line and a tail after the last 256 bytes
      local n = (8 * 1024 * 1024) // 4 + 1000
      local x = R.randn({ n + 40 }, 11, 1):float()
      for _, cut in ipairs({ { 1, n }, { 2, n + 3 }, { 17, n - 1 }, { 5, n + 35 } }) do
        local src = x:narrow(1, cut[1], cut[2])
        local out = ddp.zeros(cut[2] + 9):float()
        local dst = out:narrow(1, 4, cut[2])
        dst:copy_(src)
        assert.equal(0, dst:ne(src):sum():item(), "copy_ at offset " .. cut[1])
        assert.equal(0, out:narrow(1, 1, 3):abs():sum():item(), "bytes before the destination untouched")
        assert.equal(0, out:narrow(1, cut[2] + 4, 6):abs():sum():item(), "bytes after the destination untouched")
        local c = src:clone()
        assert.equal(0, c:ne(src):sum():item(), "clone at offset " .. cut[1])
        local d = src:double():clone() -- 8-byte elements, 16 MiB
        assert.equal(0, d:ne(src:double()):sum():item(), "float64 clone at offset " .. cut[1])
      end
    end)

    it("a sum along a broadcast dim is the sum of the materialised tensor, bitwise", function()
      -- reduce.c sums k equal terms as k * v without the expansion
      local v = ddp.tensor({ 0.1, -0.0, 3.5e30, math.huge, -math.huge, 0 / 0, 1e-30, -7.25, 1 / 3 })
      -- equal bits: the same value with the same sign of zero, or both NaN
      local function same_bits(g, w, what)
        assert(g == w and 1 / g == 1 / w or (g ~= g and w ~= w), what .. ": " .. g .. " vs " .. w)
      end
      for _, k in ipairs({ 2, 3, 1000, 4097 }) do
        local e = v:view(1, 9):expand(k, 9)
        local got, want = e:sum(1):totable(), e:contiguous():sum(1):totable()
        for i = 1, 9 do
          same_bits(got[i], want[i], k .. " copies of " .. v[i]:item())
        end
        local three = v:view(1, 9, 1):expand(2, 9, k)
        local g3, w3 = three:sum(3):totable(), three:contiguous():sum(3):totable()
        for b = 1, 2 do
          for i = 1, 9 do
            same_bits(g3[b][i], w3[b][i], k .. " copies of " .. v[i]:item() .. " along dim 3")
          end
        end
      end
      local a, b = ddp.randn(300, 7):requires_grad_(), ddp.randn(7):requires_grad_()
      local loss = ((a + b) * 2):sum()
      loss:backward()
      assert.same(ddp.full({ 7 }, 600):totable(), b.grad:totable())
    end)

    it("binary ops with broadcasting and comparisons match float64", function()
      local rows = threads == 1 and 37 or 5003
      local a64 = R.randn({ rows, 29 }, 5, 1)
      local b64 = R.randn({ 29 }, 6, 1):add(0.25)
      local c64 = R.randn({ rows, 1 }, 7, 1)
      local a, b, c = a64:float(), b64:float(), c64:float()
      for _, op in ipairs({ "add", "sub", "mul", "div", "maximum", "minimum" }) do
        close(ddp[op](a, b), ddp[op](a64, b64), 1e-6, 1e-6, op .. " [r, 29] with [29]")
        close(ddp[op](b, a), ddp[op](b64, a64), 1e-6, 1e-6, op .. " [29] with [r, 29]")
        close(ddp[op](c, a), ddp[op](c64, a64), 1e-6, 1e-6, op .. " [r, 1] with [r, 29]")
        close(ddp[op](a, 0.5), ddp[op](a64, 0.5), 1e-6, 1e-6, op .. " with a number")
      end
      local bb = a:clone()
      bb[1][1] = 0 / 0
      for _, op in ipairs({ "eq", "ne", "lt", "le", "gt", "ge" }) do
        local got, want = ddp[op](bb, b), ddp[op](bb:double(), b64:float():double())
        assert.equal("uint8", got:dtype())
        assert.same(want:totable(), got:totable(), op)
        -- against a number (the vector compare with a value): NaN, zero and the number itself in the rows
        bb[1][2], bb[1][3], bb[2][1] = 0, -0.0, 0.25
        for _, v in ipairs({ 0.25, 0, -1.5, 1 / 0 }) do
          got, want = ddp[op](bb, v), ddp[op](bb:double(), v)
          assert.equal("uint8", got:dtype())
          assert.same(want:totable(), got:totable(), op .. " with " .. v)
        end
      end
    end)

    it("softmax and log_softmax forward and backward match float64", function()
      -- short rows (10, 3 and 17 classes) end in a padded vector step
      for _, shape in ipairs({ { 13, 1031 }, { 7, 300, 5 }, { 9, 10 }, { 5, 3 }, { 6, 17 } }) do
        local dim = 2
        local x64 = R.randn(shape, 8, 1):mul(5)
        local gy64 = R.randn(shape, 9, 1)
        for _, fn in ipairs({ "softmax", "log_softmax" }) do
          local a, b = x64:clone():requires_grad_(), x64:float():requires_grad_()
          local ya, yb = ddp[fn](a, dim), ddp[fn](b, dim)
          close(yb, ya:detach(), 1e-6, 2e-6, fn)
          ya:backward(gy64)
          yb:backward(gy64:float())
          close(b.grad, a.grad, 1e-6, 2e-5, fn .. " gradient")
        end
      end
      -- NaN anywhere in a row makes the row NaN, as the reference; -inf
      -- logits get probability 0, a row of them is NaN
      local x = ddp.tensor({ { 1, 0 / 0, 2 }, { 1, 2, 3 }, { -math.huge, 0, -math.huge },
        { -math.huge, -math.huge, -math.huge } })
      for _, fn in ipairs({ "softmax", "log_softmax" }) do
        local got, want = ddp[fn](x, 2):totable(), ddp[fn](x:double(), 2):totable()
        for r = 1, 4 do
          for c = 1, 3 do
            local g, w = got[r][c], want[r][c]
            assert(g == w or (g ~= g and w ~= w) or math.abs(g - w) < 1e-6, fn .. " row " .. r .. ": " .. g .. " vs " .. w)
          end
        end
      end
      local y = ddp.softmax(x, 2)
      assert.is_true(y[1][3]:item() ~= y[1][3]:item())
      assert.is_true(math.abs(y[2]:sum():item() - 1) < 1e-6)
    end)

    it("cross_entropy loss and gradient match float64, with ignore_index and label smoothing", function()
      local rows = threads == 1 and 61 or 4001
      for _, C in ipairs({ 37, 10 }) do -- 10: the row is one padded vector step
      local x64 = R.randn({ rows, C }, 10, 1):mul(3)
      local t = (ddp.rand(rows) * C):long() + 1
      t[3] = -100
      for _, sm in ipairs({ 0, 0.1 }) do
        local a, b = x64:clone():requires_grad_(), x64:float():requires_grad_()
        local la = ddp.cross_entropy(a, t, { label_smoothing = sm })
        local lb = ddp.cross_entropy(b, t, { label_smoothing = sm })
        assert.near(la:item(), lb:item(), 1e-5 * math.abs(la:item()))
        la:backward()
        lb:backward()
        close(b.grad, a.grad, 1e-8, 1e-5, "cross_entropy gradient, smoothing " .. sm)
      end
      end
      -- a -inf logit away from the target: a finite loss, as PyTorch's
      local x = ddp.tensor({ { -math.huge, 1, 2 }, { 0, -math.huge, 3 } })
      local want = ddp.cross_entropy(x:double(), ddp.tensor({ 2, 3 }):long()):item()
      assert.near(want, ddp.cross_entropy(x, ddp.tensor({ 2, 3 }):long()):item(), 1e-6)
      assert.is_true(want == want and want < math.huge)
    end)

    it("layer_norm and batch_norm forward and backward match float64", function()
      local x64 = R.randn({ threads == 1 and 9 or 301, 517 }, 11, 1):mul(2):add(1)
      local w64, b64 = R.randn({ 517 }, 12, 1), R.randn({ 517 }, 13, 1)
      local gy64 = R.randn(x64:size(), 14, 1)
      local function run(x, w, b, gy)
        x, w, b = x:clone():requires_grad_(), w:clone():requires_grad_(), b:clone():requires_grad_()
        local y = ddp.layer_norm(x, 517, w, b)
        y:backward(gy)
        return y:detach(), x.grad, w.grad, b.grad
      end
      local A = { run(x64, w64, b64, gy64) }
      local B = { run(x64:float(), w64:float(), b64:float(), gy64:float()) }
      for k, what in ipairs({ "layer_norm", "its input gradient", "weight gradient", "bias gradient" }) do
        close(B[k], A[k], 2e-5, 2e-5, what)
      end
      local img64 = R.randn({ 6, 5, 23, 19 }, 15, 1):mul(3):add(2)
      local g64 = R.randn({ 6, 5, 23, 19 }, 16, 1)
      local function bn(x, gy)
        x = x:clone():requires_grad_()
        local w, b = ddp.ones(5, { dtype = x:dtype() }):requires_grad_(), ddp.zeros(5, { dtype = x:dtype() })
        local y = ddp.batch_norm(x, nil, nil, w, b, true)
        y:backward(gy)
        return y:detach(), x.grad, w.grad
      end
      local C, D = { bn(img64, g64) }, { bn(img64:float(), g64:float()) }
      for k, what in ipairs({ "batch_norm", "its input gradient", "weight gradient" }) do
        close(D[k], C[k], 2e-5, 2e-5, what)
      end
    end)

    it("pooling, reductions and dropout match float64", function()
      -- outputs 13 wide (one partial vector) and 21 wide (a full and a partial one)
      local x64 = inputs(4 * 3 * 30 * 26, 17):reshape(4, 3, 30, 26)
      x64[1][1][1][1] = 0 / 0 -- NaN wins its window
      local wide = inputs(2 * 2 * 6 * 42, 24):reshape(2, 2, 6, 42)
      for _, k in ipairs({ { 2, 2, 0 }, { 3, 2, 1 }, { 3, 3, 0 }, { 2, 2, 0, wide } }) do
        local x64 = k[4] or x64
        local a, b = x64:clone():requires_grad_(), x64:float():requires_grad_()
        for _, fn in ipairs({ "max_pool2d", "avg_pool2d" }) do
          local ya, yb = ddp[fn](a, k[1], k[2], k[3]), ddp[fn](b, k[1], k[2], k[3])
          close(yb, ya:detach(), 1e-6, 1e-6, fn .. " " .. table.concat(k, ",", 1, 3))
        end
        local g = R.randn(ddp.max_pool2d(a, k[1], k[2], k[3]):size(), 18, 1)
        ddp.avg_pool2d(a, k[1], k[2], k[3]):backward(g)
        ddp.avg_pool2d(b, k[1], k[2], k[3]):backward(g:float())
        close(b.grad, a.grad, 1e-6, 1e-5, "avg_pool2d gradient")
      end
      local r64 = R.randn({ 37, threads == 1 and 129 or 4001 }, 19, 1)
      r64[2][5] = 0 / 0
      local r = r64:float()
      for _, dim in ipairs({ 1, 2 }) do
        close(r:sum(dim), r64:float():double():sum(dim), 1e-5, 1e-6, "sum over dim " .. dim)
        close(r:mean(dim), r64:float():double():mean(dim), 1e-6, 1e-6, "mean over dim " .. dim)
        for _, fn in ipairs({ "max", "min" }) do
          local va, ia = ddp[fn](r64:float():double(), dim)
          local vb, ib = ddp[fn](r, dim)
          close(vb, va, 0, 0, fn .. " over dim " .. dim)
          assert.same(ia:totable(), ib:totable(), fn .. " positions over dim " .. dim)
        end
        assert.same(r64:float():double():argmax(dim):totable(), r:argmax(dim):totable(), "argmax " .. dim)
        assert.same(r64:float():double():argmin(dim):totable(), r:argmin(dim):totable(), "argmin " .. dim)
      end
      ddp.manual_seed(3)
      local d32 = ddp.dropout(r, 0.3)
      ddp.manual_seed(3)
      local d64 = ddp.dropout(r:double(), 0.3)
      close(d32, d64, 1e-6, 1e-6, "dropout (the same mask)")
    end)

    it("optimizer steps match float64", function()
      for _, make in ipairs({
        function(p) return ddp.optim.SGD({ p }, { lr = 0.1, momentum = 0.9 }) end,
        function(p) return ddp.optim.SGD({ p }, { lr = 0.1, momentum = 0.9, nesterov = true, weight_decay = 0.01 }) end,
        function(p) return ddp.optim.SGD({ p }, { lr = 0.1 }) end,
        function(p) return ddp.optim.Adam({ p }, { lr = 0.01 }) end,
        function(p) return ddp.optim.AdamW({ p }, { lr = 0.01, weight_decay = 0.1 }) end,
      }) do
        local p64 = R.randn({ N }, 20, 1):requires_grad_()
        local p32 = p64:detach():float():requires_grad_()
        local o64, o32 = make(p64), make(p32)
        for step = 1, 3 do
          local g = R.randn({ N }, 20 + step, 1)
          p64.grad, p32.grad = g, g:float()
          o64:step()
          o32:step()
        end
        close(p32:detach(), p64:detach(), 1e-6, 1e-5, "parameters after 3 steps")
      end
    end)

    it("bfloat16 casts round exactly as the scalar conversion", function()
      local x = inputs(N, 22):float()
      local direct = x:to("bfloat16"):double()             -- the vector kernel
      local scalar = x:double():to("bfloat16"):double()    -- float64 -> bfloat16: tensor/half.h per element
      R.assert_close(direct, R.from(scalar), 0, 0, "float32 -> bfloat16")
      R.assert_close(x:to("bfloat16"):float(), R.from(scalar), 0, 0, "bfloat16 -> float32")
    end)

    it("softmax and log_softmax keep full precision at 1e10 (bug 13)", function()
      -- logits 1e10 + k * step, offsets the dtype holds exactly (float32's
      -- spacing at 1e10 is 1024: equal logits there)
      for _, c in ipairs({ { "float64", 1, 1e-13 }, { "float32", 0, 2e-7 } }) do
        local dt, step, tol = c[1], c[2], c[3]
        local ks, v, z = { 0, 1, 2, -1 }, {}, 0
        local top = step > 0 and 2 or 0
        for j, k in ipairs(ks) do
          v[j] = 1e10 + k * step
          z = z + math.exp((k - top) * step)
        end
        local x = ddp.tensor({ v }, { dtype = dt })
        local ls, sm = ddp.log_softmax(x, 2), ddp.softmax(x, 2)
        for j, k in ipairs(ks) do
          local want = (k - top) * step - math.log(z)
          assert.near(want, ls[1][j]:item(), tol * math.max(1, math.abs(want)), dt .. " log_softmax " .. j)
          assert.near(math.exp(want), sm[1][j]:item(), tol, dt .. " softmax " .. j)
        end
      end
    end)

    it("cross_entropy gradient rows sum to 0 at |logits| ~ 1e4 (bug 13)", function()
      local x = (R.randn({ 64, 100 }, 23, 1) + 1e4):float():requires_grad_()
      local t = (ddp.rand(64) * 100):long() + 1
      local loss = ddp.cross_entropy(x, t)
      loss:backward()
      local sums = x.grad:sum(2):mul(64) -- each row: sum(p) - 1, before the mean's 1/64
      assert(sums:abs():max():item() < 2e-6, "row sums " .. tostring(sums:abs():max():item()))
      -- and the loss matches float64's
      local ref = ddp.cross_entropy(x:detach():double(), t):item()
      assert.near(ref, loss:item(), 1e-5 * math.max(1, math.abs(ref)))
    end)
  end, ISAS)
end)
