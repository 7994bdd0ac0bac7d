-- nn.init (lua/ddplua/nn/initializers.lua): PyTorch's gains and fans (compared with torch.nn.init's own), the
-- distributions each initialiser draws from (bounds, moments over 2^16 draws against their formulas, the truncated
-- normal's moments from erf), orthogonality, eye_, reproducibility under ddp.manual_seed, positional and named
-- settings, and bad arguments.
local ddp = require "ddplua"
local R = require "helpers.ref"
local TR = require "helpers.torch_ref"
local init = ddp.nn.init

local function moments(t)
  local d = t:double()
  return d:mean():item(), d:std():item()
end

-- |a - b| <= rel * |b|
local function near(a, b, rel, what)
  assert(math.abs(a - b) <= rel * math.abs(b), string.format("%s: %.6g, expected %.6g (within %g)", what, a, b, rel))
end

describe("nn.init", function()
  it("has PyTorch's gains and fans", function()
    if not TR.available() then return pending("skipped: /usr/bin/python3 cannot import torch") end
    local names = { "linear", "conv2d", "sigmoid", "tanh", "relu", "selu", "leaky_relu" }
    local shapes = { { 5, 3 }, { 8, 4, 3, 3 }, { 2, 6, 5 }, { 7, 1, 1, 1 } }
    local py = { "import torch.nn.init as I" }
    for i, n in ipairs(names) do py[#py + 1] = string.format("OUT['g%d'] = torch.tensor(I.calculate_gain('%s'), dtype=torch.float64)", i, n) end
    py[#py + 1] = "OUT['lr'] = torch.tensor(I.calculate_gain('leaky_relu', 0.2), dtype=torch.float64)"
    for i, s in ipairs(shapes) do
      py[#py + 1] = string.format("OUT['f%d'] = torch.tensor(I._calculate_fan_in_and_fan_out(torch.empty(%s)))", i,
        table.concat(s, ", "))
    end
    local ref = TR.run(table.concat(py, "\n") .. "\n", {})
    for i, n in ipairs(names) do near(init.calculate_gain(n), ref["g" .. i]:item(), 1e-12, "gain " .. n) end
    near(init.calculate_gain("leaky_relu", 0.2), ref.lr:item(), 1e-12, "gain leaky_relu 0.2")
    for i, s in ipairs(shapes) do
      local t = ddp.empty(s)
      assert.are.same(ref["f" .. i]:totable(), { init.fan_in(t), init.fan_out(t) })
    end
  end)

  it("draws from each distribution its formula gives", function()
    ddp.manual_seed(3)
    local w = ddp.empty(256, 256) -- fan_in = fan_out = 256
    local a = math.sqrt(6 / 512)
    init.xavier_uniform_(w)
    local m, s = moments(w)
    assert.is_true(w:abs():max():item() <= a)
    near(s, a / math.sqrt(3), 0.02, "xavier_uniform_ std")
    assert.is_true(math.abs(m) < 0.01 * a)
    init.xavier_normal_(w, { gain = 2 })
    near(select(2, moments(w)), 2 * math.sqrt(2 / 512), 0.02, "xavier_normal_ std")
    local c = ddp.empty(64, 16, 3, 3) -- fan_in 144, fan_out 576
    init.kaiming_normal_(c, 0, "fan_out", "relu")
    near(select(2, moments(c)), math.sqrt(2) / math.sqrt(576), 0.02, "kaiming_normal_ fan_out relu std")
    init.kaiming_uniform_(c, { a = math.sqrt(5) })
    assert.is_true(c:abs():max():item() <= 1 / math.sqrt(144) + 1e-7)
    near(select(2, moments(c)), 1 / math.sqrt(144) / math.sqrt(3), 0.02, "kaiming_uniform_ std")
    init.kaiming_uniform_(c, 0, "fan_in", "tanh")
    assert.is_true(c:abs():max():item() <= math.sqrt(3) * (5 / 3) / 12 + 1e-7)
    init.uniform_(w, -3, -1)
    assert.is_true(w:max():item() <= -1 and w:min():item() >= -3)
    init.normal_(w, { mean = 5, std = 0.5 })
    m, s = moments(w)
    near(m, 5, 0.002, "normal_ mean")
    near(s, 0.5, 0.02, "normal_ std")
  end)

  it("truncates the normal with its moments", function()
    ddp.manual_seed(4)
    local t = ddp.empty(65536)
    local mean, std, a, b = 1, 2, 0, 5
    init.trunc_normal_(t, mean, std, a, b)
    assert.is_true(t:min():item() >= a and t:max():item() <= b)
    -- the truncated normal's mean and variance from the standard normal's pdf and cdf at alpha, beta
    local al, be = (a - mean) / std, (b - mean) / std
    local function pdf(x) return math.exp(-x * x / 2) / math.sqrt(2 * math.pi) end
    local function cdf(x) return 0.5 * (1 + R.erf(x / math.sqrt(2))) end
    local Z = cdf(be) - cdf(al)
    local tm = mean + std * (pdf(al) - pdf(be)) / Z
    local tv = std * std * (1 + (al * pdf(al) - be * pdf(be)) / Z - ((pdf(al) - pdf(be)) / Z) ^ 2)
    local m, s = moments(t)
    near(m, tm, 0.01, "trunc_normal_ mean")
    near(s, math.sqrt(tv), 0.02, "trunc_normal_ std")
  end)

  it("makes orthogonal matrices (wide, tall, 4-D) and the identity", function()
    ddp.manual_seed(5)
    for _, shape in ipairs({ { 20, 50 }, { 50, 20 }, { 6, 2, 2, 2 } }) do
      local q = init.orthogonal_(ddp.empty(shape), 3):reshape(shape[1], -1):double()
      local g = shape[1] <= q:size(2) and q:matmul(q:t()) or q:t():matmul(q)
      local n = g:size(1)
      local eye = ddp.zeros(n, n, { dtype = "float64" })
      init.eye_(eye)
      R.assert_close(g, R.from(eye * 9), 1e-5, 0, "orthogonal_ " .. table.concat(shape, "x"))
    end
    local e = init.eye_(ddp.full({ 2, 3 }, 7))
    assert.are.same({ { 1, 0, 0 }, { 0, 1, 0 } }, e:totable())
    assert.are.same({ { 1, 0 }, { 0, 1 }, { 0, 0 } }, init.eye_(ddp.empty(3, 2)):totable())
  end)

  it("is reproducible under manual_seed, and takes settings by position or by name", function()
    local function draw(f)
      ddp.manual_seed(9)
      return f(ddp.empty(16, 8))
    end
    assert.is_true(draw(function(t) return init.kaiming_normal_(t, 0, "fan_out", "relu") end)
      :equal(draw(function(t) return init.kaiming_normal_(t, { mode = "fan_out", nonlinearity = "relu" }) end)))
    assert.is_true(draw(function(t) return init.xavier_uniform_(t, 2) end)
      :equal(draw(function(t) return init.xavier_uniform_(t, { gain = 2 }) end)))
    assert.is_false(draw(function(t) return init.xavier_uniform_(t) end)
      :equal(draw(function(t) return init.xavier_uniform_(t, 2) end)))
  end)

  it("refuses bad arguments, naming the initialiser", function()
    R.assert_error(function() init.xavier_uniform_(ddp.empty(5)) end, "xavier_uniform_", "fewer than 2 dimensions")
    R.assert_error(function() init.kaiming_normal_(ddp.empty(3, 3), { mode = "fan_avg" }) end, "mode must be")
    R.assert_error(function() init.kaiming_uniform_(ddp.empty(3, 3), 0, "fan_in", "swish") end,
      "unsupported nonlinearity swish")
    R.assert_error(function() init.trunc_normal_(ddp.empty(3), 0, 1, 2, 1) end, "expected a < b")
    R.assert_error(function() init.trunc_normal_(ddp.empty(3), 0, 1, 10, 11) end, "more than 6 std")
    R.assert_error(function() init.eye_(ddp.empty(2, 2, 2)) end, "eye_", "only 2-D")
    R.assert_error(function() init.normal_(ddp.empty(2, { dtype = "int64" })) end, "floating-point", "int64")
    R.assert_error(function() init.xavier_normal_(ddp.empty(2, 2), { gian = 1 }) end, "unknown option 'gian'")
    R.assert_error(function() init.uniform_("w") end, "uniform_", "expected a tensor")
    -- PyTorch: "uniform_ expects to return a [from, to) range", "normal expects std >= 0.0"
    R.assert_error(function() init.uniform_(ddp.empty(3), 3, 1) end, "uniform_: expects from <= to")
    R.assert_error(function() init.normal_(ddp.empty(3), 0, -1) end, "normal_: std must be >= 0")
  end)

  -- uniform_ and normal_ draw into the tensor (the tensor methods' in-place path): the values of the tensor
  -- formula rand * (b - a) + a, a parameter stays a leaf that requires grad, a view is filled in place
  it("fills parameters and views in place with the formula's values", function()
    local lin = ddp.nn.Linear(33, 17)
    ddp.manual_seed(21)
    init.uniform_(lin.weight, -0.5, 0.25)
    init.normal_(lin.bias, 1, 0.1)
    ddp.manual_seed(21)
    local w = ddp.rand(17, 33) * 0.75 - 0.5
    local b = ddp.randn(17) * 0.1 + 1
    assert.are.equal(0, lin.weight:detach():ne(w):sum():item())
    assert.are.equal(0, lin.bias:detach():ne(b):sum():item())
    assert.is_true(lin.weight.requires_grad and lin.weight.is_leaf)
    local m = ddp.zeros(4, 6)
    init.uniform_(m:narrow(2, 2, 3), 1, 2)
    assert.are.equal(0, m:narrow(2, 1, 1):abs():sum():item() + m:narrow(2, 5, 2):abs():sum():item())
    assert.is_true(m:narrow(2, 2, 3):min():item() >= 1)
  end)
end)
