-- PyTorch's creation and shape functions composed in lua/ddplua/tensor_shape.lua against PyTorch 1.13: linspace and
-- logspace bit for bit (float32, float64), eye, triu_indices / tril_indices (1-based), the *_like and new_* makers,
-- the dtype shorthands; values and gradients (float32 and float64, transposed inputs, odd shapes, empty tensors,
-- negative dims) of meshgrid, cartesian_prod, block_diag, broadcast_tensors / broadcast_to, atleast_*d, the
-- *stack family, take, take_along_dim, diagonal, diag_embed, swapaxes, ravel, repeat_interleave, unflatten; and
-- the errors, each naming its function.
local ddp = require "ddplua"
local R = require "helpers.ref"
local TR = require "helpers.torch_ref"
local TC = require "helpers.torch_cases"

local NO_TORCH = "skipped: /usr/bin/python3 cannot import torch"

local function t12(t) return t:transpose(1, 2) end
local function t13(t) return t:transpose(1, 3) end

-- got[k] and ref[k] have one dtype, one shape and the same values, exactly (NaN where NaN)
local function exact(got, ref)
  local n = 0
  for k, v in pairs(got) do
    n = n + 1
    local r = ref[k]
    assert(r ~= nil, k .. ": PyTorch gave no result")
    assert.are.equal(r:dtype(), v:dtype(), k .. ": dtype")
    assert.are.same(r:size(), v:size(), k .. ": shape")
    local a, b = R.from(v:double()).v, R.from(r:double()).v
    for j = 1, #b do
      local x, y = a[j], b[j]
      assert(x == y or (x ~= x and y ~= y), string.format("%s[%d]: %.17g, PyTorch %.17g", k, j, x, y))
    end
  end
  local m = 0
  for _ in pairs(ref) do m = m + 1 end
  assert.are.equal(m, n, "as many results as PyTorch's")
end

