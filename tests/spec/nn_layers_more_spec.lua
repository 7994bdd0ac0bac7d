-- The smaller layers of lua/ddplua/nn/layers_more.lua against PyTorch 1.13 (values and gradients, float32 and
-- float64, transposed inputs, broadcasting, zero rows, values at 0): nn.Softmax / LogSoftmax / Softmin (given and
-- implicit dims), GLU, PReLU (one weight and per channel), Unflatten, CosineSimilarity, PairwiseDistance,
-- F.normalize, F.one_hot, nn.Parameter, and their errors.
local ddp = require "ddplua"
local R = require "helpers.ref"
local TR = require "helpers.torch_ref"
local TC = require "helpers.torch_cases"
local nn, F = ddp.nn, ddp.nn.F

local NO_TORCH = "skipped: /usr/bin/python3 cannot import torch"

local function t12(t) return t:transpose(1, 2) end
local function t23(t) return t:transpose(2, 3) end

-- values with exact zeros in them (PReLU's and the norms' kinks)
local function with_zeros(shape, seed)
  local x = R.randn(shape, seed)
  return x * (x:abs():gt(0.3):double())
end

describe("nn's smaller layers (layers_more.lua)", function()
  it("match PyTorch: values and gradients", function()
    if not TR.available() then return pending(NO_TORCH) end
    local n = TC.check_cases(TC.both_dtypes(function(dt)
      return {
        { "Softmax(2) on a transposed [3, 5]", inputs = { { "x", R.randn({ 5, 3 }, 1, 3), view = t12, grad = true } },
          lua = function(I) return nn.Softmax(2)(I.x) end, py = "out = nn.Softmax(1)(I['x'])" },
        { "LogSoftmax(-1) on [2, 3, 4]", inputs = { { "x", R.randn({ 2, 3, 4 }, 2, 2), grad = true } },
          lua = function(I) return nn.LogSoftmax(-1)(I.x) end, py = "out = nn.LogSoftmax(-1)(I['x'])" },
        { "Softmin{dim = 1} on [4, 3]", inputs = { { "x", R.randn({ 4, 3 }, 3), grad = true } },
          lua = function(I) return nn.Softmin({ dim = 1 })(I.x) end, py = "out = nn.Softmin(0)(I['x'])" },
        { "Softmax() on [2, 3, 4] (implicit dim 1)", inputs = { { "x", R.randn({ 2, 3, 4 }, 4), grad = true } },
          lua = function(I) return nn.Softmax()(I.x) end, py = "out = nn.Softmax()(I['x'])" },
        { "GLU() on [3, 6]", inputs = { { "x", R.randn({ 3, 6 }, 5, 2), grad = true } },
          lua = function(I) return nn.GLU()(I.x) end, py = "out = nn.GLU()(I['x'])" },
        { "F.glu(x, 2) on a transposed [2, 4, 3]", inputs = { { "x", R.randn({ 2, 3, 4 }, 6), view = t23, grad = true } },
          lua = function(I) return F.glu(I.x, 2) end, py = "out = F.glu(I['x'], 1)" },
        { "PReLU() on [3, 5] with zeros",
          inputs = { { "x", with_zeros({ 3, 5 }, 7), grad = true }, { "w", ddp.tensor({ 0.3 }, { dtype = "float64" }) } },
          lua = function(I)
            local m = nn.PReLU({ dtype = dt })
            ddp.no_grad(function() m.weight:copy_(I.w) end)
            return m(I.x), { w = m.weight }
          end,
          py = "m = nn.PReLU().to(I['x'].dtype)\nwith torch.no_grad(): m.weight.copy_(I['w'])\n" ..
            "out = m(I['x'])\nP = {'w': m.weight}" },
        { "PReLU(4) on a transposed [2, 4, 3]",
          inputs = { { "x", with_zeros({ 2, 3, 4 }, 8), view = t23, grad = true },
            { "w", R.randn({ 4 }, 9) } },
          lua = function(I)
            local m = nn.PReLU(4, { dtype = dt })
            ddp.no_grad(function() m.weight:copy_(I.w) end)
            return m(I.x), { w = m.weight }
          end,
          py = "m = nn.PReLU(4).to(I['x'].dtype)\nwith torch.no_grad(): m.weight.copy_(I['w'])\n" ..
            "out = m(I['x'])\nP = {'w': m.weight}" },
        { "F.prelu(x, w) on [5]", inputs = { { "x", with_zeros({ 5 }, 10), grad = true },
          { "w", ddp.tensor({ 0.1 }, { dtype = "float64" }), grad = true } },
          lua = function(I) return F.prelu(I.x, I.w) end, py = "out = F.prelu(I['x'], I['w'])" },
        { "Unflatten(2, {2, -1}) on [4, 6]", inputs = { { "x", R.randn({ 4, 6 }, 11), grad = true } },
          lua = function(I) return nn.Unflatten(2, { 2, -1 })(I.x) end, py = "out = nn.Unflatten(1, (2, -1))(I['x'])" },
        { "CosineSimilarity() on [3, 5] with a zero row",
          inputs = { { "a", R.randn({ 3, 5 }, 12) * ddp.tensor({ { 1 }, { 0 }, { 1 } }, { dtype = "float64" }), grad = true },
            { "b", R.randn({ 3, 5 }, 13), grad = true } },
          lua = function(I) return nn.CosineSimilarity()(I.a, I.b) end, py = "out = nn.CosineSimilarity()(I['a'], I['b'])" },
        { "F.cosine_similarity broadcast [2, 3, 4] and [1, 3, 4], dim 3, eps 0.5",
          inputs = { { "a", R.randn({ 2, 3, 4 }, 14), grad = true }, { "b", R.randn({ 1, 3, 4 }, 15), grad = true } },
          lua = function(I) return F.cosine_similarity(I.a, I.b, 3, 0.5) end,
          py = "out = F.cosine_similarity(I['a'], I['b'], 2, 0.5)" },
        { "F.cosine_similarity of vectors, dim 1", inputs = { { "a", R.randn({ 6 }, 16), grad = true },
          { "b", R.randn({ 6 }, 17), grad = true } },
          lua = function(I) return F.cosine_similarity(I.a, I.b, { dim = 1 }) end,
          py = "out = F.cosine_similarity(I['a'], I['b'], dim=0)" },
        { "PairwiseDistance() on [3, 5]", inputs = { { "a", R.randn({ 3, 5 }, 18), grad = true },
          { "b", R.randn({ 3, 5 }, 19), grad = true } },
          lua = function(I) return nn.PairwiseDistance()(I.a, I.b) end, py = "out = nn.PairwiseDistance()(I['a'], I['b'])" },
        { "F.pairwise_distance p=1 keepdim on [4, 3]", inputs = { { "a", R.randn({ 4, 3 }, 20), grad = true },
          { "b", R.randn({ 4, 3 }, 21), grad = true } },
          lua = function(I) return F.pairwise_distance(I.a, I.b, 1, 1e-6, true) end,
          py = "out = F.pairwise_distance(I['a'], I['b'], 1, 1e-6, True)" },
        { "F.normalize on a transposed [3, 5] with a zero row",
          inputs = { { "x", R.randn({ 5, 3 }, 22) * ddp.tensor({ { 1, 0, 1 } }, { dtype = "float64" }), view = t12,
            grad = true } },
          lua = function(I) return F.normalize(I.x) end, py = "out = F.normalize(I['x'])" },
        { "F.normalize p=1 dim 1 eps 0.1 on [4, 3]", inputs = { { "x", R.randn({ 4, 3 }, 23), grad = true } },
          lua = function(I) return F.normalize(I.x, { p = 1, dim = 1, eps = 0.1 }) end,
          py = "out = F.normalize(I['x'], p=1, dim=0, eps=0.1)" },
      }
    end))
    assert.are.equal(34, n)
  end)

  it("Conv2d / Conv1d padding_mode and F.pad's circular mode match PyTorch", function()
    if not TR.available() then return pending(NO_TORCH) end
    local function conv_case(label, make, py_make, x, wshape)
      return { label, inputs = { { "x", x, grad = true }, { "w", R.randn(wshape, 40) }, { "b", R.randn({ wshape[1] }, 41) } },
        lua = function(I)
          local m = make():to(I.x:dtype())
          ddp.no_grad(function()
            m.weight:copy_(I.w)
            m.bias:copy_(I.b)
          end)
          return m(I.x), { w = m.weight, b = m.bias }
        end,
        py = "m = " .. py_make .. ".to(I['x'].dtype)\nwith torch.no_grad(): m.weight.copy_(I['w']); m.bias.copy_(I['b'])\n" ..
          "out = m(I['x'])\nP = {'w': m.weight, 'b': m.bias}" }
    end
    local n = TC.check_cases(TC.both_dtypes(function()
      local cases = {}
      for _, mode in ipairs({ "reflect", "replicate", "circular" }) do
        cases[#cases + 1] = conv_case("Conv2d padding (1, 2) " .. mode,
          function() return nn.Conv2d(2, 3, 3, { padding = { 1, 2 }, padding_mode = mode }) end,
          "nn.Conv2d(2, 3, 3, padding=(1, 2), padding_mode='" .. mode .. "')", R.randn({ 2, 2, 5, 6 }, 42), { 3, 2, 3, 3 })
        cases[#cases + 1] = conv_case("Conv1d padding same " .. mode,
          function() return nn.Conv1d(2, 3, 4, { padding = "same", padding_mode = mode }) end,
          "nn.Conv1d(2, 3, 4, padding='same', padding_mode='" .. mode .. "')", R.randn({ 2, 2, 9 }, 43), { 3, 2, 4 })
      end
      cases[#cases + 1] = { "F.pad circular (-1, 2) on [1, 2, 5]", inputs = { { "x", R.randn({ 1, 2, 5 }, 44), grad = true } },
        lua = function(I) return F.pad(I.x, { -1, 2 }, "circular") end, py = "out = F.pad(I['x'], (-1, 2), 'circular')" }
      cases[#cases + 1] = { "F.pad circular (1, 3, 2, 0) on [2, 1, 3, 4]",
        inputs = { { "x", R.randn({ 2, 1, 3, 4 }, 45), grad = true } },
        lua = function(I) return F.pad(I.x, { 1, 3, 2, 0 }, "circular") end,
        py = "out = F.pad(I['x'], (1, 3, 2, 0), 'circular')" }
      return cases
    end))
    assert.are.equal(16, n)
    R.assert_error(function() F.pad(ddp.randn(1, 1, 3), { 4, 0 }, "circular") end, "wraps around more than once")
    R.assert_error(function() F.pad(ddp.randn(1, 3), { 1, 1 }, "circular") end, "batched input")
    R.assert_error(function() nn.Conv2d(1, 1, 3, { padding_mode = "wrap" }) end, "padding_mode must be")
    assert.are.equal("Conv2d(1, 1, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), padding_mode=reflect)",
      tostring(nn.Conv2d(1, 1, 3, 1, 1, 1, 1, true, "reflect")))
  end)

  it("the adaptive pools match PyTorch: even tiles, overlapping windows, 1-d, unbatched", function()
    if not TR.available() then return pending(NO_TORCH) end
    local n = TC.check_cases(TC.both_dtypes(function()
      return {
        { "AdaptiveMaxPool2d({3, 4}) on [2, 3, 7, 9] (overlapping windows)",
          inputs = { { "x", R.randn({ 2, 3, 7, 9 }, 50), grad = true } },
          lua = function(I) return nn.AdaptiveMaxPool2d({ 3, 4 })(I.x) end,
          py = "out = nn.AdaptiveMaxPool2d((3, 4))(I['x'])" },
        { "AdaptiveMaxPool2d(2) on a transposed [2, 3, 8, 6] (even tiles)",
          inputs = { { "x", R.randn({ 2, 3, 6, 8 }, 51), view = function(t) return t:transpose(3, 4) end, grad = true } },
          lua = function(I) return nn.AdaptiveMaxPool2d(2)(I.x) end, py = "out = nn.AdaptiveMaxPool2d(2)(I['x'])" },
        { "F.adaptive_max_pool2d({nil, 5}) on [3, 4, 7] (unbatched)",
          inputs = { { "x", R.randn({ 3, 4, 7 }, 52), grad = true } },
          lua = function(I) return F.adaptive_max_pool2d(I.x, { nil, 5 }) end,
          py = "out = F.adaptive_max_pool2d(I['x'], (None, 5))" },
        { "AdaptiveMaxPool1d(4) on [2, 3, 10]", inputs = { { "x", R.randn({ 2, 3, 10 }, 53), grad = true } },
          lua = function(I) return nn.AdaptiveMaxPool1d(4)(I.x) end, py = "out = nn.AdaptiveMaxPool1d(4)(I['x'])" },
        { "AdaptiveAvgPool1d(3) on [2, 3, 10]", inputs = { { "x", R.randn({ 2, 3, 10 }, 54), grad = true } },
          lua = function(I) return nn.AdaptiveAvgPool1d(3)(I.x) end, py = "out = nn.AdaptiveAvgPool1d(3)(I['x'])" },
        { "F.adaptive_avg_pool1d(x, 4) on [3, 9] (unbatched)", inputs = { { "x", R.randn({ 3, 9 }, 55), grad = true } },
          lua = function(I) return F.adaptive_avg_pool1d(I.x, 4) end, py = "out = F.adaptive_avg_pool1d(I['x'], 4)" },
      }
    end))
    assert.are.equal(12, n)
    R.assert_error(function() nn.AdaptiveMaxPool2d(2, true) end, "return_indices=true is not supported")
    R.assert_error(function() F.adaptive_max_pool2d(ddp.randn(2, 3), 1) end, "expected a 4-D or 3-D input")
    R.assert_error(function() nn.AdaptiveAvgPool1d(0) end, "output_size must be a positive integer")
    R.assert_error(function() F.adaptive_max_pool1d(ddp.randn(2, 3, 0), 1) end, "non-empty input")
  end)

  it("EmbeddingBag matches PyTorch: sum with per-sample weights, mean, max, padding, empty bags, 2-D input", function()
    if not TR.available() then return pending(NO_TORCH) end
    local W = R.randn({ 10, 3 }, 60)
    local ids = ddp.tensor({ 1, 2, 4, 5, 4, 3, 2, 9, 2 }, { dtype = "int64" })
    local psw = R.randn({ 9 }, 61)
    local cases = {
      { lua = { offsets = { 1, 5 }, mode = "sum", psw = true }, py = "offsets=torch.tensor([0, 4]), mode='sum', " ..
        "per_sample_weights=psw" },
      { lua = { offsets = { 1, 3, 3, 8 }, mode = "mean", padding_idx = 2 }, py = "offsets=torch.tensor([0, 2, 2, 7]), " ..
        "mode='mean', padding_idx=1" },
      { lua = { offsets = { 1, 3, 3, 10 }, mode = "max", padding_idx = 2, include_last_offset = true },
        py = "offsets=torch.tensor([0, 2, 2, 9]), mode='max', padding_idx=1, include_last_offset=True" },
      { lua = { mode = "mean", rows = true }, py = "mode='mean'" },
      -- bags of one length: a view of [B, L, D] (offsets in steps, or a 2-D input)
      { lua = { offsets = { 1, 4, 7 }, mode = "max", padding_idx = 5 }, py = "offsets=torch.tensor([0, 3, 6]), " ..
        "mode='max', padding_idx=4" },
      { lua = { offsets = { 1, 4, 7 }, mode = "mean", padding_idx = 3 }, py = "offsets=torch.tensor([0, 3, 6]), " ..
        "mode='mean', padding_idx=2" },
      { lua = { mode = "max", rows = true, padding_idx = 3 }, py = "mode='max', padding_idx=2" },
      { lua = { offsets = { 1, 2, 9 }, mode = "max" }, py = "offsets=torch.tensor([0, 1, 8]), mode='max'" },
    }
    local body = { "import torch.nn.functional as F" }
    for i, c in ipairs(cases) do
      body[#body + 1] = "w = T['W'].clone().requires_grad_(); psw = T['psw'].clone().requires_grad_()"
      body[#body + 1] = string.format("y = F.embedding_bag(%s, w, %s)", c.lua.rows and "T['ids'][:8].view(2, 4) - 1" or
        "T['ids'] - 1", c.py)
      body[#body + 1] = string.format("(y * torch.arange(1., y.numel() + 1).view(y.shape).double()).sum().backward()")
      body[#body + 1] = string.format("OUT['y%d'], OUT['gw%d'] = y, w.grad", i, i)
      if c.lua.psw then body[#body + 1] = string.format("OUT['gp%d'] = psw.grad", i) end
    end
    local ref = TR.run(table.concat(body, "\n") .. "\n", { W = W, ids = ids, psw = psw })
    for i, c in ipairs(cases) do
      local w, p = W:clone():requires_grad_(), psw:clone():requires_grad_()
      local input = c.lua.rows and ids:narrow(1, 1, 8):view(2, 4) or ids
      local offsets = c.lua.offsets and ddp.tensor(c.lua.offsets, { dtype = "int64" }) or nil
      local y = F.embedding_bag(input, w, offsets, { mode = c.lua.mode, per_sample_weights = c.lua.psw and p or nil,
        padding_idx = c.lua.padding_idx, include_last_offset = c.lua.include_last_offset })
      ;(y * ddp.arange(1, y:numel() + 1, { dtype = "float64" }):view(y:size())):sum():backward()
      R.assert_close(y, R.from(ref["y" .. i]), 1e-12, 1e-12, "embedding_bag " .. i .. ": output")
      R.assert_close(w.grad, R.from(ref["gw" .. i]), 1e-12, 1e-12, "embedding_bag " .. i .. ": weight gradient")
      if c.lua.psw then R.assert_close(p.grad, R.from(ref["gp" .. i]), 1e-12, 1e-12, "per_sample_weights gradient") end
    end
    -- bags too uneven to pad (one of 3000 rows beside 500 of one): each bag's own max, against the same bags padded
    local many = R.uniform({ 3500 }, 0, 10, 62):floor():long() + 1
    local offs = {}
    for b = 1, 500 do offs[b] = b end
    offs[501] = 501
    local ref2 = TR.run([[
w = T['W'].clone().requires_grad_()
y = torch.nn.functional.embedding_bag(T['many'] - 1, w, T['offs'] - 1, mode='max')
(y * torch.arange(1., y.numel() + 1).view(y.shape).double()).sum().backward()
OUT['y'], OUT['gw'] = y, w.grad
]], { W = W, many = many, offs = ddp.tensor(offs, { dtype = "int64" }) })
    local w = W:clone():requires_grad_()
    local y = F.embedding_bag(many, w, ddp.tensor(offs, { dtype = "int64" }), { mode = "max" })
    ;(y * ddp.arange(1, y:numel() + 1, { dtype = "float64" }):view(y:size())):sum():backward()
    R.assert_close(y, R.from(ref2.y), 1e-12, 1e-12, "uneven bags: output")
    R.assert_close(w.grad, R.from(ref2.gw), 1e-12, 1e-12, "uneven bags: weight gradient")
    local bag = nn.EmbeddingBag(10, 3, { mode = "sum", padding_idx = -1 })
    assert.are.equal(10, bag.padding_idx)
    assert.are.same({ 0, 0, 0 }, bag.weight[10]:totable())
    assert.are.same({ 2, 3 }, bag(ids:narrow(1, 1, 6):view(2, 3)):size())
    R.assert_error(function() F.embedding_bag(ids, W, ddp.tensor({ 2 }, { dtype = "int64" })) end, "beginning at 1")
    R.assert_error(function() F.embedding_bag(ids, W, nil) end, "expected a tensor offsets")
    R.assert_error(function() F.embedding_bag(ids:view(3, 3), W, ddp.tensor({ 1 }, { dtype = "int64" })) end,
      "offsets must be nil for a 2-D input")
    R.assert_error(function() F.embedding_bag(ids:view(3, 3), W, nil, { mode = "mean", per_sample_weights = psw:view(3, 3) })
    end, "only supported with mode \"sum\"")
    R.assert_error(function() nn.EmbeddingBag(10, 3, { mode = "median" }) end, "mode must be")
    R.assert_error(function() nn.EmbeddingBag(10, 3, { sparse = true }) end, "sparse=true is not supported")
  end)

  it("nn.utils.rnn.pad_sequence matches PyTorch's; parameters_to_vector and back", function()
    if not TR.available() then return pending(NO_TORCH) end
    local n = TC.check_cases(TC.both_dtypes(function()
      return {
        { "pad_sequence of [3, 2], [5, 2], [1, 2]", inputs = { { "a", R.randn({ 3, 2 }, 70), grad = true },
          { "b", R.randn({ 5, 2 }, 71), grad = true }, { "c", R.randn({ 1, 2 }, 72), grad = true } },
          lua = function(I) return nn.utils.rnn.pad_sequence({ I.a, I.b, I.c }) end,
          py = "out = torch.nn.utils.rnn.pad_sequence([I['a'], I['b'], I['c']])" },
        { "pad_sequence batch_first, padding -1, of [4], [2]", inputs = { { "a", R.randn({ 4 }, 73), grad = true },
          { "b", R.randn({ 2 }, 74), grad = true } },
          lua = function(I) return nn.utils.rnn.pad_sequence({ I.a, I.b }, { batch_first = true, padding_value = -1 }) end,
          py = "out = torch.nn.utils.rnn.pad_sequence([I['a'], I['b']], batch_first=True, padding_value=-1)" },
      }
    end))
    assert.are.equal(4, n)
    local m = nn.Linear(3, 2)
    local v = nn.utils.parameters_to_vector(m)
    assert.is_true(v:equal(ddp.cat({ m.weight:reshape(-1), m.bias })))
    nn.utils.vector_to_parameters(ddp.arange(8, { dtype = "float32" }), m)
    assert.are.same({ { 0, 1, 2 }, { 3, 4, 5 } }, m.weight:totable())
    assert.are.same({ 6, 7 }, m.bias:totable())
    R.assert_error(function() nn.utils.vector_to_parameters(ddp.zeros(7), m) end, "vec has 7 values, the parameters 8")
    R.assert_error(function() nn.utils.rnn.pad_sequence({ ddp.zeros(2, 3), ddp.zeros(2, 4) }) end,
      "sequence 2 has trailing dims [4], sequence 1 [3]")
    R.assert_error(function() nn.utils.rnn.pad_sequence({}) end, "non-empty list")
  end)

  it("F.one_hot matches PyTorch's with 1-based class positions", function()
    if not TR.available() then return pending(NO_TORCH) end
    local idx = ddp.tensor({ { 1, 4, 2 }, { 3, 3, 1 } }, { dtype = "int64" })
    local ref = TR.run("import torch.nn.functional as F\nOUT['a'] = F.one_hot(T['i'] - 1)\nOUT['b'] = F.one_hot(T['i'] - 1, 6)\n", { i = idx })
    assert.is_true(F.one_hot(idx):equal(ref.a))
    assert.is_true(F.one_hot(idx, 6):equal(ref.b))
    assert.are.same({ 0, 5 }, F.one_hot(ddp.zeros(0, { dtype = "int64" }), 5):size())
    assert.are.equal("int64", F.one_hot(idx):dtype())
  end)

  it("nn.Parameter makes a leaf that a module registers, sharing the data's storage", function()
    local data = ddp.zeros(3)
    local p = nn.Parameter(data)
    assert.is_true(p.requires_grad and p.is_leaf)
    local m = nn.Module()
    m.scale = p
    assert.are.equal(1, #m:parameters())
    ddp.no_grad(function() p:fill_(2) end)
    assert.are.same({ 2, 2, 2 }, data:totable())
    assert.is_false(nn.Parameter(ddp.ones(2), false).requires_grad)
  end)

  it("refuse bad arguments, naming what is wrong", function()
    local x = ddp.randn(2, 3)
    R.assert_error(function() nn.Softmax(0) end, "Softmax", "dim must be a nonzero integer")
    R.assert_error(function() nn.GLU()(x) end, "GLU", "halving dimension must be even", "size 3")
    R.assert_error(function() F.glu(x, 3) end, "glu", "dim must be an integer in 1..2")
    R.assert_error(function() nn.PReLU(4)(x) end, "PReLU", "4 weights", "3 channels")
    R.assert_error(function() nn.PReLU({ init = "a" }) end, "PReLU", "init must be a number")
    R.assert_error(function() nn.Unflatten(2, { 2, 2 })(x) end, "Unflatten", "does not multiply to the size 3")
    R.assert_error(function() nn.Unflatten(2, { -1, -1 }) end, "only one size")
    R.assert_error(function() nn.Unflatten(0, { 3 }) end, "dim must be a nonzero integer")
    R.assert_error(function() F.cosine_similarity(x, "y") end, "cosine_similarity", "expected a tensor x2")
    R.assert_error(function() F.cosine_similarity(x, ddp.randn(2, 4)) end)
    R.assert_error(function() F.pairwise_distance(ddp.tensor(1.0), ddp.tensor(2.0)) end, "at least 1 dimension")
    R.assert_error(function() F.normalize(x, { p = "fro" }) end, "normalize", "p must be a number")
    R.assert_error(function() F.one_hot(ddp.tensor({ 1.0 })) end, "one_hot", "int64", "float32")
    R.assert_error(function() F.one_hot(ddp.tensor({ 0, 2 }, { dtype = "int64" })) end, "in 1..2", "got 0..2")
    R.assert_error(function() F.one_hot(ddp.tensor({ 3 }, { dtype = "int64" }), 2) end, "in 1..2", "got 3..3")
    R.assert_error(function() F.one_hot(ddp.zeros(0, { dtype = "int64" })) end, "empty tensor")
    R.assert_error(function() nn.Parameter(ddp.ones(2, { dtype = "int64" })) end, "Parameter", "floating-point")
    R.assert_error(function() nn.Parameter({ 1, 2 }) end, "Parameter", "expected a tensor data")
  end)
end)
