-- nn layers built on the linear-algebra and elementwise ops: Linear (init,
-- forward vs a float64 reference, gradients, the fused Linear+ReLU path),
-- activations, Flatten, losses, nn.F and nn.init.
local ddp = require "ddplua"
local gc = require "helpers.gradcheck"
local nn = ddp.nn

local flat = gc.flat_values

local function erf(x) -- Maclaurin series, exact to double rounding for |x| <= 4
  local sum, term, n = x, x, 0
  repeat
    n = n + 1
    term = -term * x * x / n
    local add = term / (2 * n + 1)
    sum = sum + add
  until math.abs(add) < 1e-17 * math.abs(sum) or n > 200
  return 2 / math.sqrt(math.pi) * sum
end

local function tanh(x)
  local e = math.exp(2 * x)
  return (e - 1) / (e + 1)
end

describe("nn.Linear", function()
  it("initialises weight and bias from U(-1/sqrt(in), 1/sqrt(in)), reproducibly", function()
    ddp.manual_seed(3)
    local lin = nn.Linear(400, 300)
    local bound = 1 / math.sqrt(400)
    assert.are.same({ 300, 400 }, lin.weight:size())
    assert.are.same({ 300 }, lin.bias:size())
    assert.are.equal("float32", lin.weight:dtype())
    assert.is_true(lin.weight.requires_grad and lin.bias.requires_grad and lin.weight.is_leaf)
    local w = lin.weight:double()
    assert.is_true(w:abs():max():item() <= bound)
    assert.is_true(w:abs():max():item() > 0.99 * bound) -- fills the interval
    assert.is_true(math.abs(w:mean():item()) < 0.01 * bound * 10)
    -- uniform: the variance of U(-b, b) is b^2 / 3
    local var = (w * w):mean():item()
    assert.is_true(math.abs(var - bound * bound / 3) < 0.03 * bound * bound / 3)
    assert.is_true(lin.bias:abs():max():item() <= bound)
    ddp.manual_seed(3)
    local again = nn.Linear(400, 300)
    assert.are.same(lin.weight:totable(), again.weight:totable())
    assert.are.same(lin.bias:totable(), again.bias:totable())
  end)

  it("computes x W^T + b like a float64 reference, for batched inputs too", function()
    ddp.manual_seed(1)
    local lin = nn.Linear(5, 3)
    local x = ddp.randn(2, 4, 5)
    local y = lin(x)
    assert.are.same({ 2, 4, 3 }, y:size())
    local W, b, X, Y = lin.weight:totable(), lin.bias:totable(), x:totable(), y:totable()
    local worst = 0
    for i = 1, 2 do
      for r = 1, 4 do
        for o = 1, 3 do
          local acc = b[o]
          for k = 1, 5 do acc = acc + X[i][r][k] * W[o][k] end
          worst = math.max(worst, math.abs(acc - Y[i][r][o]))
        end
      end
    end
    assert.is_true(worst < 1e-5, "max error " .. worst)
  end)

  it("has gradients matching finite differences (float64)", function()
    ddp.manual_seed(2)
    local lin = nn.Linear(4, 3):double()
    local x = ddp.randn(5, 4, { dtype = "float64" }):requires_grad_()
    gc.assert_gradcheck(function(xx) return lin(xx) end, { x, lin.weight, lin.bias })
    local nobias = nn.Linear(4, 2, { bias = false }):double()
    assert.is_nil(nobias.bias)
    gc.assert_gradcheck(function(xx) return nobias(xx) end, { x, nobias.weight })
  end)

  it("runs Linear followed by ReLU in Sequential as one fused call with the same result", function()
    ddp.manual_seed(4)
    local seq = nn.Sequential { nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3) }
    local x = ddp.randn(7, 6)
    local calls, relu_calls = 0, 0
    seq[1].forward_relu = function(m, z) -- spies on this instance only
      calls = calls + 1
      return nn.Linear.forward_relu(m, z)
    end
    seq[2].forward = function(m, z)
      relu_calls = relu_calls + 1
      return nn.ReLU.forward(m, z)
    end
    local fused = seq(x)
    assert.are.equal(1, calls)
    assert.are.equal(0, relu_calls)
    local unfused = seq[3](seq[1](x):relu())
    assert.is_true(gc.max_abs_diff(fused, unfused) < 1e-6)
    fused:sum():backward()
    local g_fused = { seq[1].weight.grad:totable(), seq[1].bias.grad:totable(), seq[3].weight.grad:totable() }
    seq:zero_grad()
    unfused:sum():backward()
    assert.is_true(gc.max_abs_diff(seq[1].weight.grad, g_fused[1]) < 1e-5)
    assert.is_true(gc.max_abs_diff(seq[1].bias.grad, g_fused[2]) < 1e-5)
    assert.is_true(gc.max_abs_diff(seq[3].weight.grad, g_fused[3]) < 1e-5)
  end)

  it("names itself and the expected features on a wrong input shape", function()
    local lin = nn.Linear(784, 10)
    local ok, err = pcall(function() return lin(ddp.zeros(2, 100)) end)
    assert.is_false(ok)
    assert.matches("Linear%(in_features=784, out_features=10, bias=True%): expected input with 784 features in its "
      .. "last dimension, got shape %[2, 100%]", err)
    ok, err = pcall(function() return nn.Sequential { nn.Linear(3, 4), nn.ReLU() }(ddp.zeros(2, 5)) end)
    assert.is_false(ok)
    assert.matches("expected input with 3 features", err)
  end)

  it("rejects bad constructor arguments", function()
    local ok, err = pcall(function() return nn.Linear(0, 3) end)
    assert.is_false(ok)
    assert.matches("Linear: in_features must be a positive integer, got 0", err)
    ok, err = pcall(function() return nn.Linear(3, 2.5) end)
    assert.is_false(ok)
    assert.matches("out_features must be a positive integer, got 2.5", err)
    ok, err = pcall(function() return nn.Linear(3, 2, { biass = false }) end)
    assert.is_false(ok)
    assert.matches("unknown option 'biass' %(valid options: bias, dtype, device%)", err)
  end)
