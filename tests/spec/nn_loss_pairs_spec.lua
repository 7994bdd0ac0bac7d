-- The pair, ranking, margin and likelihood losses of lua/ddplua/nn/loss_pairs.lua against PyTorch 1.13 (values and
-- gradients, float32 and float64, every reduction, non-default settings, transposed inputs, broadcasting, values at
-- the kinks, empty inputs): margin_ranking_loss, hinge_embedding_loss, soft_margin_loss, cosine_embedding_loss,
-- triplet_margin_loss, multilabel_soft_margin_loss, poisson_nll_loss, gaussian_nll_loss, multi_margin_loss (1-based
-- targets), functional and as modules; the deliberate differences; the errors for bad arguments.
local ddp = require "ddplua"
local R = require "helpers.ref"
local TR = require "helpers.torch_ref"
local TC = require "helpers.torch_cases"
local nn, F = ddp.nn, ddp.nn.F

local NO_TORCH = "skipped: /usr/bin/python3 cannot import torch"
local REDS = { "mean", "sum", "none" }

local function t12(t) return t:transpose(1, 2) end
local function vec(v) return ddp.tensor(v, { dtype = "float64" }) end
-- +-1 labels (and, with odd, other values) of a shape
local function signs(shape, seed, odd)
  local u = R.uniform(shape, 0, 1, seed)
  local s = u:lt(0.5):to("float64") * -2 + 1
  if odd then s = ddp.where(u:gt(0.85), 0.5, s) end
  return s
end

-- a case per reduction (reds, default all three): lua(I, red) -> loss; py: a Python expression, RED the reduction
local function each(cases, label, inputs, lua, py, reds)
  for _, red in ipairs(reds or REDS) do
    cases[#cases + 1] = { label .. ", reduction " .. red, inputs = inputs,
      lua = function(I) return lua(I, red) end, py = "out = " .. (py:gsub("RED", red)) }
  end
end

local function run(make, count)
  if not TR.available() then return pending(NO_TORCH) end
  local n = TC.check_cases(TC.both_dtypes(function(dt)
    local cases = {}
    make(cases, dt)
    return cases
  end))
  assert.are.equal(count, n)
end