describe("creation (tensor_shape.lua)", function()
  it("linspace and logspace give PyTorch's values bit for bit in float32 and float64", function()
    if not TR.available() then return pending(NO_TORCH) end
    local ranges = { { 0, 1 }, { -3.7, 11.3 }, { 0.1, 0.7 }, { 1e-3, 123.456 }, { 5, -2.2 }, { 1e10, -7e-5 },
      { -1, 1 }, { 2, 2 }, { 1 / 3, 2 / 3 } }
    local counts = { 0, 1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 40, 64, 100, 101, 1000, 1001, 4097 }
    local got, py = {}, {}
    for ri, r in ipairs(ranges) do
      for _, n in ipairs(counts) do
        for _, dt in ipairs({ "float32", "float64" }) do
          local k = string.format("l%d_%d_%s", ri, n, dt)
          got[k] = ddp.linspace(r[1], r[2], n, { dtype = dt })
          py[#py + 1] = string.format("OUT[%q] = torch.linspace(%.17g, %.17g, %d, dtype=torch.%s)", k, r[1], r[2], n, dt)
        end
      end
    end
    for ri, r in ipairs({ { 0, 2 }, { -3.7, 1.3 }, { 0.1, 0.7 }, { 2, -5 } }) do
      for _, n in ipairs({ 0, 1, 2, 7, 33, 100 }) do
        for _, dt in ipairs({ "float32", "float64" }) do
          for bi, base in ipairs({ 10, 2, 0.5, 2.718281828 }) do
            local k = string.format("g%d_%d_%s_%d", ri, n, dt, bi)
            got[k] = ddp.logspace(r[1], r[2], n, base, { dtype = dt })
            py[#py + 1] = string.format("OUT[%q] = torch.logspace(%.17g, %.17g, %d, base=%.17g, dtype=torch.%s)",
              k, r[1], r[2], n, base, dt)
          end
        end
      end
    end
    got.default = ddp.linspace(-2, 3, 11)
    got.logdefault = ddp.logspace(-2, 3, 11)
    py[#py + 1] = "OUT['default'] = torch.linspace(-2, 3, 11)\nOUT['logdefault'] = torch.logspace(-2, 3, 11)"
    exact(got, TR.run(table.concat(py, "\n") .. "\n", {}))
    -- long ranges (the split of the step into halves exact up to 2^26 steps), compared as tensors
    local long, lpy = {}, {}
    for i, r in ipairs({ { -7.25, 1e6 }, { 0.3, -0.1 }, { 3e-30, 7e-30 } }) do
      for _, dt in ipairs({ "float32", "float64" }) do
        local k = dt .. i
        long[k] = ddp.linspace(r[1], r[2], 300001, { dtype = dt })
        lpy[#lpy + 1] = string.format("OUT[%q] = torch.linspace(%.17g, %.17g, 300001, dtype=torch.%s)", k, r[1], r[2], dt)
      end
    end
    local lref = TR.run(table.concat(lpy, "\n") .. "\n", {})
    for k, v in pairs(long) do
      assert.are.equal(lref[k]:dtype(), v:dtype(), k)
      assert.are.equal(0, v:ne(lref[k]):sum():item(), k .. ": values that differ from PyTorch's")
    end
    -- the two ends are exact, the middle of an odd count too
    local l = ddp.linspace(-1.1, 7.3, 9, { dtype = "float64" })
    assert.are.equal(-1.1, l[1]:item())
    assert.are.equal(7.3, l[9]:item())
    assert.are.equal("bfloat16", ddp.linspace(0, 1, 4, { dtype = "bfloat16" }):dtype())
  end)

  it("eye, triu_indices, tril_indices (1-based) match PyTorch", function()
    if not TR.available() then return pending(NO_TORCH) end
    local got = {
      e3 = ddp.eye(3), e23 = ddp.eye(2, 3), e41 = ddp.eye(4, 1, { dtype = "float64" }), ei = ddp.eye(3, { dtype = "int64" }),
      e0 = ddp.eye(0), e03 = ddp.eye(0, 3), eu = ddp.eye(2, 2, { dtype = "uint8" }),
    }
    local py = { "OUT.update(e3=torch.eye(3), e23=torch.eye(2, 3), e41=torch.eye(4, 1, dtype=torch.float64), " ..
      "ei=torch.eye(3, dtype=torch.int64), e0=torch.eye(0), e03=torch.eye(0, 3), eu=torch.eye(2, 2, dtype=torch.uint8))" }
    local k = 0
    for _, rc in ipairs({ { 3, 4 }, { 4, 3 }, { 1, 1 }, { 0, 3 }, { 5, 0 }, { 5, 5 } }) do
      for _, off in ipairs({ 0, 1, -1, 2, -3, 7, -7 }) do
        k = k + 1
        got["u" .. k] = ddp.triu_indices(rc[1], rc[2], off)
        got["l" .. k] = ddp.tril_indices(rc[1], rc[2], off)
        py[#py + 1] = string.format("OUT['u%d'] = torch.triu_indices(%d, %d, %d) + 1", k, rc[1], rc[2], off)
        py[#py + 1] = string.format("OUT['l%d'] = torch.tril_indices(%d, %d, %d) + 1", k, rc[1], rc[2], off)
      end
    end
    got.udef, got.ldef = ddp.triu_indices(4, 4), ddp.tril_indices(3, 2)
    py[#py + 1] = "OUT['udef'] = torch.triu_indices(4, 4) + 1\nOUT['ldef'] = torch.tril_indices(3, 2) + 1"
    exact(got, TR.run(table.concat(py, "\n") .. "\n", {}))
  end)

  it("empty_like, randint_like, new_tensor, new_empty, half, bfloat16, bool", function()
    local x = ddp.randn(3, 4, { dtype = "float64" })
    local e = ddp.empty_like(x)
    assert.are.same({ 3, 4 }, e:size())
    assert.are.equal("float64", e:dtype())
    assert.are.equal("int64", ddp.empty_like(x, { dtype = "int64" }):dtype())
    assert.are.same({ 0, 2 }, ddp.empty_like(ddp.zeros(0, 2)):size())
    ddp.manual_seed(3)
    local r = ddp.randint_like(x, 5)
    assert.are.equal("float64", r:dtype())
    assert.are.same({ 3, 4 }, r:size())
    assert.is_true(r:ge(0):all():item() == 1 and r:lt(5):all():item() == 1)
    assert.are.same(r:floor():totable(), r:totable())
    local r2 = ddp.randint_like(ddp.zeros(200, { dtype = "int64" }), -3, 2)
    assert.are.equal("int64", r2:dtype())
    assert.are.equal(-3, r2:min():item())
    assert.are.equal(1, r2:max():item())
    local n = x:new_tensor({ 1, 2, 3 })
    assert.are.equal("float64", n:dtype())
    assert.are.same({ 1, 2, 3 }, n:totable())
    assert.are.equal("int64", x:new_tensor({ { 1 } }, { dtype = "int64" }):dtype())
    local src = ddp.tensor({ 1.5, 2.5 })
    local copy = x:new_tensor(src)
    assert.are.equal("float64", copy:dtype())
    src[1] = 9
    assert.are.equal(1.5, copy[1]:item()) -- a copy
    local leaf = ddp.randn(2):requires_grad_()
    assert.is_false(x:new_tensor(leaf).requires_grad) -- detached
    assert.are.same({ 2, 0, 3 }, x:new_empty({ 2, 0, 3 }):size())
    assert.are.equal("float64", x:new_empty(4):dtype())
    local h = ddp.tensor({ 1.5, -2 })
    assert.are.equal("float16", h:half():dtype())
    assert.are.equal("bfloat16", h:bfloat16():dtype())
    assert.are.same({ 1.5, -2 }, h:bfloat16():float():totable())
    local b = ddp.tensor({ 0.5, 0, -0.0, 0 / 0, -3, math.huge }):bool()
    assert.are.equal("uint8", b:dtype())
    assert.are.same({ 1, 0, 0, 1, 1, 1 }, b:totable())
    assert.are.same({ 1, 0, 1 }, ddp.tensor({ 256, 0, -1 }):bool():totable()) -- not a cast to uint8 (256 -> 0)
    assert.are.equal(12, ddp.numel(x))
    assert.are.equal(0, ddp.numel(ddp.zeros(3, 0)))
    assert.are.equal(1, ddp.numel(ddp.tensor(2.0)))
  end)
end)

describe("shape functions (tensor_shape.lua)", function()
  it("match PyTorch: values and gradients", function()
    if not TR.available() then return pending(NO_TORCH) end
    local n = TC.check_cases(TC.both_dtypes(function(dt)
      return {
        { "meshgrid ij of three vectors (one transposed, one 0-D), stacked",
          inputs = { { "a", R.randn({ 3 }, 1), grad = true }, { "b", R.randn({ 4, 1 }, 2), view = t12, grad = true },
            { "c", R.randn({}, 3), grad = true } },
          lua = function(I)
            local x, y, z = ddp.meshgrid(I.a, I.b:reshape(-1), I.c, { indexing = "ij" })
            return ddp.stack({ x, y, z })
          end,
          py = "out = torch.stack(torch.meshgrid(I['a'], I['b'].reshape(-1), I['c'], indexing='ij'))" },
        { "meshgrid xy of a list of three, stacked",
          inputs = { { "a", R.randn({ 2 }, 4), grad = true }, { "b", R.randn({ 3 }, 5), grad = true },
            { "c", R.randn({ 4 }, 6), grad = true } },
          lua = function(I) return ddp.stack(ddp.meshgrid({ I.a, I.b, I.c }, { indexing = "xy" })) end,
          py = "out = torch.stack(torch.meshgrid([I['a'], I['b'], I['c']], indexing='xy'))" },
        { "meshgrid xy of one vector and of an empty one",
          inputs = { { "a", R.randn({ 3 }, 7), grad = true }, { "e", R.randn({ 0 }, 8), grad = true } },
          lua = function(I)
            local g = ddp.meshgrid(I.a, { indexing = "xy" })
            local p, q = ddp.meshgrid(I.a, I.e, { indexing = "xy" })
            return ddp.cat({ g, p:reshape(-1), q:reshape(-1) })
          end,
          py = "g, = torch.meshgrid(I['a'], indexing='xy')\np, q = torch.meshgrid(I['a'], I['e'], indexing='xy')\n" ..
            "out = torch.cat([g, p.reshape(-1), q.reshape(-1)])" },
        { "cartesian_prod of three vectors, and of one",
          inputs = { { "a", R.randn({ 2 }, 9), grad = true }, { "b", R.randn({ 3 }, 10), grad = true },
            { "c", R.randn({ 2 }, 11), grad = true } },
          lua = function(I)
            return ddp.cat({ ddp.cartesian_prod(I.a, I.b, I.c):reshape(-1), ddp.cartesian_prod(I.b) })
          end,
          py = "out = torch.cat([torch.cartesian_prod(I['a'], I['b'], I['c']).reshape(-1), torch.cartesian_prod(I['b'])])" },
        { "block_diag of 0-D, 1-D, [2, 0], a transposed [3, 2] and [0, 2]",
          inputs = { { "s", R.randn({}, 12), grad = true }, { "v", R.randn({ 3 }, 13), grad = true },
            { "m", R.randn({ 2, 3 }, 14), view = t12, grad = true } },
          lua = function(I)
            local o = { dtype = dt }
            return ddp.block_diag(I.s, I.v, ddp.zeros({ 2, 0 }, o), I.m, ddp.zeros({ 0, 2 }, o))
          end,
          py = "o = I['s'].dtype\nout = torch.block_diag(I['s'], I['v'], torch.zeros(2, 0, dtype=o), I['m'], " ..
            "torch.zeros(0, 2, dtype=o))" },
        { "broadcast_tensors of [3, 1], [4] and 0-D, summed",
          inputs = { { "a", R.randn({ 3, 1 }, 15), grad = true }, { "b", R.randn({ 4 }, 16), grad = true },
            { "c", R.randn({}, 17), grad = true } },
          lua = function(I)
            local x, y, z = ddp.broadcast_tensors(I.a, I.b, I.c)
            return ddp.stack({ x, y, z * 2 })
          end,
          py = "x, y, z = torch.broadcast_tensors(I['a'], I['b'], I['c'])\nout = torch.stack([x, y, z * 2])" },
        { "broadcast_to with -1 and new dims, of a transposed [3, 1]",
          inputs = { { "a", R.randn({ 1, 3 }, 18), view = t12, grad = true } },
          lua = function(I) return I.a:broadcast_to({ 2, -1, 4 }) + ddp.broadcast_to(I.a, { 3, 1 }):sum() end,
          py = "out = I['a'].broadcast_to((2, -1, 4)) + torch.broadcast_to(I['a'], (3, 1)).sum()" },
        { "atleast_1d / 2d / 3d of 0-D, 1-D, 2-D and 4-D",
          inputs = { { "s", R.randn({}, 19), grad = true }, { "v", R.randn({ 3 }, 20), grad = true },
            { "m", R.randn({ 3, 2 }, 21), view = t12, grad = true }, { "h", R.randn({ 1, 2, 1, 2 }, 22), grad = true } },
          lua = function(I)
            local parts = {}
            for _, f in ipairs({ ddp.atleast_1d, ddp.atleast_2d, ddp.atleast_3d }) do
              for _, r in ipairs({ f(I.s, I.v, I.m, I.h) }) do parts[#parts + 1] = r:reshape(-1) end
              local one = f(I.v)
              parts[#parts + 1] = (one:sum(1, true) * (one:dim() + 1)):reshape(-1)
            end
            return ddp.cat(parts)
          end,
          py = "parts = []\nfor f in (torch.atleast_1d, torch.atleast_2d, torch.atleast_3d):\n" ..
            "    parts += [r.reshape(-1) for r in f(I['s'], I['v'], I['m'], I['h'])]\n" ..
            "    one = f(I['v'])\n    parts.append((one.sum(0, keepdim=True) * (one.dim() + 1)).reshape(-1))\nout = torch.cat(parts)" },
        { "vstack, hstack, dstack, column_stack",
          inputs = { { "v", R.randn({ 3 }, 23), grad = true }, { "m", R.randn({ 3, 2 }, 24), view = t12, grad = true },
            { "c", R.randn({ 2 }, 25), grad = true }, { "s", R.randn({}, 26), grad = true } },
          lua = function(I)
            return ddp.cat({ ddp.vstack({ I.v, I.m, I.v }):reshape(-1), ddp.hstack({ I.v, I.s, I.v }),
              ddp.hstack({ I.m, I.m:narrow(2, 1, 1) }):reshape(-1), ddp.dstack({ I.m, I.m }):reshape(-1),
              ddp.dstack({ I.v, I.v }):reshape(-1), ddp.column_stack({ I.c, I.m, I.c * 3 }):reshape(-1),
              ddp.column_stack({ I.s, I.s }):reshape(-1) })
          end,
          py = "v, m, c, s = I['v'], I['m'], I['c'], I['s']\n" ..
            "out = torch.cat([torch.vstack([v, m, v]).reshape(-1), torch.hstack([v, s, v]), " ..
            "torch.hstack([m, m[:, 0:1]]).reshape(-1), torch.dstack([m, m]).reshape(-1), torch.dstack([v, v]).reshape(-1), " ..
            "torch.column_stack([c, m, c * 3]).reshape(-1), torch.column_stack([s, s]).reshape(-1)])" },
        { "take of a transposed [3, 4] (repeated positions, a 2-D index, an empty one)",
          inputs = { { "x", R.randn({ 4, 3 }, 27), view = t12, grad = true } },
          lua = function(I)
            return ddp.cat({ I.x:take(ddp.tensor({ { 1, 12 }, { 5, 5 } })):reshape(-1), ddp.take(I.x, { 2, 2, 7 }),
              I.x:take(ddp.zeros({ 0 }, { dtype = "int64" })), I.x:narrow(1, 2, 1):take(ddp.tensor({ 3 })) })
          end,
          py = "x = I['x']\nout = torch.cat([x.take(torch.tensor([[0, 11], [4, 4]])).reshape(-1), " ..
            "torch.take(x, torch.tensor([1, 1, 6])), x.take(torch.zeros(0, dtype=torch.int64)), x[1:2].take(torch.tensor([2]))])" },
        { "take_along_dim: dims 2, -3, broadcast, flattened, a transposed input",
          inputs = { { "x", R.randn({ 4, 3, 2 }, 28), view = t13, grad = true } },
          lua = function(I)
            local i1 = ddp.tensor({ { { 1, 3, 3, 2 } }, { { 2, 2, 1, 1 } } }) -- [2, 1, 4]
            local i2 = ddp.tensor({ { { 2 } }, { { 1 } }, { { 2 } }, { { 2 } } }):view(1, 1, 4) -- [1, 1, 4]
            return ddp.cat({ I.x:take_along_dim(i1, 2):reshape(-1), ddp.take_along_dim(I.x, i2, -3):reshape(-1),
              I.x:take_along_dim(ddp.tensor({ 24, 1, 3 })), I.x:argsort(3):take_along_dim(ddp.tensor({ { { 1 } } }), 3)
                :double():to(dt):reshape(-1) * 0 + I.x:take_along_dim(I.x:argsort(3), 3):narrow(3, 1, 1):reshape(-1):sum() })
          end,
          py = "x = I['x']\ni1 = torch.tensor([[[0, 2, 2, 1]], [[1, 1, 0, 0]]])\ni2 = torch.tensor([1, 0, 1, 1]).view(1, 1, 4)\n" ..
            "out = torch.cat([x.take_along_dim(i1, 1).reshape(-1), torch.take_along_dim(x, i2, -3).reshape(-1), " ..
            "x.take_along_dim(torch.tensor([23, 0, 2])), torch.zeros(6, dtype=x.dtype) + " ..
            "x.take_along_dim(x.argsort(2), 2)[:, :, 0:1].reshape(-1).sum()])" },
        { "diagonal: offsets, dims (negative, reversed), a transposed 3-D input, past the corner",
          inputs = { { "x", R.randn({ 4, 5, 3 }, 29), view = t13, grad = true } },
          lua = function(I)
            local x = I.x -- [3, 5, 4]
            return ddp.cat({ x:diagonal():reshape(-1), x:diagonal(1, 2, 3):reshape(-1), x:diagonal(-2, -1, -2):reshape(-1),
              ddp.diagonal(x, 2, 3, 1):reshape(-1), x:diagonal(9):reshape(-1), x[1]:diagonal(-1), x[1]:t():diagonal(3) })
          end,
          py = "x = I['x']\nout = torch.cat([x.diagonal().reshape(-1), x.diagonal(1, 1, 2).reshape(-1), " ..
            "x.diagonal(-2, -1, -2).reshape(-1), torch.diagonal(x, 2, 2, 0).reshape(-1), x.diagonal(9).reshape(-1), " ..
            "x[0].diagonal(-1), x[0].t().diagonal(3)])" },
        { "diag_embed: offsets and dims, of a transposed [3, 2], of [1] and empty",
          inputs = { { "x", R.randn({ 2, 3 }, 30), view = t12, grad = true }, { "s", R.randn({}, 31), grad = true } },
          lua = function(I)
            local x = I.x -- [3, 2]
            return ddp.cat({ x:diag_embed():reshape(-1), x:diag_embed(1):reshape(-1), x:diag_embed(-2, 1, 3):reshape(-1),
              ddp.diag_embed(x, 1, -1, 1):reshape(-1), I.s:reshape(1):diag_embed(1):reshape(-1),
              x:narrow(2, 1, 0):diag_embed(1):reshape(-1) })
          end,
          py = "x = I['x']\nout = torch.cat([x.diag_embed().reshape(-1), x.diag_embed(1).reshape(-1), " ..
            "x.diag_embed(-2, 0, 2).reshape(-1), torch.diag_embed(x, 1, -1, 0).reshape(-1), I['s'].reshape(1).diag_embed(1).reshape(-1), " ..
            "x[:, 0:0].diag_embed(1).reshape(-1)])" },
        { "swapaxes, swapdims, ravel of a transposed input",
          inputs = { { "x", R.randn({ 4, 3, 2 }, 32), view = t13, grad = true } },
          lua = function(I)
            return ddp.cat({ I.x:swapaxes(1, -1):ravel(), ddp.swapdims(I.x, 2, 3):ravel() * 2, ddp.ravel(I.x) * 3 })
          end,
          py = "x = I['x']\nout = torch.cat([x.swapaxes(0, -1).ravel(), torch.swapdims(x, 1, 2).ravel() * 2, torch.ravel(x) * 3])" },
        { "repeat_interleave: a number, counts (with zeros), one count, flattened, 0-D, empty",
          inputs = { { "x", R.randn({ 4, 3 }, 33), view = t12, grad = true }, { "s", R.randn({}, 34), grad = true } },
          lua = function(I)
            local x = I.x -- [3, 4]
            return ddp.cat({ x:repeat_interleave(2, 1):reshape(-1), x:repeat_interleave(ddp.tensor({ 0, 3, 1, 0 }), -1):reshape(-1),
              ddp.repeat_interleave(x, ddp.tensor({ 2 }), 2):reshape(-1), x:repeat_interleave(3), x:repeat_interleave(0, 2):reshape(-1),
              I.s:repeat_interleave(3), I.s:repeat_interleave(2, 1), x:narrow(1, 1, 0):repeat_interleave(2, 1):reshape(-1) })
          end,
          py = "x, s = I['x'], I['s']\nout = torch.cat([x.repeat_interleave(2, 0).reshape(-1), " ..
            "x.repeat_interleave(torch.tensor([0, 3, 1, 0]), -1).reshape(-1), torch.repeat_interleave(x, torch.tensor([2]), 1).reshape(-1), " ..
            "x.repeat_interleave(3), x.repeat_interleave(0, 1).reshape(-1), s.repeat_interleave(3), s.reshape(1).repeat_interleave(2, 0), " ..
            "x[0:0].repeat_interleave(2, 0).reshape(-1)])" },
        { "unflatten: -1, negative dim, a transposed input, size 0",
          inputs = { { "x", R.randn({ 6, 4 }, 35), view = t12, grad = true } },
          lua = function(I)
            local x = I.x -- [4, 6]
            return ddp.cat({ x:unflatten(2, { 2, -1 }):reshape(-1), x:unflatten(-2, { 2, 1, 2 }):sum(3):reshape(-1),
              ddp.unflatten(x, 1, { 4 }):reshape(-1), x:narrow(2, 1, 0):unflatten(2, { 0, 5 }):reshape(-1) })
          end,
          py = "x = I['x']\nout = torch.cat([x.unflatten(1, (2, -1)).reshape(-1), x.unflatten(-2, (2, 1, 2)).sum(2).reshape(-1), " ..
            "x.unflatten(0, (4,)).reshape(-1), x[:, 0:0].unflatten(1, (0, 5)).reshape(-1)])" },
      }
    end))
    assert.are.equal(32, n)
  end)

  it("match PyTorch's shapes, integer values and views", function()
    if not TR.available() then return pending(NO_TORCH) end
    local i = ddp.tensor({ { 1, 2, 3 }, { 4, 5, 6 } })
    local a, b, c = ddp.meshgrid(ddp.tensor({ 1, 2 }), ddp.tensor({ 3, 4, 5 }), ddp.tensor({ 6, 7, 8, 9 }), { indexing = "xy" })
    local got = {
      ma = a, mb = b, mc = c,
      ri = ddp.repeat_interleave(ddp.tensor({ 1, 0, 3, 2 })), ri0 = ddp.repeat_interleave(ddp.zeros({ 0 }, { dtype = "int64" })),
      rz = ddp.repeat_interleave(ddp.tensor({ 0, 0 })),
      cp = ddp.cartesian_prod(ddp.tensor({ 1, 2 }), ddp.tensor({ 7 }), ddp.tensor({ 8, 9 })),
      cpe = ddp.cartesian_prod(ddp.tensor({ 1, 2 }), ddp.zeros({ 0 }, { dtype = "int64" })),
      bd = ddp.block_diag(i, ddp.tensor({ { 7 } }), ddp.tensor(8)), bd0 = ddp.block_diag(),
      bdp = ddp.block_diag(i, ddp.tensor({ 1.5 }, { dtype = "float64" })),
      tk = i:take(ddp.tensor({ 6, 1 })), tad = i:take_along_dim(ddp.tensor({ { 3 }, { 1 } }), 2),
      dg = i:diagonal(1), de = i:diag_embed(0, 1, 2), ri2 = i:repeat_interleave(ddp.tensor({ 2, 1 }), 1),
      hs = ddp.hstack({ i, i }), vs = ddp.vstack({ i:reshape(-1), i:reshape(-1) }), cs = ddp.column_stack({ i:t(), ddp.tensor({ 1, 2, 3 }) }),
      cc = ddp.concat({ i, i }, -1), ds = ddp.dstack({ ddp.tensor(1), ddp.tensor(2) }),
      bt = select(2, ddp.broadcast_tensors(ddp.zeros(2, 1, 1), i)),
    }
    local ref = TR.run([==[
i = torch.tensor([[1, 2, 3], [4, 5, 6]])
a, b, c = torch.meshgrid(torch.tensor([1, 2]), torch.tensor([3, 4, 5]), torch.tensor([6, 7, 8, 9]), indexing='xy')
OUT.update(ma=a, mb=b, mc=c, ri=torch.repeat_interleave(torch.tensor([1, 0, 3, 2])) + 1,
           ri0=torch.repeat_interleave(torch.zeros(0, dtype=torch.int64)) + 1, rz=torch.repeat_interleave(torch.tensor([0, 0])) + 1,
           cp=torch.cartesian_prod(torch.tensor([1, 2]), torch.tensor([7]), torch.tensor([8, 9])),
           cpe=torch.cartesian_prod(torch.tensor([1, 2]), torch.zeros(0, dtype=torch.int64)),
           bd=torch.block_diag(i, torch.tensor([[7]]), torch.tensor(8)), bd0=torch.block_diag(),
           bdp=torch.block_diag(i, torch.tensor([1.5], dtype=torch.float64)),
           tk=i.take(torch.tensor([5, 0])), tad=i.take_along_dim(torch.tensor([[2], [0]]), 1), dg=i.diagonal(1),
           de=i.diag_embed(0, 0, 1), ri2=i.repeat_interleave(torch.tensor([2, 1]), 0), hs=torch.hstack([i, i]),
           vs=torch.vstack([i.reshape(-1), i.reshape(-1)]), cs=torch.column_stack([i.t(), torch.tensor([1, 2, 3])]),
           cc=torch.concat([i, i], -1), ds=torch.dstack([torch.tensor(1), torch.tensor(2)]),
           bt=torch.broadcast_tensors(torch.zeros(2, 1, 1), i)[1])
]==], {})
    exact(got, ref)
    -- meshgrid without indexing: "ij" (with a warning, once)
    local g1, g2 = ddp.meshgrid(ddp.tensor({ 1, 2 }), ddp.tensor({ 3, 4, 5 }))
    assert.are.same({ { 1, 1, 1 }, { 2, 2, 2 } }, g1:totable())
    assert.are.same({ { 3, 4, 5 }, { 3, 4, 5 } }, g2:totable())
    -- views where PyTorch gives views: writing through them changes the input
    local x = ddp.zeros(2, 3)
    x:broadcast_to({ 4, 2, 3 })[1][1][1]:fill_(5)
    x:swapaxes(1, 2)[3][2]:fill_(7)
    x:unflatten(2, { 3, 1 })[1][2][1]:fill_(9)
    x:ravel()[5]:fill_(4)
    assert.are.same({ { 5, 9, 0 }, { 0, 4, 7 } }, x:totable())
    local v = ddp.zeros(3)
    local m1, m2 = ddp.meshgrid(v, ddp.zeros(2), { indexing = "ij" })
    assert.are.same({ 3, 2 }, m1:size())
    assert.are.equal(v:data_ptr(), m1:data_ptr())
    -- diagonal is a copy
    local d = x:diagonal()
    d:fill_(1)
    assert.are.same({ { 5, 9, 0 }, { 0, 4, 7 } }, x:totable())
  end)

  it("name the function and what it expected in their errors", function()
    local x = ddp.randn(2, 3)
    local L = { dtype = "int64" }
    R.assert_error(function() ddp.linspace(0, 1, -1) end, "linspace", "steps")
    R.assert_error(function() ddp.linspace(0, 1, 2.5) end, "linspace", "steps")
    R.assert_error(function() ddp.linspace("a", 1, 3) end, "linspace", "start and end")
    R.assert_error(function() ddp.linspace(0, 1, 3, L) end, "linspace", "floating dtype")
    R.assert_error(function() ddp.linspace(0, 1, 3, { dtpye = "float64" }) end, "linspace", "unknown option 'dtpye'")
    R.assert_error(function() ddp.logspace(0, 1, 3, "2") end, "logspace", "base")
    R.assert_error(function() ddp.eye(-1) end, "eye", "n must be an integer >= 0")
    R.assert_error(function() ddp.eye(2, 1.5) end, "eye", "m must be")
    R.assert_error(function() ddp.triu_indices(3, -1) end, "triu_indices", "col")
    R.assert_error(function() ddp.tril_indices(3, 3, 0.5) end, "tril_indices", "offset")
    R.assert_error(function() ddp.tril_indices(3, 3, 0, { dtype = "float32" }) end, "tril_indices", "int64")
    R.assert_error(function() ddp.meshgrid(x, { indexing = "ij" }) end, "meshgrid", "0-D or 1-D")
    R.assert_error(function() ddp.meshgrid(ddp.ones(2), { indexing = "yx" }) end, "meshgrid", "indexing")
    R.assert_error(function() ddp.meshgrid(ddp.ones(2), ddp.ones(2, L), { indexing = "ij" }) end, "meshgrid", "one dtype")
    R.assert_error(function() ddp.meshgrid({ indexing = "ij" }) end, "meshgrid", "at least one tensor")
    R.assert_error(function() ddp.meshgrid(ddp.ones(2), 3) end, "meshgrid", "expected a tensor as argument 2")
    R.assert_error(function() ddp.cartesian_prod(x) end, "cartesian_prod", "1-D")
    R.assert_error(function() ddp.cartesian_prod() end, "cartesian_prod", "at least one")
    R.assert_error(function() ddp.block_diag(ddp.ones(1, 1, 1)) end, "block_diag", "0-D, 1-D or 2-D")
    R.assert_error(function() ddp.broadcast_tensors(ddp.ones(2), ddp.ones(3)) end, "broadcast_tensors", "[2], [3]")
    R.assert_error(function() x:broadcast_to({ 3, 3 }) end, "broadcast_to", "[2, 3] to [3, 3]")
    R.assert_error(function() x:broadcast_to({ 3 }) end, "broadcast_to", "cannot broadcast")
    R.assert_error(function() x:broadcast_to({ -1, 2, 3 }) end, "broadcast_to", "cannot broadcast")
    R.assert_error(function() x:broadcast_to(3) end, "broadcast_to", "table of integers")
    R.assert_error(function() ddp.atleast_2d(x, 1) end, "atleast_2d", "argument 2")
    R.assert_error(function() ddp.vstack({}) end, "vstack", "non-empty list")
    R.assert_error(function() ddp.hstack(x) end, "hstack", "list of tensors")
    R.assert_error(function() ddp.column_stack({ x, "y" }) end, "column_stack", "element 2")
    R.assert_error(function() x:take(ddp.tensor({ 7 })) end, "take", "position 7 is out of range", "1..6")
    R.assert_error(function() x:take(ddp.tensor({ 0 })) end, "take", "position 0")
    R.assert_error(function() x:take(ddp.tensor({ 1.0 })) end, "take", "int64")
    R.assert_error(function() x:take_along_dim(ddp.tensor({ { 1 } }, { dtype = "float32" }), 1) end, "take_along_dim", "int64")
    R.assert_error(function() x:take_along_dim(ddp.tensor({ 1 }), 1) end, "take_along_dim", "as many dims")
    R.assert_error(function() x:take_along_dim(ddp.ones(3, 1, L), 2) end, "take_along_dim", "do not broadcast")
    R.assert_error(function() x:take_along_dim(ddp.ones(2, 1, L), 3) end, "take_along_dim", "dim 3 is out of range")
    R.assert_error(function() ddp.ones(3):diagonal() end, "diagonal", "at least 2 dims")
    R.assert_error(function() x:diagonal(0, 1, -2) end, "diagonal", "dim1 and dim2 must differ")
    R.assert_error(function() x:diagonal(0, 3) end, "diagonal", "dim 3 is out of range")
    R.assert_error(function() x:diagonal(0.5) end, "diagonal", "offset")
    R.assert_error(function() x:diag_embed(0, 1, -3) end, "diag_embed", "must differ")
    R.assert_error(function() x:diag_embed(0, 4) end, "diag_embed", "out of range")
    R.assert_error(function() ddp.tensor(1.0):diag_embed() end, "diag_embed", "at least 1 dim")
    R.assert_error(function() x:swapaxes(1, 3) end, "swapaxes", "dim 3 is out of range")
    R.assert_error(function() x:swapdims(1.5, 1) end, "swapdims", "integer")
    R.assert_error(function() ddp.ravel(3) end, "ravel", "expected a tensor")
    R.assert_error(function() x:repeat_interleave(-1, 1) end, "repeat_interleave", ">= 0")
    R.assert_error(function() x:repeat_interleave(ddp.tensor({ 1, 2, 3 }), 1) end, "repeat_interleave", "expected 2 repeats")
    R.assert_error(function() x:repeat_interleave(ddp.tensor({ 1, -2 }), 1) end, "repeat_interleave", ">= 0")
    R.assert_error(function() x:repeat_interleave(ddp.tensor({ 1.0, 2.0 }), 1) end, "repeat_interleave", "int64")
    R.assert_error(function() x:repeat_interleave(2, 3) end, "repeat_interleave", "out of range")
    R.assert_error(function() ddp.repeat_interleave(x) end, "repeat_interleave", "counts")
    R.assert_error(function() x:unflatten(2, { 2, 2 }) end, "unflatten", "multiply to 4", "size 3")
    R.assert_error(function() x:unflatten(2, { -1, -1 }) end, "unflatten", "only one size")
    R.assert_error(function() x:unflatten(2, { 2, -1 }) end, "unflatten", "do not fit")
    R.assert_error(function() x:unflatten(3, { 3 }) end, "unflatten", "out of range")
    R.assert_error(function() x:unflatten(1, {}) end, "unflatten", "non-empty")
    R.assert_error(function() ddp.randint_like(x, 5, 5) end, "randint_like", "low < high")
    R.assert_error(function() ddp.randint_like(x, 2.5) end, "randint_like", "high must be an integer")
    R.assert_error(function() ddp.empty_like({}) end, "empty_like", "expected a tensor")
    R.assert_error(function() x:new_tensor("a") end, "new_tensor", "data")
    R.assert_error(function() x:new_empty({ 2, -1 }) end, "new_empty", ">= 0")
    R.assert_error(function() ddp.numel(nil) end, "numel", "expected a tensor")
  end)
end)
