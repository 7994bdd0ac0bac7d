-- The losses composed in Lua (lua/ddplua/nn/loss_more.lua): binary_cross_entropy, ..._with_logits, l1_loss,
-- smooth_l1_loss, huber_loss and kl_div, functional and as modules. Values and gradients against PyTorch 1.13 on the
-- same inputs (odd shapes, transposed inputs, broadcast weights, every reduction, edge values, NaN, empty tensors),
-- in float64 and float32; gradients against finite differences; hand-checked small values; argument errors.
local ddp = require "ddplua"
local gc = require "helpers.gradcheck"
local R = require "helpers.ref"
local TR = require "helpers.torch_ref"
local nn, F = ddp.nn, ddp.nn.F

local NO_TORCH = "skipped: /usr/bin/python3 cannot import torch"
local REDS = { "mean", "sum", "none" }
local TOL = { float64 = { 1e-12, 1e-10 }, float32 = { 2e-5, 2e-5 } }

local function t23(t) return t:transpose(2, 3) end

-- Runs every case in float64 and float32 (unless c.dtypes says otherwise) in ddplua and, in one Python process, in
-- PyTorch; compares the loss and the gradients of sum(loss * G) (G fixed random weights) for the inputs marked grad.
-- A case: { label, lua = function(I) -> loss, py = "<expression of I['name']>", inputs = { { name, tensor,
-- view = fn, grad = true }, ... } }: the op sees view(leaf) (a transpose: non-contiguous), PyTorch its values.
local PY = [[
import torch.nn.functional as F
for key in sorted({k.split(".")[0] for k in T}):
    spec = json.loads(bytes(T[key + ".spec"].tolist()).decode())
    I = {n: T[key + "." + n].clone() for n in spec["names"]}
    for n in spec["grads"]: I[n].requires_grad_(True)
    out = eval(spec["py"], {"F": F, "torch": torch, "I": I, "nn": torch.nn})
    OUT[key + ".out"] = out
    if spec["grads"]:
        (out * T[key + ".G"]).sum().backward()
        for n in spec["grads"]: OUT[key + ".grad_" + n] = I[n].grad
]]

local function bytes_tensor(s)
  local b = {}
  for i = 1, #s do b[i] = s:byte(i) end
  return ddp.tensor(b, { dtype = "uint8" })
end

local function json_list(list)
  local q = {}
  for i, v in ipairs(list) do q[i] = string.format("%q", v) end
  return "[" .. table.concat(q, ", ") .. "]"
end