describe("nn's pair and margin losses (loss_pairs.lua)", function()
  it("margin_ranking_loss / MarginRankingLoss match PyTorch", function()
    run(function(c)
      each(c, "[6]", { { "a", R.randn({ 6 }, 1), grad = true }, { "b", R.randn({ 6 }, 2), grad = true },
        { "y", signs({ 6 }, 3), grad = true } },
        function(I, red) return F.margin_ranking_loss(I.a, I.b, I.y, { reduction = red }) end,
        "F.margin_ranking_loss(I['a'], I['b'], I['y'], reduction='RED')")
      each(c, "margin 0.5, broadcast [3, 1] [1, 4] [3, 4], module", { { "a", R.randn({ 3, 1 }, 4), grad = true },
        { "b", R.randn({ 1, 4 }, 5), grad = true }, { "y", signs({ 3, 4 }, 6) } },
        function(I, red) return nn.MarginRankingLoss { margin = 0.5, reduction = red }(I.a, I.b, I.y) end,
        "nn.MarginRankingLoss(margin=0.5, reduction='RED')(I['a'], I['b'], I['y'])")
      -- z = -y (a - b) + margin exactly 0 at the first four (the gradient passes there, as clamp_min's)
      each(c, "kinks, margin 1, transposed", { { "a", vec({ { 1, 2, 0.5 }, { 3, -1, 2 } }), view = t12, grad = true },
        { "b", vec({ { 0, 1, 0 }, { 4, -2, 1 } }), view = t12, grad = true },
        { "y", vec({ { 1, 1, 1 }, { -1, 1, -1 } }), view = t12, grad = true } },
        function(I, red) return F.margin_ranking_loss(I.a, I.b, I.y, { margin = 1, reduction = red }) end,
        "F.margin_ranking_loss(I['a'], I['b'], I['y'], margin=1.0, reduction='RED')")
      each(c, "empty", { { "a", ddp.zeros(0) }, { "b", ddp.zeros(0) }, { "y", ddp.zeros(0) } },
        function(I, red) return F.margin_ranking_loss(I.a, I.b, I.y, { reduction = red }) end,
        "F.margin_ranking_loss(I['a'], I['b'], I['y'], reduction='RED')")
    end, 24)
  end)

  it("hinge_embedding_loss / HingeEmbeddingLoss match PyTorch", function()
    run(function(c)
      each(c, "[3, 5], labels +-1 and 0.5 (both terms)", { { "x", R.randn({ 3, 5 }, 11, 2), grad = true },
        { "y", signs({ 3, 5 }, 12, true) } },
        function(I, red) return F.hinge_embedding_loss(I.x, I.y, { reduction = red }) end,
        "F.hinge_embedding_loss(I['x'], I['y'], reduction='RED')")
      each(c, "margin 0.5, broadcast [3, 1] and [4], module", { { "x", R.randn({ 3, 1 }, 13), grad = true },
        { "y", signs({ 4 }, 14) } },
        function(I, red) return nn.HingeEmbeddingLoss { margin = 0.5, reduction = red }(I.x, I.y) end,
        "nn.HingeEmbeddingLoss(margin=0.5, reduction='RED')(I['x'], I['y'])")
      each(c, "kinks x = margin and 0", { { "x", vec({ 1, 1, 0, 0, 2 }), grad = true },
        { "y", vec({ -1, 1, -1, 1, -1 }) } },
        function(I, red) return F.hinge_embedding_loss(I.x, I.y, { reduction = red }) end,
        "F.hinge_embedding_loss(I['x'], I['y'], reduction='RED')")
      each(c, "empty", { { "x", ddp.zeros(0, 2) }, { "y", ddp.zeros(0, 2) } },
        function(I, red) return F.hinge_embedding_loss(I.x, I.y, { reduction = red }) end,
        "F.hinge_embedding_loss(I['x'], I['y'], reduction='RED')")
    end, 24)
  end)

  it("soft_margin_loss / SoftMarginLoss match PyTorch", function()
    run(function(c)
      each(c, "[4, 5] transposed, target [5] broadcast", { { "x", R.randn({ 5, 4 }, 21, 3), view = t12, grad = true },
        { "y", signs({ 5 }, 22, true) } },
        function(I, red) return F.soft_margin_loss(I.x, I.y, { reduction = red }) end,
        "F.soft_margin_loss(I['x'], I['y'], reduction='RED')")
      each(c, "x 0 and +-30, module", { { "x", vec({ 0, 0, 30, -30, 12 }), grad = true },
        { "y", vec({ 1, -1, 1, 1, -1 }) } },
        function(I, red) return nn.SoftMarginLoss { reduction = red }(I.x, I.y) end,
        "nn.SoftMarginLoss(reduction='RED')(I['x'], I['y'])")
      each(c, "empty", { { "x", ddp.zeros(0) }, { "y", ddp.zeros(0) } },
        function(I, red) return F.soft_margin_loss(I.x, I.y, { reduction = red }) end,
        "F.soft_margin_loss(I['x'], I['y'], reduction='RED')")
    end, 18)
  end)

  it("cosine_embedding_loss / CosineEmbeddingLoss match PyTorch", function()
    -- row 2 of a is zero (the EPSILON in the magnitudes), row 4 of a and b orthogonal: cos = 0 = margin, the kink
    local a = R.randn({ 5, 3 }, 31) * vec({ { 1 }, { 0 }, { 1 }, { 0 }, { 1 } }) + vec({ 0, 0, 0, 1, 0 }):view(5, 1) *
      vec({ { 1, 0, 0 } })
    local b = R.randn({ 5, 3 }, 32) * vec({ { 1 }, { 1 }, { 1 }, { 0 }, { 1 } }) + vec({ 0, 0, 0, 1, 0 }):view(5, 1) *
      vec({ { 0, 2, 0 } })
    run(function(c)
      each(c, "[5, 3] with a zero row and the kink, labels +-1 and 0.5", { { "a", a, grad = true },
        { "b", b, grad = true }, { "y", vec({ 1, -1, 0.5, -1, -1 }) } },
        function(I, red) return F.cosine_embedding_loss(I.a, I.b, I.y, { reduction = red }) end,
        "F.cosine_embedding_loss(I['a'], I['b'], I['y'], reduction='RED')")
      each(c, "margin -0.3, [1, 4] broadcast with [3, 4], module", { { "a", R.randn({ 1, 4 }, 33), grad = true },
        { "b", R.randn({ 3, 4 }, 34), grad = true }, { "y", signs({ 3 }, 35) } },
        function(I, red) return nn.CosineEmbeddingLoss { margin = -0.3, reduction = red }(I.a, I.b, I.y) end,
        "nn.CosineEmbeddingLoss(margin=-0.3, reduction='RED')(I['a'], I['b'], I['y'])")
      each(c, "[4, 3] transposed", { { "a", R.randn({ 3, 4 }, 36), view = t12, grad = true },
        { "b", R.randn({ 4, 3 }, 37), grad = true }, { "y", signs({ 4 }, 38) } },
        function(I, red) return F.cosine_embedding_loss(I.a, I.b, I.y, { margin = 0.2, reduction = red }) end,
        "F.cosine_embedding_loss(I['a'], I['b'], I['y'], margin=0.2, reduction='RED')")
      for _, y in ipairs({ 1, -1 }) do
        each(c, "unbatched [4], 0-dim target " .. y, { { "a", R.randn({ 4 }, 39), grad = true },
          { "b", R.randn({ 4 }, 40), grad = true }, { "y", vec(y) } },
          function(I, red) return F.cosine_embedding_loss(I.a, I.b, I.y, { margin = -0.5, reduction = red }) end,
          "F.cosine_embedding_loss(I['a'], I['b'], I['y'], margin=-0.5, reduction='RED')")
      end
      each(c, "empty", { { "a", ddp.zeros(0, 3) }, { "b", ddp.zeros(0, 3) }, { "y", ddp.zeros(0) } },
        function(I, red) return F.cosine_embedding_loss(I.a, I.b, I.y, { reduction = red }) end,
        "F.cosine_embedding_loss(I['a'], I['b'], I['y'], reduction='RED')")
    end, 36)
  end)

  it("triplet_margin_loss / TripletMarginLoss match PyTorch", function()
    local function trip(I, view)
      return { { "a", I[1], view = view, grad = true }, { "p", I[2], grad = true }, { "n", I[3], grad = true } }
    end
    run(function(c)
      each(c, "[4, 5]", trip({ R.randn({ 4, 5 }, 41), R.randn({ 4, 5 }, 42), R.randn({ 4, 5 }, 43) }),
        function(I, red) return F.triplet_margin_loss(I.a, I.p, I.n, { reduction = red }) end,
        "F.triplet_margin_loss(I['a'], I['p'], I['n'], reduction='RED')")
      each(c, "p 1, margin 2, swap, eps 0.1, [1, 5] broadcast, module",
        trip({ R.randn({ 1, 5 }, 44), R.randn({ 4, 5 }, 45), R.randn({ 4, 5 }, 46) }),
        function(I, red)
          return nn.TripletMarginLoss { p = 1, margin = 2, swap = true, eps = 0.1, reduction = red }(I.a, I.p, I.n)
        end, "nn.TripletMarginLoss(p=1, margin=2.0, swap=True, eps=0.1, reduction='RED')(I['a'], I['p'], I['n'])")
      each(c, "p 3, swap, [2, 3, 4] (anchor transposed)", trip({ R.randn({ 2, 4, 3 }, 47), R.randn({ 2, 3, 4 }, 48),
        R.randn({ 2, 3, 4 }, 49) }, function(v) return v:transpose(2, 3) end),
        function(I, red) return F.triplet_margin_loss(I.a, I.p, I.n, { p = 3, swap = true, reduction = red }) end,
        "F.triplet_margin_loss(I['a'], I['p'], I['n'], p=3, swap=True, reduction='RED')")
      each(c, "unbatched [5], margin 3", trip({ R.randn({ 5 }, 50), R.randn({ 5 }, 51), R.randn({ 5 }, 52) }),
        function(I, red) return F.triplet_margin_loss(I.a, I.p, I.n, { margin = 3, reduction = red }) end,
        "F.triplet_margin_loss(I['a'], I['p'], I['n'], margin=3.0, reduction='RED')")
      each(c, "0-dim", trip({ vec(0.5), vec(-1), vec(2) }),
        function(I, red) return F.triplet_margin_loss(I.a, I.p, I.n, { reduction = red }) end,
        "F.triplet_margin_loss(I['a'], I['p'], I['n'], reduction='RED')")
      -- row 1: margin + d(a, p) - d(a, n) = 1 + 1 - 2 = 0 (the kink); row 2: d(a, n) = d(p, n) = 6 under swap (a tie)
      each(c, "kink and swap tie, p 1, eps 0", trip({ vec({ { 0, 0 }, { 0, 0 } }), vec({ { 1, 0 }, { 2, 0 } }),
        vec({ { 0, 2 }, { 1, 5 } }) }),
        function(I, red)
          return F.triplet_margin_loss(I.a, I.p, I.n, { p = 1, eps = 0, swap = true, reduction = red })
        end,
        "F.triplet_margin_loss(I['a'], I['p'], I['n'], p=1, eps=0.0, swap=True, reduction='RED')")
      each(c, "empty", { { "a", ddp.zeros(0, 3) }, { "p", ddp.zeros(0, 3) }, { "n", ddp.zeros(0, 3) } },
        function(I, red) return F.triplet_margin_loss(I.a, I.p, I.n, { reduction = red }) end,
        "F.triplet_margin_loss(I['a'], I['p'], I['n'], reduction='RED')")
    end, 42)
  end)

  it("multilabel_soft_margin_loss / MultiLabelSoftMarginLoss match PyTorch", function()
    run(function(c)
      each(c, "[4, 5] transposed, weight [5], soft targets", { { "x", R.randn({ 5, 4 }, 61, 2), view = t12,
        grad = true }, { "y", R.uniform({ 4, 5 }, 0, 1, 62), grad = true }, { "w", R.uniform({ 5 }, 0.5, 2, 63),
        grad = true } },
        function(I, red) return F.multilabel_soft_margin_loss(I.x, I.y, { weight = I.w, reduction = red }) end,
        "F.multilabel_soft_margin_loss(I['x'], I['y'], weight=I['w'], reduction='RED')")
      each(c, "x 0, +-40, target [3] broadcast, module", { { "x", vec({ { 0, 40, -40 }, { -3, 0, 100 } }),
        grad = true },
        { "y", vec({ 1, 0, 1 }) } },
        function(I, red) return nn.MultiLabelSoftMarginLoss { reduction = red }(I.x, I.y) end,
        "nn.MultiLabelSoftMarginLoss(reduction='RED')(I['x'], I['y'])")
      each(c, "unbatched [6], module weight [1]", { { "x", R.randn({ 6 }, 64), grad = true },
        { "y", vec({ 1, 0, 0, 1, 1, 0 }) }, { "w", vec({ 0.7 }) } },
        function(I, red) return nn.MultiLabelSoftMarginLoss { weight = I.w, reduction = red }(I.x, I.y) end,
        "nn.MultiLabelSoftMarginLoss(weight=I['w'], reduction='RED')(I['x'], I['y'])")
      each(c, "empty batch", { { "x", ddp.zeros(0, 3) }, { "y", ddp.zeros(0, 3) } },
        function(I, red) return F.multilabel_soft_margin_loss(I.x, I.y, { reduction = red }) end,
        "F.multilabel_soft_margin_loss(I['x'], I['y'], reduction='RED')")
      each(c, "no classes", { { "x", ddp.zeros(2, 0) }, { "y", ddp.zeros(2, 0) } },
        function(I, red) return F.multilabel_soft_margin_loss(I.x, I.y, { reduction = red }) end,
        "F.multilabel_soft_margin_loss(I['x'], I['y'], reduction='RED')")
    end, 30)
  end)

  it("poisson_nll_loss / PoissonNLLLoss match PyTorch", function()
    local counts = vec({ { 0, 0.5, 1, 1.5 }, { 2, 3, 7, 0 }, { 1, 4, 0.25, 12 } })
    run(function(c)
      each(c, "[3, 4] log_input", { { "x", R.randn({ 3, 4 }, 71), grad = true },
        { "y", R.uniform({ 3, 4 }, 0.1, 5, 72), grad = true } },
        function(I, red) return F.poisson_nll_loss(I.x, I.y, { reduction = red }) end,
        "F.poisson_nll_loss(I['x'], I['y'], reduction='RED')")
      each(c, "full, counts 0..12 (Stirling where > 1), module", { { "x", R.randn({ 3, 4 }, 73), grad = true },
        { "y", counts } },
        function(I, red) return nn.PoissonNLLLoss { full = true, reduction = red }(I.x, I.y) end,
        "nn.PoissonNLLLoss(full=True, reduction='RED')(I['x'], I['y'])")
      each(c, "full, targets > 0 (their gradient too)", { { "x", R.randn({ 3, 4 }, 74), grad = true },
        { "y", counts + 0.125, grad = true } },
        function(I, red) return F.poisson_nll_loss(I.x, I.y, { full = true, reduction = red }) end,
        "F.poisson_nll_loss(I['x'], I['y'], full=True, reduction='RED')")
      each(c, "rates, eps 0.01, x 0, broadcast [3, 1] and [4]", { { "x", vec({ { 0 }, { 0.5 }, { 2 } }), grad = true },
        { "y", vec({ 0, 1, 2.5, 4 }), grad = true } },
        function(I, red) return F.poisson_nll_loss(I.x, I.y, { log_input = false, eps = 0.01, reduction = red }) end,
        "F.poisson_nll_loss(I['x'], I['y'], log_input=False, eps=0.01, reduction='RED')")
      each(c, "rates, full, module", { { "x", R.uniform({ 2, 5 }, 0.2, 4, 75), grad = true },
        { "y", R.uniform({ 2, 5 }, 1.5, 6, 76), grad = true } },
        function(I, red) return nn.PoissonNLLLoss { log_input = false, full = true, reduction = red }(I.x, I.y) end,
        "nn.PoissonNLLLoss(log_input=False, full=True, reduction='RED')(I['x'], I['y'])")
      each(c, "empty", { { "x", ddp.zeros(0) }, { "y", ddp.zeros(0) } },
        function(I, red) return F.poisson_nll_loss(I.x, I.y, { full = true, reduction = red }) end,
        "F.poisson_nll_loss(I['x'], I['y'], full=True, reduction='RED')")
    end, 36)
  end)

  it("gaussian_nll_loss / GaussianNLLLoss match PyTorch", function()
    local function inputs(x, y, v)
      return { { "x", x, grad = true }, { "y", y, grad = true }, { "v", v, grad = true } }
    end
    run(function(c)
      each(c, "[4, 3] heteroscedastic", inputs(R.randn({ 4, 3 }, 81), R.randn({ 4, 3 }, 82),
        R.uniform({ 4, 3 }, 0.2, 2, 83)),
        function(I, red) return F.gaussian_nll_loss(I.x, I.y, I.v, { reduction = red }) end,
        "F.gaussian_nll_loss(I['x'], I['y'], I['v'], reduction='RED')")
      -- var values below eps = 0.1 (and 0): clamped out of the graph, their gradient as if unclamped
      each(c, "var [4] homoscedastic, full, eps 0.1, module", inputs(R.randn({ 4, 3 }, 84), R.randn({ 4, 3 }, 85),
        vec({ 0.05, 0, 1.5, 0.1 })),
        function(I, red) return nn.GaussianNLLLoss { full = true, eps = 0.1, reduction = red }(I.x, I.y, I.v) end,
        "nn.GaussianNLLLoss(full=True, eps=0.1, reduction='RED')(I['x'], I['y'], I['v'])")
      each(c, "var [4, 1], target [2, 4, 3] broadcast, transposed", { { "x", R.randn({ 3, 4 }, 86), view = t12,
        grad = true }, { "y", R.randn({ 2, 4, 3 }, 87), grad = true }, { "v", R.uniform({ 4, 1 }, 0.5, 2, 88),
        grad = true } },
        function(I, red) return F.gaussian_nll_loss(I.x, I.y, I.v, { reduction = red }) end,
        "F.gaussian_nll_loss(I['x'], I['y'], I['v'], reduction='RED')")
      each(c, "unbatched [5], 0-dim var", inputs(R.randn({ 5 }, 89), R.randn({ 5 }, 90), vec(0.7)),
        function(I, red) return F.gaussian_nll_loss(I.x, I.y, I.v, { full = true, reduction = red }) end,
        "F.gaussian_nll_loss(I['x'], I['y'], I['v'], full=True, reduction='RED')")
      each(c, "empty", { { "x", ddp.zeros(0, 2) }, { "y", ddp.zeros(0, 2) }, { "v", ddp.ones(0, 2) } },
        function(I, red) return F.gaussian_nll_loss(I.x, I.y, I.v, { reduction = red }) end,
        "F.gaussian_nll_loss(I['x'], I['y'], I['v'], reduction='RED')")
    end, 30)
  end)

  it("multi_margin_loss / MultiMarginLoss match PyTorch (1-based targets)", function()
    -- the targets travel as float64 inputs: :long() here, .long() - 1 in PyTorch
    local t = vec({ 1, 5, 3, 2 })
    run(function(c)
      each(c, "[4, 5]", { { "x", R.randn({ 4, 5 }, 91), grad = true }, { "t", t } },
        function(I, red) return F.multi_margin_loss(I.x, I.t:long(), { reduction = red }) end,
        "F.multi_margin_loss(I['x'], I['t'].long() - 1, reduction='RED')")
      each(c, "p 2, margin 0.5, weight [5], transposed, module", { { "x", R.randn({ 5, 4 }, 92), view = t12,
        grad = true }, { "t", t }, { "w", R.uniform({ 5 }, 0.5, 2, 93) } },
        function(I, red)
          return nn.MultiMarginLoss { p = 2, margin = 0.5, weight = I.w, reduction = red }(I.x, I.t:long())
        end, "nn.MultiMarginLoss(p=2, margin=0.5, weight=I['w'], reduction='RED')(I['x'], I['t'].long() - 1)")
      each(c, "unbatched [5], 0-dim target", { { "x", R.randn({ 5 }, 94), grad = true }, { "t", vec(4) } },
        function(I, red) return F.multi_margin_loss(I.x, I.t:long(), { margin = 2, reduction = red }) end,
        "F.multi_margin_loss(I['x'], I['t'].long() - 1, margin=2.0, reduction='RED')")
      each(c, "unbatched [5], target [1], p 2", { { "x", R.randn({ 5 }, 95), grad = true }, { "t", vec({ 2 }) } },
        function(I, red) return F.multi_margin_loss(I.x, I.t:long(), { p = 2, reduction = red }) end,
        "F.multi_margin_loss(I['x'], I['t'].long() - 1, p=2, reduction='RED')")
      each(c, "0-dim input", { { "x", vec(0.3), grad = true }, { "t", vec(1) } },
        function(I, red) return F.multi_margin_loss(I.x, I.t:long(), { reduction = red }) end,
        "F.multi_margin_loss(I['x'], I['t'].long() - 1, reduction='RED')")
      -- margin - x[t] + x[d] = 0 at rows 1 and 2 (PyTorch's gradient is 0 there), > 0 beside them
      for _, p in ipairs({ 1, 2 }) do
        each(c, "kinks, p " .. p, { { "x", vec({ { 1, 0, 1 }, { 0.5, 1.5, 0 }, { 2, 0, 1.5 } }), grad = true },
          { "t", vec({ 1, 2, 3 }) } },
          function(I, red) return F.multi_margin_loss(I.x, I.t:long(), { p = p, reduction = red }) end,
          "F.multi_margin_loss(I['x'], I['t'].long() - 1, p=" .. p .. ", reduction='RED')")
      end
      -- PyTorch 1.13's "mean" and "sum" of an empty batch are uninitialized memory: only "none" compared
      each(c, "empty batch", { { "x", ddp.zeros(0, 3) }, { "t", ddp.zeros(0) } },
        function(I, red) return F.multi_margin_loss(I.x, I.t:long(), { reduction = red }) end,
        "F.multi_margin_loss(I['x'], I['t'].long() - 1, reduction='RED')", { "none" })
    end, 44)
  end)

  it("give the deliberate differences: finite soft margins, no NaN Stirling gradient, empty multi_margin", function()
    local x = vec({ -1000, 1000, 800 }):requires_grad_()
    local l = F.soft_margin_loss(x, vec({ 1, -1, 1 }), { reduction = "none" })
    R.assert_close(l:detach(), { shape = { 3 }, v = { 1000, 1000, 0 } }, 1e-12, 0)
    l:sum():backward()
    R.assert_close(x.grad, { shape = { 3 }, v = { -1, 1, 0 } }, 1e-12, 0)
    local y = vec({ 0, 0.5, 3 }):requires_grad_()
    F.poisson_nll_loss(vec({ 0.1, 0.2, 0.3 }), y, { full = true, reduction = "sum" }):backward()
    local st = math.log(3) + 0.5 / 3 -- d/dy (y log y - y + log(2 pi y) / 2) at 3
    R.assert_close(y.grad, { shape = { 3 }, v = { -0.1, -0.2, -0.3 + st } }, 1e-12, 0)
    local e, et = ddp.zeros(0, 4), ddp.zeros(0, { dtype = "int64" })
    local m = F.multi_margin_loss(e, et):item()
    assert.is_true(m ~= m, "the mean over an empty batch should be NaN, got " .. m)
    assert.are.equal(0, F.multi_margin_loss(e, et, { reduction = "sum" }):item())
    -- int64 labels and counts work as floating ones
    local xs, ys = R.randn({ 5 }, 101), ddp.tensor({ 1, -1, -1, 1, 1 }, { dtype = "int64" })
    for _, name in ipairs({ "hinge_embedding_loss", "soft_margin_loss", "poisson_nll_loss" }) do
      R.assert_close(F[name](xs, ys), R.from(F[name](xs, ys:to("float64"))), 0, 0, name)
    end
  end)

  it("modules print their non-default settings and keep weight as a buffer", function()
    assert.are.equal("TripletMarginLoss(margin=0.5, swap=true, reduction=sum)",
      tostring(nn.TripletMarginLoss { margin = 0.5, swap = true, reduction = "sum" }))
    assert.are.equal("MarginRankingLoss()", tostring(nn.MarginRankingLoss()))
    assert.are.equal("PoissonNLLLoss(log_input=false, eps=0.001)",
      tostring(nn.PoissonNLLLoss { log_input = false, eps = 1e-3 }))
    local m = nn.MultiMarginLoss { weight = ddp.ones(3), p = 2 }
    assert.are.equal("MultiMarginLoss(p=2)", tostring(m))
    assert.are.same({ 1, 1, 1 }, m:state_dict().weight:totable())
    assert.are.same({ 3 }, nn.MultiLabelSoftMarginLoss { weight = ddp.ones(3) }:state_dict().weight:size())
  end)

  it("refuse bad arguments, naming the loss and what was expected", function()
    local x, y = ddp.randn(4, 3), ddp.ones(4, 3)
    local t = ddp.tensor({ 1, 2, 3, 1 }, { dtype = "int64" })
    R.assert_error(function() F.margin_ranking_loss(ddp.randn(3), ddp.randn(3), ddp.tensor(1.0)) end,
      "margin_ranking_loss", "same number of dimensions", "target []")
    R.assert_error(function() F.margin_ranking_loss(ddp.randn(3), ddp.randn(4), ddp.ones(3)) end,
      "margin_ranking_loss", "input1 [3], input2 [4], target [3]", "do not broadcast")
    R.assert_error(function() F.margin_ranking_loss(x, { 1 }, y) end, "margin_ranking_loss", "input2 must be a tensor")
    R.assert_error(function() nn.MarginRankingLoss { reduction = "avg" } end, "MarginRankingLoss",
      'reduction must be "mean", "sum" or "none", got avg')
    R.assert_error(function() F.margin_ranking_loss(x, x, y, { margin = "1" }) end, "margin must be a number")
    R.assert_error(function() F.hinge_embedding_loss(x, ddp.ones(5)) end, "hinge_embedding_loss", "do not broadcast")
    R.assert_error(function() F.hinge_embedding_loss(t, t) end, "hinge_embedding_loss",
      "input must be a floating point tensor, got int64")
    R.assert_error(function() F.soft_margin_loss(ddp.randn(4, 1), y) end, "soft_margin_loss",
      "target of shape [4, 3] does not broadcast to the input's shape [4, 1]")
    R.assert_error(function() F.soft_margin_loss(x, y, { reduction = "batchmean" }) end, "soft_margin_loss",
      "reduction must be")
    R.assert_error(function() F.cosine_embedding_loss(x, x, ddp.ones(4, 1)) end, "cosine_embedding_loss",
      "0-D or 1-D target")
    R.assert_error(function() F.cosine_embedding_loss(ddp.randn(3), ddp.randn(3), ddp.ones(1)) end,
      "cosine_embedding_loss", "a 1-D target expects 2-D inputs, got input1 [3] and input2 [3]")
    R.assert_error(function() F.cosine_embedding_loss(x, x, ddp.ones(5)) end, "cosine_embedding_loss",
      "do not broadcast")
    R.assert_error(function() F.triplet_margin_loss(ddp.randn(3), x, x) end, "triplet_margin_loss",
      "same number of dimensions", "anchor [3], positive [4, 3], negative [4, 3]")
    R.assert_error(function() nn.TripletMarginLoss { swap = 1 } end, "TripletMarginLoss", "swap must be a boolean")
    R.assert_error(function() nn.TripletMarginLoss { eps = -1 } end, "eps must be a non-negative number")
    R.assert_error(function() F.triplet_margin_loss(x, x, "n") end, "triplet_margin_loss", "negative must be a tensor")
    R.assert_error(function() F.multilabel_soft_margin_loss(ddp.tensor(1.0), ddp.tensor(1.0)) end,
      "multilabel_soft_margin_loss", "at least 1 dimension")
    R.assert_error(function() F.multilabel_soft_margin_loss(x, y, { weight = ddp.ones(4) }) end,
      "multilabel_soft_margin_loss", "weight of shape [4] does not broadcast to the input's shape [4, 3]")
    R.assert_error(function() F.multilabel_soft_margin_loss(x, y, ddp.ones(3)) end, "multilabel_soft_margin_loss",
      "options as a table")
    R.assert_error(function() F.poisson_nll_loss(x, ddp.ones(2, 3)) end, "poisson_nll_loss", "do not broadcast")
    R.assert_error(function() nn.PoissonNLLLoss { log_inputs = true } end, "PoissonNLLLoss", "unknown option")
    R.assert_error(function() F.gaussian_nll_loss(x, y, ddp.ones(3)) end, "gaussian_nll_loss",
      "var of shape [3] is of incorrect size", "[4, 3]")
    R.assert_error(function() F.gaussian_nll_loss(x, y, ddp.ones(4):neg()) end, "gaussian_nll_loss", "negative entries")
    R.assert_error(function() F.gaussian_nll_loss(x, y, ddp.ones(4, 3, { dtype = "int64" })) end,
      "gaussian_nll_loss", "var must be a floating point tensor")
    R.assert_error(function() F.multi_margin_loss(x, ddp.tensor({ 1, 2, 4, 1 }, { dtype = "int64" })) end,
      "multi_margin_loss", "target class indices must be in 1..3 (1-based), got 1..4")
    R.assert_error(function() nn.MultiMarginLoss()(x, ddp.tensor({ 0, 2, 3, 1 }, { dtype = "int64" })) end,
      "MultiMarginLoss", "in 1..3 (1-based), got 0..3")
    R.assert_error(function() F.multi_margin_loss(x, t:double()) end, "multi_margin_loss", "int64", "float64")
    R.assert_error(function() F.multi_margin_loss(x, t:narrow(1, 1, 3)) end, "multi_margin_loss",
      "expected a target of 4 class index(es)", "got shape [3]")
    R.assert_error(function() F.multi_margin_loss(ddp.randn(2, 3, 4), t) end, "multi_margin_loss",
      "non-empty vector [C] or matrix [N, C]")
    R.assert_error(function() F.multi_margin_loss(ddp.randn(4, 0), t) end, "non-empty vector")
    R.assert_error(function() F.multi_margin_loss(x, t, { p = 3 }) end, "multi_margin_loss", "only p = 1 and p = 2")
    R.assert_error(function() F.multi_margin_loss(x, t, { weight = ddp.ones(4) }) end, "multi_margin_loss",
      "one entry per class (3), got shape [4]")
    R.assert_error(function() F.multi_margin_loss(x, t, {}, 1) end, "multi_margin_loss", "too many arguments")
  end)
end)
