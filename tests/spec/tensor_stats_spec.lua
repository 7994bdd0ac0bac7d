-- cov, corrcoef, trapezoid / trapz / cumulative_trapezoid, isin, diagflat, vander, combinations, lgamma, digamma,
-- float_power and normal (lua/ddplua/tensor_stats.lua) against PyTorch on the same values (gradients included),
-- normal's moments, and the errors.
local ddp = require "ddplua"
local R = require "helpers.ref"
local TR = require "helpers.torch_ref"
local gc = require "helpers.gradcheck"

describe("statistics and special functions", function()
  it("match PyTorch, gradients included", function()
    if not TR.available() then return pending("skipped: /usr/bin/python3 cannot import torch") end
    local x = R.randn({ 3, 8 }, 1):requires_grad_()
    local y = R.randn({ 4, 6 }, 2):requires_grad_()
    local sx = R.uniform({ 6 }, 0, 5, 3):cumsum(1)
    local fw, aw = R.uniform({ 8 }, 0, 4, 4):long(), R.uniform({ 8 }, 0.1, 2, 5)
    local g = ddp.cat({ R.uniform({ 40 }, 0.01, 30, 6), R.uniform({ 20 }, -9.9, -0.1, 7) }):requires_grad_()
    local ints = R.uniform({ 30 }, 0, 12, 8):long()
    local outs = {
      cov = ddp.cov(x), cov0 = ddp.cov(x, { correction = 0 }),
      cov1 = ddp.cov(x[1]), corr = ddp.corrcoef(x), trap = ddp.trapezoid(y), trapx = ddp.trapz(y, sx),
      trapd = ddp.trapezoid(y, { dx = 0.5, dim = 1 }), ctrap = ddp.cumulative_trapezoid(y, sx),
      ctrapx = ddp.cumulative_trapezoid(y, y:detach():abs():cumsum(2)), lg = g:lgamma(), dg = g:digamma(),
      fp = ddp.float_power(x, 2.5), diagf = ddp.diagflat(x:narrow(1, 1, 1), 1),
      comb = ddp.combinations(x[3]:narrow(1, 1, 5), 3),
    }
    -- (PyTorch 1.13's vander and weighted cov fail in their own backward: values only)
    local masks = { vand = ddp.vander(x[2]:detach()), vandi = ddp.vander(x[2]:detach(), { N = 3, increasing = true }),
      covw = ddp.cov(x:detach(), { fweights = fw, aweights = aw }), isin = ddp.isin(ints, ddp.tensor({ 3, 5, 11, 40 })):long(),
      notin = ints:isin(ddp.tensor({ 3, 5 }), { invert = true }):long(), combr = ddp.combinations(ddp.arange(4), 2, true),
      isinf = ddp.isin(ddp.tensor({ 1.5, 0 / 0, 2 }), ddp.tensor({ 2.0, 0 / 0 })):long() }
    local total = 0
    local inputs = { x = x, y = y, sx = sx, fw = fw, aw = aw, g = g, ints = ints }
    for k, o in pairs(outs) do
      local w = R.randn(o:size(), 30)
      inputs["w_" .. k] = w
      total = total + (o * w:to(o:dtype())):sum()
    end
    total:backward()
    local ref = TR.run([[
x, y, g = T["x"].requires_grad_(), T["y"].requires_grad_(), T["g"].requires_grad_()
sx, fw, aw, ints = T["sx"], T["fw"], T["aw"], T["ints"]
outs = dict(cov=torch.cov(x), cov0=torch.cov(x, correction=0),
  cov1=torch.cov(x[0]), corr=torch.corrcoef(x), trap=torch.trapezoid(y), trapx=torch.trapz(y, sx),
  trapd=torch.trapezoid(y, dx=0.5, dim=0), ctrap=torch.cumulative_trapezoid(y, sx),
  ctrapx=torch.cumulative_trapezoid(y, y.detach().abs().cumsum(1)), lg=g.lgamma(), dg=g.digamma(),
  fp=torch.float_power(x, 2.5), diagf=torch.diagflat(x[0:1], 1), comb=torch.combinations(x[2][:5], 3))
total = 0
for k in outs:
    total = total + (outs[k] * T["w_" + k].to(outs[k].dtype)).sum()
    OUT[k] = outs[k].detach()
total.backward()
OUT.update(gx=x.grad, gy=y.grad, gg=g.grad)
OUT.update(vand=torch.vander(x[1].detach()), vandi=torch.vander(x[1].detach(), N=3, increasing=True), covw=torch.cov(x.detach(), fweights=fw, aweights=aw), isin=torch.isin(ints, torch.tensor([3, 5, 11, 40])).long(),
  notin=torch.isin(ints, torch.tensor([3, 5]), invert=True).long(), combr=torch.combinations(torch.arange(4), 2, True) + 0,
  isinf=torch.isin(torch.tensor([1.5, float("nan"), 2]), torch.tensor([2.0, float("nan")])).long())
]], inputs)
    for k, o in pairs(outs) do R.assert_close(o, R.from(ref[k]), 1e-11, 1e-11, k) end
    R.assert_close(x.grad, R.from(ref.gx), 1e-10, 1e-10, "x gradient")
    R.assert_close(y.grad, R.from(ref.gy), 1e-10, 1e-10, "y gradient")
    R.assert_close(g.grad, R.from(ref.gg), 1e-9, 1e-9, "lgamma / digamma gradient")
    for k, o in pairs(masks) do R.assert_close(o, R.from(ref[k]), 1e-12, 1e-12, k) end
  end)

  it("lgamma and digamma in float32 round the float64 values; their poles", function()
    local v = R.uniform({ 200 }, -20, 40, 9)
    local l32, d32 = v:float():lgamma(), v:float():digamma()
    local l64, d64 = v:float():double():lgamma(), v:float():double():digamma()
    R.assert_close(l32, R.from(l64:float()), 0, 0, "lgamma float32")
    R.assert_close(d32, R.from(d64:float()), 0, 0, "digamma float32")
    local p = ddp.tensor({ 0, -1, -2, 1, 2 }, { dtype = "float64" })
    local lp, dp = p:lgamma(), p:digamma()
    local lv = gc.flat_values(lp)
    assert(lv[1] == math.huge and lv[2] == math.huge and lv[3] == math.huge, "lgamma: inf at 0, -1, -2")
    assert(math.abs(lv[4]) < 1e-15 and math.abs(lv[5]) < 1e-15, "lgamma(1) = lgamma(2) = 0")
    local dv = gc.flat_values(dp)
    assert(dv[1] == -math.huge and dv[2] ~= dv[2] and dv[3] ~= dv[3], "digamma: -inf at 0, NaN at -1 and -2")
    assert(math.abs(dv[4] + 0.5772156649015329) < 1e-13, "digamma(1) = -Euler's gamma")
  end)

  it("draws normal values with the asked means and spreads, gradients to both", function()
    ddp.manual_seed(3)
    local m = ddp.full({ 20000 }, 2.0, { dtype = "float64" }):requires_grad_()
    local s = ddp.full({ 20000 }, 3.0, { dtype = "float64" }):requires_grad_()
    local z = ddp.normal(m, s)
    assert(math.abs(z:mean():item() - 2) < 0.1 and math.abs(z:std():item() - 3) < 0.1, "moments")
    z:sum():backward()
    R.assert_close(m.grad, R.from(ddp.ones(20000, { dtype = "float64" })), 0, 0, "mean's gradient")
    assert.are.same({ 2, 3 }, ddp.normal(0, 1, { 2, 3 }):size())
    assert.are.same({ 4 }, ddp.normal(ddp.zeros(4), 0.5):size())
  end)

  it("names the argument and what was expected on bad input", function()
    R.assert_error(function() ddp.cov(ddp.zeros(2, 2, 2)) end, "cov: expected a 1-D or 2-D tensor")
    R.assert_error(function() ddp.cov(ddp.zeros(2, 3), { fweights = ddp.ones(3) }) end, "fweights must be integers")
    R.assert_error(function() ddp.cov(ddp.zeros(2, 3), { aweights = ddp.ones(2) }) end, "one weight per observation (3)")
    R.assert_error(function() ddp.cov(ddp.zeros(2, 3), { aweights = -ddp.ones(3) }) end, "must be non-negative")
    R.assert_error(function() ddp.trapezoid(ddp.zeros(3), ddp.zeros(3), { dx = 1 }) end, "not both")
    R.assert_error(function() ddp.trapezoid(ddp.zeros(3), ddp.zeros(4)) end, "x must have y's 3 values")
    R.assert_error(function() ddp.trapezoid(ddp.tensor(1.0)) end, "at least a 1-dimensional tensor")
    R.assert_error(function() ddp.isin(ddp.zeros(2), "a") end, "test_elements must be a tensor or a number")
    R.assert_error(function() ddp.vander(ddp.zeros(2, 2)) end, "vander: expected a 1-D tensor")
    R.assert_error(function() ddp.combinations(ddp.zeros(3), -1) end, "r must be a non-negative integer")
    R.assert_error(function() ddp.normal(0, -1, { 2 }) end, "normal: std must be >= 0")
    R.assert_error(function() ddp.normal(0, 1) end, "give the size")
    R.assert_error(function() ddp.float_power(2, 3) end, "float_power: expected at least one tensor")
  end)
end)