end)

describe("activation modules", function()
  local x = ddp.tensor({ { -2.5, -0.3, 0.0, 0.4, 3.1 } }, { dtype = "float64" })
  local xs = flat(x)
  local cases = {
    { "ReLU", function(v) return math.max(v, 0) end },
    { "GELU", function(v) return 0.5 * v * (1 + erf(v / math.sqrt(2))) end },
    { "Tanh", tanh },
    { "Sigmoid", function(v) return 1 / (1 + math.exp(-v)) end },
  }
  for _, c in ipairs(cases) do
    it(c[1] .. " matches its float64 reference and prints as " .. c[1] .. "()", function()
      local m = nn[c[1]]()
      local ys = flat(m(x))
      for i, v in ipairs(xs) do
        assert.is_true(math.abs(ys[i] - c[2](v)) < 1e-12, string.format("%s(%g): %.17g vs %.17g", c[1], v, ys[i],
          c[2](v)))
      end
      assert.are.equal(c[1] .. "()", tostring(m))
      assert.are.equal(0, #m:parameters())
    end)
  end
end)

describe("nn.Flatten", function()
  it("keeps the batch dimension by default and takes 1-based dims", function()
    local x = ddp.zeros(2, 3, 4, 5)
    assert.are.same({ 2, 60 }, nn.Flatten()(x):size())
    assert.are.same({ 120 }, nn.Flatten(1)(x):size())
    assert.are.same({ 2, 12, 5 }, nn.Flatten(2, 3)(x):size())
    assert.are.same({ 2, 3, 20 }, nn.Flatten(-2, -1)(x):size())
    local ok, err = pcall(function() return nn.Flatten(0) end)
    assert.is_false(ok)
    assert.matches("Flatten: dimensions must be non%-zero integers", err)
  end)
end)

-- float64 reference cross entropy over rows of a table of logits
local function ce_reference(logits, target, smoothing, ignore, reduction)
  local losses, count = {}, 0
  for i, row in ipairs(logits) do
    local m = -math.huge
    for _, v in ipairs(row) do m = math.max(m, v) end
    local s = 0
    for _, v in ipairs(row) do s = s + math.exp(v - m) end
    local lse = m + math.log(s)
    if target[i] == ignore then
      losses[i] = 0
    else
      local nll = lse - row[target[i]]
      local mean_all = 0
      for _, v in ipairs(row) do mean_all = mean_all + (lse - v) end
      mean_all = mean_all / #row
      losses[i] = (1 - smoothing) * nll + smoothing * mean_all
      count = count + 1
    end
  end
  if reduction == "none" then return losses end
  local total = 0
  for _, l in ipairs(losses) do total = total + l end
  if reduction == "sum" then return total end
  return total / count
end

describe("loss modules", function()
  local logits = ddp.tensor({ { 1.0, -0.5, 2.0 }, { 0.3, 0.3, -1.0 }, { -2.0, 0.5, 0.1 }, { 0.0, 1.5, -0.7 } },
    { dtype = "float64" })
  local target = ddp.tensor({ 3, 1, 2, 2 })

  it("CrossEntropyLoss matches the reference for each reduction, label smoothing and ignore_index", function()
    local L, T = logits:totable(), target:totable()
    for _, red in ipairs({ "mean", "sum", "none" }) do
      for _, ls in ipairs({ 0, 0.1 }) do
        for _, ign in ipairs({ -100, 2 }) do
          local got = nn.CrossEntropyLoss { reduction = red, label_smoothing = ls, ignore_index = ign }(logits, target)
          local want = ce_reference(L, T, ls, ign, red)
          if red == "none" then
            assert.is_true(gc.max_abs_diff(got, want) < 1e-12)
          else
            assert.is_true(math.abs(got:item() - want) < 1e-12, string.format("%s %g %d: %.17g vs %.17g", red, ls,
              ign, got:item(), want))
          end
        end
      end
    end
    assert.are.equal("CrossEntropyLoss(label_smoothing=0.1)", tostring(nn.CrossEntropyLoss { label_smoothing = 0.1 }))
  end)

  it("CrossEntropyLoss has gradients matching finite differences", function()
    local x = logits:clone():requires_grad_()
    local loss = nn.CrossEntropyLoss { label_smoothing = 0.2 }
    gc.assert_gradcheck(function(z) return loss(z, target) end, { x })
  end)

  it("MSELoss matches the reference", function()
    local a = ddp.tensor({ { 1.0, 2.0 }, { -1.0, 0.5 } }, { dtype = "float64" })
    local b = ddp.tensor({ { 0.5, 2.5 }, { 1.0, 0.0 } }, { dtype = "float64" })
    local sq = { 0.25, 0.25, 4.0, 0.25 }
    assert.are.equal((0.25 + 0.25 + 4 + 0.25) / 4, nn.MSELoss()(a, b):item())
    assert.are.equal(4.75, nn.MSELoss { reduction = "sum" }(a, b):item())
    assert.are.same(sq, flat(nn.MSELoss { reduction = "none" }(a, b)))
  end)

  it("reject bad options by name", function()
    local ok, err = pcall(function() return nn.CrossEntropyLoss { reduce = "sum" } end)
    assert.is_false(ok)
    assert.matches("CrossEntropyLoss: unknown option 'reduce'", err)
    ok, err = pcall(function() return nn.CrossEntropyLoss { reduction = "avg" } end)
    assert.is_false(ok)
    assert.matches('reduction must be "mean", "sum" or "none", got avg', err)
    ok, err = pcall(function() return nn.CrossEntropyLoss { label_smoothing = 1.5 } end)
    assert.is_false(ok)
    assert.matches("label_smoothing must be a number in %[0, 1%], got 1.5", err)
    ok, err = pcall(function() return nn.MSELoss { reduction = 3 } end)
    assert.is_false(ok)
    assert.matches("MSELoss: reduction must be", err)
  end)

  it("report a class label out of range", function()
    local ok, err = pcall(function() return nn.CrossEntropyLoss()(logits, ddp.tensor({ 1, 2, 4, 1 })) end)
    assert.is_false(ok)
    assert.matches("4", err)
  end)
end)

describe("nn.F", function()
  it("gives the functional forms of the modules", function()
    ddp.manual_seed(5)
    local x = ddp.randn(3, 4)
    assert.are.same(x:relu():totable(), nn.F.relu(x):totable())
    assert.are.same(x:gelu():totable(), nn.F.gelu(x):totable())
    assert.are.same(x:tanh():totable(), nn.F.tanh(x):totable())
    assert.are.same(x:sigmoid():totable(), nn.F.sigmoid(x):totable())
    assert.are.same(ddp.softmax(x, 2):totable(), nn.F.softmax(x, 2):totable())
    assert.are.same(ddp.log_softmax(x, 1):totable(), nn.F.log_softmax(x, 1):totable())
    local lin = nn.Linear(4, 2)
    assert.are.same(lin(x):totable(), nn.F.linear(x, lin.weight, lin.bias):totable())
    assert.are.same(lin(x):relu():totable(), nn.F.linear(x, lin.weight, lin.bias, "relu"):totable())
    local t = ddp.tensor({ 1, 2 })
    local z = ddp.randn(2, 3)
    assert.are.equal(nn.CrossEntropyLoss { label_smoothing = 0.1 }(z, t):item(),
      nn.F.cross_entropy(z, t, { label_smoothing = 0.1 }):item())
    assert.are.equal(nn.MSELoss()(z, z * 2):item(), nn.F.mse_loss(z, z * 2):item())
    assert.are.same({ 3, 4 }, nn.F.flatten(ddp.zeros(3, 2, 2), 2):size())
  end)
end)

describe("nn.init", function()
  it("fills from U(a, b) and N(mean, std) in place", function()
    ddp.manual_seed(6)
    local t = ddp.empty(20000, { dtype = "float64" })
    assert.are.equal(t, nn.init.uniform_(t, -2, 3))
    assert.is_true(t:min():item() >= -2 and t:max():item() < 3)
    assert.is_true(math.abs(t:mean():item() - 0.5) < 0.05)
    nn.init.normal_(t, 1, 2)
    assert.is_true(math.abs(t:mean():item() - 1) < 0.05)
    local sd = math.sqrt(((t - 1) * (t - 1)):mean():item())
    assert.is_true(math.abs(sd - 2) < 0.05)
    nn.init.constant_(t, 7)
    assert.are.equal(7, t:min():item())
    assert.are.equal(0, nn.init.zeros_(t):abs():max():item())
    assert.are.equal(1, nn.init.ones_(t):min():item())
  end)

  it("kaiming_uniform_ uses bound sqrt(6 / ((1 + a^2) fan_in))", function()
    ddp.manual_seed(7)
    local w = ddp.empty(64, 8, 3, 3)
    local fan_in = 8 * 9
    assert.are.equal(fan_in, nn.init.fan_in(w))
    nn.init.kaiming_uniform_(w)
    local bound = math.sqrt(6 / fan_in)
    assert.is_true(w:abs():max():item() <= bound + 1e-6)
    assert.is_true(w:abs():max():item() > 0.98 * bound)
    nn.init.kaiming_uniform_(w, math.sqrt(5))
    assert.is_true(w:abs():max():item() <= 1 / math.sqrt(fan_in) + 1e-6)
  end)
end)