local function check_cases(cases)
  local inputs, runs = {}, {}
  for i, c in ipairs(cases) do
    for _, dt in ipairs(c.dtypes or { "float64", "float32" }) do
      local key = string.format("c%03d%s", i, dt:sub(-2))
      local I, leaves, names, grads = {}, {}, {}, {}
      for _, inp in ipairs(c.inputs) do
        local name = inp[1]
        local leaf = inp[2]:to(dt):clone()
        if inp.grad then leaf:requires_grad_(); grads[#grads + 1] = name end
        leaves[name], names[#names + 1] = leaf, name
        I[name] = inp.view and inp.view(leaf) or leaf
        inputs[key .. "." .. name] = I[name]:detach()
      end
      local out = c.lua(I)
      assert(out:dtype() == dt, c[1] .. ": a " .. dt .. " input gave a " .. out:dtype() .. " loss")
      if #grads > 0 then
        local G = R.randn(out:size(), 100 + i):to(dt)
        inputs[key .. ".G"] = G
        ;(out * G):sum():backward()
      end
      inputs[key .. ".spec"] = bytes_tensor(string.format('{"py": %q, "names": %s, "grads": %s}', c.py,
        json_list(names), json_list(grads)))
      runs[#runs + 1] = { key = key, case = c, dt = dt, out = out, leaves = leaves }
    end
  end
  local ref = TR.run(PY, inputs)
  for _, r in ipairs(runs) do
    local tol, what = r.case.tol and r.case.tol[r.dt] or TOL[r.dt], r.case[1] .. " (" .. r.dt .. ")"
    R.assert_close(r.out:detach(), R.from(ref[r.key .. ".out"]), tol[1], tol[2], what .. ": loss")
    for _, inp in ipairs(r.case.inputs) do
      if inp.grad then
        local g = r.leaves[inp[1]].grad
        assert(g ~= nil, what .. ": no gradient for " .. inp[1])
        if inp.view then g = inp.view(g) end
        R.assert_close(g, R.from(ref[r.key .. ".grad_" .. inp[1]]), tol[1], tol[2], what .. ": gradient of " .. inp[1])
      end
    end
  end
end

-- a case for each reduction: make(red) returns lua, py (the reduction spliced in)
local function per_reduction(label, reds, inputs, make, extra)
  local out = {}
  for _, red in ipairs(reds) do
    local lua, py = make(red)
    local c = { label .. ", reduction " .. red, lua = lua, py = py, inputs = inputs }
    for k, v in pairs(extra or {}) do c[k] = v end
    out[#out + 1] = c
  end
  return out
end

local function concat(...)
  local all = {}
  for _, list in ipairs({ ... }) do for _, c in ipairs(list) do all[#all + 1] = c end end
  return all
end

-- values away from 0 and 1, for probabilities
local function probs(shape, seed) return R.uniform(shape, 0.02, 0.98, seed) end

describe("binary_cross_entropy / nn.BCELoss", function()
  it("matches PyTorch on [3, 5, 7] (transposed, weight [7]) and [4] (weight [1]), every reduction", function()
    if not TR.available() then return pending(NO_TORCH) end
    local p, y, w = probs({ 3, 7, 5 }, 901), R.uniform({ 3, 5, 7 }, 0, 1, 902), R.uniform({ 7 }, 0.5, 2, 903)
    local p4, y4, w1 = probs({ 4 }, 904), R.uniform({ 4 }, 0, 1, 905), R.uniform({ 1 }, 0.5, 2, 906)
    check_cases(concat(
      per_reduction("[3, 5, 7] weight [7]", REDS,
        { { "p", p, view = t23, grad = true }, { "y", y, grad = true }, { "w", w } }, function(red)
          return function(I) return F.binary_cross_entropy(I.p, I.y, { weight = I.w, reduction = red }) end,
            "F.binary_cross_entropy(I['p'], I['y'], weight=I['w'], reduction='" .. red .. "')"
        end),
      per_reduction("[4] weight [1], nn.BCELoss", REDS, { { "p", p4, grad = true }, { "y", y4, grad = true },
        { "w", w1 } }, function(red)
          return function(I) return nn.BCELoss { weight = I.w, reduction = red }(I.p, I.y) end,
            "nn.BCELoss(weight=I['w'], reduction='" .. red .. "')(I['p'], I['y'])"
        end),
      per_reduction("[4] of a sigmoid", REDS, { { "x", R.randn({ 4 }, 907), grad = true }, { "y", y4 } },
        function(red)
          return function(I) return F.binary_cross_entropy(I.x:sigmoid(), I.y, { reduction = red }) end,
            "F.binary_cross_entropy(I['x'].sigmoid(), I['y'], reduction='" .. red .. "')"
        end)))
  end)

  it("matches PyTorch at inputs 0 and 1 (finite losses, PyTorch's input gradients) and on empty inputs", function()
    if not TR.available() then return pending(NO_TORCH) end
    local p = ddp.tensor({ 0, 1, 0, 1, 0.5, 1e-30, 1 - 2 ^ -20 }, { dtype = "float64" })
    local y = ddp.tensor({ 0, 0, 1, 1, 0.25, 0.5, 0.75 }, { dtype = "float64" })
    check_cases(concat(
      per_reduction("edges", REDS, { { "p", p, grad = true }, { "y", y } }, function(red)
        return function(I) return F.binary_cross_entropy(I.p, I.y, { reduction = red }) end,
          "F.binary_cross_entropy(I['p'], I['y'], reduction='" .. red .. "')"
      end),
      per_reduction("empty [0, 3]", REDS, { { "p", ddp.zeros(0, 3, { dtype = "float64" }) },
        { "y", ddp.zeros(0, 3, { dtype = "float64" }) } }, function(red)
          return function(I) return F.binary_cross_entropy(I.p, I.y, { reduction = red }) end,
            "F.binary_cross_entropy(I['p'], I['y'], reduction='" .. red .. "')"
        end)))
    -- mean of nothing is NaN, as PyTorch's (checked above against it; here without it too)
    local m = F.binary_cross_entropy(ddp.zeros(0), ddp.zeros(0)):item()
    assert.is_true(m ~= m, "the mean over an empty input should be NaN, got " .. m)
  end)

  it("refuses a NaN input as PyTorch does", function()
    if not TR.available() then return pending(NO_TORCH) end
    local ref = TR.run([[
try:
    torch.nn.functional.binary_cross_entropy(torch.tensor([0.5, float("nan")]), torch.tensor([0., 1.]))
    OUT["raised"] = torch.tensor(0)
except RuntimeError as e:
    OUT["raised"] = torch.tensor(int("between 0 and 1" in str(e)))
]], {})
    assert.are.equal(1, ref.raised:item())
    R.assert_error(function() return F.binary_cross_entropy(ddp.tensor({ 0.5, 0 / 0 }), ddp.tensor({ 0.0, 1.0 })) end,
      "binary_cross_entropy", "between 0 and 1")
  end)

  it("gives hand-checked values: -log(0.5) at p = 0.5, 100 for a confident mistake", function()
    local l = F.binary_cross_entropy(ddp.tensor({ 0.5, 0.0, 1.0 }, { dtype = "float64" }),
      ddp.tensor({ 1.0, 1.0, 0.0 }, { dtype = "float64" }), { reduction = "none" })
    R.assert_close(l, { shape = { 3 }, v = { math.log(2), 100, 100 } }, 1e-15, 1e-15)
  end)

  it("has finite-difference gradients for input (transposed, of a sigmoid), target and weight", function()
    for _, red in ipairs(REDS) do
      gc.assert_gradcheck(function(p, y, w)
        return F.binary_cross_entropy(t23(p), y, { weight = w, reduction = red })
      end, { probs({ 2, 4, 3 }, 911):requires_grad_(), R.uniform({ 2, 3, 4 }, 0, 1, 912):requires_grad_(),
        R.uniform({ 4 }, 0.5, 2, 913):requires_grad_() })
      local y5 = R.uniform({ 5 }, 0, 1, 914)
      gc.assert_gradcheck(function(x) return nn.BCELoss { reduction = red }(x:sigmoid(), y5) end,
        { R.randn({ 5 }, 915):requires_grad_() })
    end
  end)

  it("gives the same loss without recording a graph", function()
    local p, y = probs({ 3, 4 }, 916), R.uniform({ 3, 4 }, 0, 1, 917)
    local with = F.binary_cross_entropy(p:clone():requires_grad_(), y, { reduction = "none" })
    local without = ddp.no_grad(function() return F.binary_cross_entropy(p:clone():requires_grad_(), y,
      { reduction = "none" }) end)
    assert.are.same(with:detach():totable(), without:totable())
  end)
end)

describe("binary_cross_entropy_with_logits / nn.BCEWithLogitsLoss", function()
  it("matches PyTorch on [3, 5, 7] (transposed) with weight [5, 1] and pos_weight [7], and on [4], every reduction",
    function()
      if not TR.available() then return pending(NO_TORCH) end
      local x, y = R.randn({ 3, 7, 5 }, 921, 3), R.uniform({ 3, 5, 7 }, 0, 1, 922)
      local w, pw = R.uniform({ 5, 1 }, 0.5, 2, 923), R.uniform({ 7 }, 0.5, 3, 924)
      local x4, y4 = R.randn({ 4 }, 925, 2), R.uniform({ 4 }, 0, 1, 926)
      check_cases(concat(
        per_reduction("[3, 5, 7] weight [5, 1] pos_weight [7]", REDS, { { "x", x, view = t23, grad = true },
          { "y", y, grad = true }, { "w", w }, { "pw", pw } }, function(red)
            return function(I)
              return F.binary_cross_entropy_with_logits(I.x, I.y, { weight = I.w, pos_weight = I.pw, reduction = red })
            end, "F.binary_cross_entropy_with_logits(I['x'], I['y'], weight=I['w'], pos_weight=I['pw'], " ..
              "reduction='" .. red .. "')"
          end),
        per_reduction("[4], nn.BCEWithLogitsLoss", REDS, { { "x", x4, grad = true }, { "y", y4, grad = true } },
          function(red)
            return function(I) return nn.BCEWithLogitsLoss { reduction = red }(I.x, I.y) end,
              "nn.BCEWithLogitsLoss(reduction='" .. red .. "')(I['x'], I['y'])"
          end)))
    end)

  it("matches PyTorch at x = +-1000, +-30 and 0 (finite, gradients too), with NaN, and on empty inputs", function()
    if not TR.available() then return pending(NO_TORCH) end
    local x = ddp.tensor({ -1000, -30, 0, 0, 30, 1000, 1000, -1000 }, { dtype = "float64" })
    local y = ddp.tensor({ 0, 1, 0.5, 1, 0, 1, 0.3, 0.3 }, { dtype = "float64" })
    local pw = ddp.tensor({ 2.5 }, { dtype = "float64" })
    local nan_x = ddp.tensor({ 0 / 0, 1, -2 }, { dtype = "float64" })
    check_cases(concat(
      per_reduction("edges", REDS, { { "x", x, grad = true }, { "y", y, grad = true } }, function(red)
        return function(I) return F.binary_cross_entropy_with_logits(I.x, I.y, { reduction = red }) end,
          "F.binary_cross_entropy_with_logits(I['x'], I['y'], reduction='" .. red .. "')"
      end),
      per_reduction("edges pos_weight [1]", REDS, { { "x", x, grad = true }, { "y", y, grad = true }, { "pw", pw } },
        function(red)
          return function(I)
            return F.binary_cross_entropy_with_logits(I.x, I.y, { pos_weight = I.pw, reduction = red })
          end, "F.binary_cross_entropy_with_logits(I['x'], I['y'], pos_weight=I['pw'], reduction='" .. red .. "')"
        end),
      per_reduction("NaN", REDS, { { "x", nan_x, grad = true }, { "y", ddp.tensor({ 1.0, 0.0, 1.0 }) } },
        function(red)
          return function(I) return F.binary_cross_entropy_with_logits(I.x, I.y, { reduction = red }) end,
            "F.binary_cross_entropy_with_logits(I['x'], I['y'], reduction='" .. red .. "')"
        end),
      per_reduction("empty [0]", REDS, { { "x", ddp.zeros(0) }, { "y", ddp.zeros(0) } }, function(red)
        return function(I) return F.binary_cross_entropy_with_logits(I.x, I.y, { reduction = red }) end,
          "F.binary_cross_entropy_with_logits(I['x'], I['y'], reduction='" .. red .. "')"
      end)))
  end)

  it("is finite at |x| = 1000 and gives hand-checked values: log 2 at 0, pos_weight scaling the positive term",
    function()
      local l = F.binary_cross_entropy_with_logits(ddp.tensor({ 0.0, 1000, -1000, 0.0 }, { dtype = "float64" }),
        ddp.tensor({ 1.0, 0.0, 1.0, 1.0 }, { dtype = "float64" }), { reduction = "none",
          pos_weight = ddp.tensor({ 1.0, 1.0, 1.0, 3.0 }, { dtype = "float64" }) })
      R.assert_close(l, { shape = { 4 }, v = { math.log(2), 1000, 1000, 3 * math.log(2) } }, 1e-13, 1e-15)
    end)

  it("float32 (the op of the table, core._bce_logits, in vector lanes) within float32's rounding of float64", function()
    local x = R.randn({ 10007 }, 931, 8)
    x[1], x[2], x[3] = 100, -100, 0
    local y = R.uniform({ 10007 }, 0, 1, 932)
    local want = F.binary_cross_entropy_with_logits(x, y, { reduction = "none" })
    local xf = x:float():requires_grad_()
    local got = F.binary_cross_entropy_with_logits(xf, y:float(), { reduction = "none" })
    R.assert_close(got, R.from(want), 2e-6, 2e-6, "loss")
    got:sum():backward()
    R.assert_close(xf.grad, R.from(x:sigmoid() - y), 1e-6, 1e-6, "gradient: sigmoid(x) - y")
    assert.is_nil(x._bce_logits, "an internal op, not a method")
  end)

  it("has finite-difference gradients for input (transposed), target, weight and pos_weight", function()
    for _, red in ipairs(REDS) do
      gc.assert_gradcheck(function(x, y, w, pw)
        return F.binary_cross_entropy_with_logits(t23(x), y, { weight = w, pos_weight = pw, reduction = red })
      end, { R.randn({ 2, 4, 3 }, 931, 2):requires_grad_(), R.uniform({ 2, 3, 4 }, 0, 1, 932):requires_grad_(),
        R.uniform({ 3, 1 }, 0.5, 2, 933):requires_grad_(), R.uniform({ 4 }, 0.5, 3, 934):requires_grad_() })
    end
  end)
end)

-- d values for gradchecks away from the kinks at 0 and at +-k
local function away_from(shape, seed, k)
  local v = gc.flat_values(gc.smooth_input(shape, seed):detach() * 1.5)
  for i, d in ipairs(v) do
    if math.abs(math.abs(d) - k) < 0.05 then v[i] = d + (d < 0 and -0.1 or 0.1) end
  end
  return ddp.tensor(v, { dtype = "float64" }):view(shape)
end

describe("l1_loss, smooth_l1_loss, huber_loss and their modules", function()
  local x, y = R.randn({ 3, 7, 5 }, 941, 1.5), R.randn({ 5, 7 }, 942)
  local x4, y4 = R.randn({ 4 }, 943, 2), R.randn({ 4 }, 944)

  -- one set of cases per loss: lua(I, red), py (with RED for the reduction)
  -- nan_grad = false: the NaN input's gradient is not compared (SmoothL1Loss with beta 0 has L1's, 0, at a NaN;
  -- PyTorch 1.13's is NaN there, where its l1_loss gives 0)
  local function cases(label, lua, py, nan_grad)
    local function make(red)
      return function(I) return lua(I, red) end, (py:gsub("RED", red))
    end
    local extra = nil
    local nan_y = ddp.tensor({ 0.0, 1.0 }, { dtype = "float64" })
    return concat(
      per_reduction(label .. " [3, 5, 7] (transposed) and target [5, 7]", REDS,
        { { "x", x, view = t23, grad = true }, { "y", y, grad = true } }, make, extra),
      per_reduction(label .. " [4]", REDS, { { "x", x4, grad = true }, { "y", y4, grad = true } }, make, extra),
      per_reduction(label .. " NaN", REDS, { { "x", ddp.tensor({ 0 / 0, 0.3 }, { dtype = "float64" }),
        grad = nan_grad ~= false }, { "y", nan_y } }, make, extra),
      per_reduction(label .. " empty", REDS, { { "x", ddp.zeros(0, 2) }, { "y", ddp.zeros(0, 2) } }, make, extra))
  end

  it("match PyTorch (values, gradients of input and target, NaN, empty)", function()
    if not TR.available() then return pending(NO_TORCH) end
    check_cases(concat(
      cases("l1", function(I, red) return F.l1_loss(I.x, I.y, { reduction = red }) end,
        "F.l1_loss(I['x'], I['y'], reduction='RED')"),
      cases("L1Loss", function(I, red) return nn.L1Loss { reduction = red }(I.x, I.y) end,
        "nn.L1Loss(reduction='RED')(I['x'], I['y'])"),
      cases("smooth_l1", function(I, red) return F.smooth_l1_loss(I.x, I.y, { reduction = red }) end,
        "F.smooth_l1_loss(I['x'], I['y'], reduction='RED')"),
      cases("smooth_l1 beta 0.5", function(I, red) return F.smooth_l1_loss(I.x, I.y, { reduction = red, beta = 0.5 })
      end, "F.smooth_l1_loss(I['x'], I['y'], reduction='RED', beta=0.5)"),
      cases("SmoothL1Loss beta 0", function(I, red) return nn.SmoothL1Loss { reduction = red, beta = 0 }(I.x, I.y) end,
        "nn.SmoothL1Loss(reduction='RED', beta=0.0)(I['x'], I['y'])", false),
      cases("SmoothL1Loss beta 2", function(I, red) return nn.SmoothL1Loss { reduction = red, beta = 2 }(I.x, I.y) end,
        "nn.SmoothL1Loss(reduction='RED', beta=2.0)(I['x'], I['y'])"),
      cases("huber", function(I, red) return F.huber_loss(I.x, I.y, { reduction = red }) end,
        "F.huber_loss(I['x'], I['y'], reduction='RED')"),
      cases("HuberLoss delta 0.3", function(I, red) return nn.HuberLoss { reduction = red, delta = 0.3 }(I.x, I.y) end,
        "nn.HuberLoss(reduction='RED', delta=0.3)(I['x'], I['y'])"),
      cases("huber delta 2.5", function(I, red) return F.huber_loss(I.x, I.y, { reduction = red, delta = 2.5 }) end,
        "F.huber_loss(I['x'], I['y'], reduction='RED', delta=2.5)")))
  end)

  it("warn once per loss when the target's shape differs (as mse_loss and PyTorch; kl_div does not)", function()
    local ok, out = require("helpers.io_util").run_lua_fresh([[
local ddp = require "ddplua"
local F = ddp.nn.F
for _ = 1, 2 do
  F.l1_loss(ddp.ones(3, 4), ddp.ones(4))
  F.huber_loss(ddp.ones(3, 4), ddp.ones(1, 4))
  F.kl_div(ddp.ones(3, 4), ddp.ones(4))
  F.smooth_l1_loss(ddp.ones(4), ddp.ones(4))
end
print("done")
]], "")
    assert.is_true(ok, out)
    local function count(piece)
      local n = 0
      for _ in out:gmatch((piece:gsub("%p", "%%%0"))) do n = n + 1 end
      return n
    end
    assert.are.equal(1, count("warning: l1_loss: using a target size ([4]) that is different to the input size " ..
      "([3, 4])"), out)
    assert.are.equal(1, count("warning: huber_loss: using a target size ([1, 4])"), out)
    assert.are.equal(2, count("warning:"), out)
    assert.are.equal(1, count("done"), out)
  end)

  it("give hand-checked values", function()
    -- 1.005: just past beta = 1, where the linear part takes over
    local d = ddp.tensor({ -2.0, 0.5, 0.0, 1.005 }, { dtype = "float64" })
    local z = ddp.zeros(4, { dtype = "float64" })
    local none = { reduction = "none" }
    R.assert_close(F.l1_loss(d, z, none), { shape = { 4 }, v = { 2, 0.5, 0, 1.005 } }, 0, 0)
    R.assert_close(F.smooth_l1_loss(d, z, none), { shape = { 4 }, v = { 1.5, 0.125, 0, 1.005 - 0.5 } }, 0, 0)
    R.assert_close(F.huber_loss(d, z, { reduction = "none", delta = 0.25 }),
      { shape = { 4 }, v = { 0.25 * (2 - 0.125), 0.25 * (0.5 - 0.125), 0, 0.25 * (1.005 - 0.125) } }, 1e-16, 0)
    R.assert_close(F.huber_loss(d, z, { reduction = "none", delta = 1.01 }),
      { shape = { 4 }, v = { 1.01 * (2 - 0.505), 0.125, 0, 0.5 * 1.005 * 1.005 } }, 1e-15, 0)
    R.assert_close(F.smooth_l1_loss(d, z, { reduction = "sum", beta = 0 }), { shape = {}, v = { 3.505 } }, 1e-15, 0)
  end)

  it("have finite-difference gradients away from the kinks (transposed inputs)", function()
    for _, red in ipairs(REDS) do
      for _, k in ipairs({ 0.5, 1, 2 }) do
        local d, t = away_from({ 2, 4, 3 }, 951, k), R.randn({ 2, 3, 4 }, 952)
        local xin = (t23(t) + d):contiguous():requires_grad_()
        gc.assert_gradcheck(function(a, b) return F.l1_loss(t23(a), b, { reduction = red }) end,
          { xin, t:clone():requires_grad_() })
        gc.assert_gradcheck(function(a, b) return F.smooth_l1_loss(t23(a), b, { reduction = red, beta = k }) end,
          { xin, t:clone():requires_grad_() })
        gc.assert_gradcheck(function(a, b) return nn.HuberLoss { reduction = red, delta = k }(t23(a), b) end,
          { xin, t:clone():requires_grad_() })
      end
    end
  end)
end)

describe("kl_div / nn.KLDivLoss", function()
  local function logsm(t) return ddp.log_softmax(t, -1) end

  it("matches PyTorch on [3, 5, 7] (transposed) and [4], every reduction with batchmean, log_target both ways",
    function()
      if not TR.available() then return pending(NO_TORCH) end
      local x = logsm(R.randn({ 3, 5, 7 }, 961)):transpose(2, 3):contiguous() -- [3, 7, 5], its view [3, 5, 7]
      -- target probabilities with exact zeros: 0 * log 0 counts as 0 (its target gradient is NaN in both)
      local p = ddp.softmax(R.randn({ 3, 5, 7 }, 962), -1)
      p = ddp.where(R.uniform({ 3, 5, 7 }, 0, 1, 963):lt(0.2), 0, p)
      local lq = logsm(R.randn({ 3, 5, 7 }, 964))
      local x4, p4 = logsm(R.randn({ 4 }, 965)), ddp.softmax(R.randn({ 4 }, 966), -1)
      local reds = { "mean", "batchmean", "sum", "none" }
      local function make(call, log_target)
        local flag = log_target and ", log_target=True" or ""
        return function(red)
          return function(I) return call(I, red) end,
            "F.kl_div(I['x'], I['t'], reduction='" .. red .. "'" .. flag .. ")"
        end
      end
      check_cases(concat(
        per_reduction("[3, 5, 7] probabilities with zeros", reds,
          { { "x", x, view = t23, grad = true }, { "t", p, grad = true } },
          make(function(I, red) return F.kl_div(I.x, I.t, { reduction = red }) end)),
        per_reduction("[3, 5, 7] log_target", reds, { { "x", x, view = t23, grad = true }, { "t", lq, grad = true } },
          make(function(I, red) return nn.KLDivLoss { reduction = red, log_target = true }(I.x, I.t) end, true)),
        per_reduction("[4], nn.KLDivLoss", reds, { { "x", x4, grad = true }, { "t", p4, grad = true } },
          make(function(I, red) return nn.KLDivLoss { reduction = red }(I.x, I.t) end)),
        per_reduction("0-dim", reds, { { "x", ddp.tensor(-0.7, { dtype = "float64" }), grad = true },
          { "t", ddp.tensor(0.4, { dtype = "float64" }), grad = true } },
          make(function(I, red) return F.kl_div(I.x, I.t, { reduction = red }) end)),
        per_reduction("empty [0, 3]", reds, { { "x", ddp.zeros(0, 3) }, { "t", ddp.zeros(0, 3) } },
          make(function(I, red) return F.kl_div(I.x, I.t, { reduction = red }) end)),
        per_reduction("NaN and a negative target", reds, { { "x", ddp.tensor({ 0 / 0, -1.0, -2.0 }) },
          { "t", ddp.tensor({ 0.5, -0.5, 0.0 }) } },
          make(function(I, red) return F.kl_div(I.x, I.t, { reduction = red }) end))))
    end)

  it("gives hand-checked values: 0 for equal distributions, batchmean dividing by the first dim", function()
    local r = ddp.tensor({ { 0.25, 0.75 }, { 0.5, 0.5 } }, { dtype = "float64" })
    R.assert_close(F.kl_div(r:log(), r, { reduction = "sum" }), { shape = {}, v = { 0 } }, 1e-15, 0)
    local p = ddp.tensor({ { 0.25, 0.75 }, { 0.5, 0.5 }, { 1.0, 0.0 } }, { dtype = "float64" })
    local q = ddp.full({ 3, 2 }, 0.5, { dtype = "float64" })
    local sum = 0.25 * math.log(0.5) + 0.75 * math.log(1.5) + 1.0 * math.log(2)
    R.assert_close(F.kl_div(q:log(), p, { reduction = "batchmean" }), { shape = {}, v = { sum / 3 } }, 1e-14, 0)
    R.assert_close(F.kl_div(q:log(), p, { reduction = "mean" }), { shape = {}, v = { sum / 6 } }, 1e-14, 0)
    -- log_target: the same with log-probabilities (no zeros: exp(-inf) * -inf is NaN, in PyTorch too)
    local q2 = ddp.full({ 2, 2 }, 0.5, { dtype = "float64" })
    R.assert_close(F.kl_div(q2:log(), r:log(), { reduction = "batchmean", log_target = true }),
      { shape = {}, v = { (0.25 * math.log(0.5) + 0.75 * math.log(1.5)) / 2 } }, 1e-14, 0)
  end)

  it("has finite-difference gradients for input (transposed) and target, log_target both ways", function()
    for _, red in ipairs({ "mean", "batchmean", "sum", "none" }) do
      gc.assert_gradcheck(function(x, t) return F.kl_div(t23(x), t, { reduction = red }) end,
        { R.randn({ 2, 4, 3 }, 971):requires_grad_(), R.uniform({ 2, 3, 4 }, 0.1, 1, 972):requires_grad_() })
      gc.assert_gradcheck(function(x, t) return F.kl_div(t23(x), t, { reduction = red, log_target = true }) end,
        { R.randn({ 2, 4, 3 }, 973):requires_grad_(), R.randn({ 2, 3, 4 }, 974):requires_grad_() })
    end
  end)
end)

describe("the losses' argument errors", function()
  local p, y = ddp.full({ 3 }, 0.5), ddp.full({ 3 }, 0.25)
  local functional = {
    binary_cross_entropy = nn.BCELoss, binary_cross_entropy_with_logits = nn.BCEWithLogitsLoss, l1_loss = nn.L1Loss,
    smooth_l1_loss = nn.SmoothL1Loss, huber_loss = nn.HuberLoss, kl_div = nn.KLDivLoss,
  }
  local names = { "binary_cross_entropy", "binary_cross_entropy_with_logits", "l1_loss", "smooth_l1_loss",
    "huber_loss", "kl_div" }
  local classes = { "BCELoss", "BCEWithLogitsLoss", "L1Loss", "SmoothL1Loss", "HuberLoss", "KLDivLoss" }

  it("name the loss and the valid values for a bad reduction, in the function and the module", function()
    for i, name in ipairs(names) do
      local valid = name == "kl_div" and '"mean", "batchmean", "sum" or "none"' or '"mean", "sum" or "none"'
      R.assert_error(function() return F[name](p, y, { reduction = "avg" }) end, name .. ": reduction must be", valid,
        "avg")
      R.assert_error(function() return functional[name] { reduction = "avg" } end, classes[i] .. ": reduction", valid)
    end
    R.assert_error(function() return F.binary_cross_entropy(p, y, { reduction = "batchmean" }) end,
      "binary_cross_entropy: reduction", "batchmean")
  end)

  it("name the loss and the valid options for an unknown option, and refuse options that are not a table", function()
    for i, name in ipairs(names) do
      R.assert_error(function() return F[name](p, y, { weights = p }) end, name .. ": unknown option 'weights'",
        "reduction")
      R.assert_error(function() return functional[name] { size_average = true } end,
        classes[i] .. ": unknown option 'size_average'")
      R.assert_error(function() return F[name](p, y, "sum") end, name .. ": options must be a table")
    end
    R.assert_error(function() return F.binary_cross_entropy(p, y, p) end, "binary_cross_entropy", "{weight = w}")
  end)

  it("name the loss for arguments that are not tensors or not floating", function()
    for i, name in ipairs(names) do
      R.assert_error(function() return F[name]("p", y) end, name .. ": input must be a tensor, got string")
      R.assert_error(function() return F[name](p, nil) end, name .. ": target must be a tensor, got nil")
      R.assert_error(function() return functional[name]()(p, 3) end, classes[i] .. ": target must be a tensor")
      R.assert_error(function() return F[name](ddp.tensor({ 1, 0, 1 }), y) end, name .. ": input must be a floating",
        "int64")
    end
    R.assert_error(function() return F.binary_cross_entropy(p, ddp.tensor({ 1, 0, 1 })) end,
      "binary_cross_entropy: target must be a floating", "int64")
    R.assert_error(function() return F.binary_cross_entropy(p, y, { weight = { 1, 2, 3 } }) end,
      "binary_cross_entropy: weight must be a tensor, got table")
    R.assert_error(function() return nn.BCEWithLogitsLoss { pos_weight = 2 } end,
      "BCEWithLogitsLoss: pos_weight must be a tensor, got number")
  end)

  it("name the loss and both shapes for mismatched shapes", function()
    for _, name in ipairs({ "binary_cross_entropy", "binary_cross_entropy_with_logits" }) do
      -- PyTorch refuses targets of another shape here, even broadcastable ones
      R.assert_error(function() return F[name](p, ddp.full({ 3, 1 }, 0.5)) end, name .. ": target shape [3, 1]",
        "input shape [3]")
      R.assert_error(function() return F[name](ddp.full({ 2, 3 }, 0.5), ddp.full({ 1, 3 }, 0.5)) end,
        name .. ": target shape [1, 3] differs from input shape [2, 3]")
    end
    for i, name in ipairs({ "l1_loss", "smooth_l1_loss", "huber_loss", "kl_div" }) do
      R.assert_error(function() return F[name](ddp.ones(3, 4), ddp.ones(3)) end, name .. ": input [3, 4]",
        "target [3]", "do not broadcast")
      local cls = functional[name]
      R.assert_error(function() return cls()(ddp.ones(2, 4), ddp.ones(3, 4)) end, classes[i + 2] .. ": input [2, 4]")
    end
    R.assert_error(function() return F.binary_cross_entropy(p, y, { weight = ddp.ones(2, 3) }) end,
      "binary_cross_entropy: weight of shape [2, 3] does not broadcast to the input's shape [3]")
    R.assert_error(function() return nn.BCEWithLogitsLoss { pos_weight = ddp.ones(2) }(p, y) end,
      "BCEWithLogitsLoss: pos_weight of shape [2] does not broadcast to the input's shape [3]")
  end)

  it("refuses binary_cross_entropy inputs outside [0, 1], naming the loss", function()
    for _, bad in ipairs({ 1.5, -0.25, 1 + 2 ^ -20, -1e-300, 0 / 0, math.huge }) do
      local x = ddp.tensor({ 0.5, bad, 0.0 }, { dtype = "float64" })
      R.assert_error(function() return F.binary_cross_entropy(x, y:double()) end,
        "binary_cross_entropy: all elements of input should be between 0 and 1")
      if x:float()[2]:item() ~= 0 then -- -1e-300 is -0 as a float32, which PyTorch takes too
        R.assert_error(function() return nn.BCELoss()(x:float(), y) end, "BCELoss: all elements of input")
      end
    end
    -- a tiny negative float32, and the check on a transposed input
    R.assert_error(function()
      return F.binary_cross_entropy(ddp.tensor({ { 0.5, -1e-30 }, { 0.5, 0.5 } }):t(), ddp.full({ 2, 2 }, 0.5))
    end, "between 0 and 1")
  end)

  it("check beta, delta and log_target", function()
    R.assert_error(function() return F.smooth_l1_loss(p, y, { beta = -1 }) end,
      "smooth_l1_loss: beta must be a non-negative number, got -1")
    R.assert_error(function() return nn.SmoothL1Loss { beta = "1" } end, "SmoothL1Loss: beta")
    R.assert_error(function() return F.huber_loss(p, y, { delta = 0 }) end,
      "huber_loss: delta must be a positive number, got 0")
    R.assert_error(function() return nn.HuberLoss { delta = 0 / 0 } end, "HuberLoss: delta")
    R.assert_error(function() return F.kl_div(p, y, { log_target = 1 }) end, "kl_div: log_target must be a boolean")
    R.assert_error(function() return nn.KLDivLoss { log_target = "yes" } end, "KLDivLoss: log_target")
  end)
end)

describe("the loss modules", function()
  it("keep weight and pos_weight as buffers, show their settings, and cast weights to the input's dtype", function()
    local w, pw = ddp.full({ 3 }, 2.0), ddp.full({ 3 }, 3.0)
    local m = nn.BCEWithLogitsLoss { weight = w, pos_weight = pw, reduction = "sum" }
    local sd = m:state_dict()
    assert.are.same(w:totable(), sd.weight:totable())
    assert.are.same(pw:totable(), sd.pos_weight:totable())
    assert.are.equal("BCEWithLogitsLoss(reduction=sum)", tostring(m))
    assert.are.equal("BCELoss()", tostring(nn.BCELoss { weight = w }))
    assert.are.equal("SmoothL1Loss(reduction=none, beta=0.5)",
      tostring(nn.SmoothL1Loss { beta = 0.5, reduction = "none" }))
    assert.are.equal("HuberLoss(delta=2)", tostring(nn.HuberLoss { delta = 2 }))
    assert.are.equal("KLDivLoss(reduction=batchmean, log_target=true)",
      tostring(nn.KLDivLoss { reduction = "batchmean", log_target = true }))
    local x, y = R.randn({ 2, 3 }, 981), R.uniform({ 2, 3 }, 0, 1, 982)
    local got = m(x, y)
    assert.are.equal("float64", got:dtype())
    local want = F.binary_cross_entropy_with_logits(x, y, { weight = w:double(), pos_weight = pw:double(),
      reduction = "sum" })
    assert.are.equal(want:item(), got:item())
    -- a loss in the input's dtype, as PyTorch's, whatever the weights'
    local x32, y32 = x:float(), y:float()
    assert.are.equal("float32", F.binary_cross_entropy_with_logits(x32, y32, { weight = w:double(),
      pos_weight = pw:double() }):dtype())
    assert.are.equal("float32", F.binary_cross_entropy(x32:sigmoid(), y32, { weight = w:double() }):dtype())
    local l1 = nn.L1Loss()
    assert.are.equal(0, #l1:parameters())
    assert.are.same({}, (function() local k = {} for n in pairs(l1:state_dict()) do k[#k + 1] = n end return k end)())
  end)
end)
