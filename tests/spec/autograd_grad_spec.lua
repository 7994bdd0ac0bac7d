-- ddp.autograd.grad (torch.autograd.grad without create_graph): gradients of several outputs with respect to
-- leaves and to tensors computed from them, against PyTorch's torch.autograd.grad and against backward's .grad;
-- no tensor's .grad is touched (not even a kept gradient buffer that linear's backward writes into directly, DDP's
-- bucket views); retain_graph, allow_unused, grad_outputs with nil for one-element outputs, an output used as an
-- input, one input twice; every bad argument named. And t:retain_grad(): intermediate gradients (a view's too) in
-- .grad after backward, accumulating over backward calls, against PyTorch's retain_grad.
local ddp = require "ddplua"
local R = require "helpers.ref"
local TR = require "helpers.torch_ref"
local F = ddp.nn.F

local function f64(...) return ddp.randn({ ... }, { dtype = "float64" }) end

describe("autograd.grad", function()
  it("gives PyTorch's gradients for leaves and intermediate tensors, several outputs", function()
    ddp.manual_seed(3)
    local x, w, b, gy = f64(5, 4), f64(4, 3), f64(3), f64(5, 3)
    local ref = TR.run([[
import torch
x = T['x'].clone().requires_grad_(); w = T['w'].clone().requires_grad_(); b = T['b'].clone().requires_grad_()
h = x @ w + b
y = torch.tanh(h)
z = (h * h).sum()
xv = x.view(20)
u = (xv * 2).sum()
g = torch.autograd.grad([y, z, u], [x, w, h, b], grad_outputs=[T['gy'], None, None], retain_graph=True)
OUT['gx'], OUT['gw'], OUT['gh'], OUT['gb'] = g
OUT['gxv'], = torch.autograd.grad(u, [xv])
]], { x = x, w = w, b = b, gy = gy })
    x, w, b = x:requires_grad_(), w:requires_grad_(), b:requires_grad_()
    local h = x:matmul(w) + b
    local y = h:tanh()
    local z = (h * h):sum()
    local xv = x:view(20)
    local u = (xv * 2):sum()
    local g = ddp.autograd.grad({ y, z, u }, { x, w, h, b }, { gy, nil, nil }, { retain_graph = true })
    R.assert_close(g[1], R.from(ref.gx), 1e-12, 1e-12, "x")
    R.assert_close(g[2], R.from(ref.gw), 1e-12, 1e-12, "w")
    R.assert_close(g[3], R.from(ref.gh), 1e-12, 1e-12, "h (not a leaf)")
    R.assert_close(g[4], R.from(ref.gb), 1e-12, 1e-12, "b (broadcast)")
    R.assert_close(ddp.autograd.grad(u, xv)[1], R.from(ref.gxv), 0, 0, "a view of x")
    assert.is_nil(x.grad)
    assert.is_nil(w.grad)
  end)

  it("matches backward's .grad and leaves every .grad as it was", function()
    ddp.manual_seed(4)
    local lin = ddp.nn.Linear(6, 3, { dtype = "float64" })
    local x = f64(8, 6):requires_grad_()
    -- a kept gradient buffer (DDP's bucket view): linear's backward writes such a buffer directly when it may
    ddp.core.keep_grad_buf(lin.weight, true)
    lin.weight.grad = ddp.zeros(3, 6, { dtype = "float64" })
    local loss = F.mse_loss(lin(x), f64(8, 3))
    local g = ddp.autograd.grad(loss, { lin.weight, lin.bias, x }, { retain_graph = true })
    assert.equal(0, lin.weight.grad:abs():sum():item())
    assert.is_nil(lin.bias.grad)
    assert.is_nil(x.grad)
    loss:backward()
    R.assert_close(g[1], R.from(lin.weight.grad), 0, 0, "weight")
    R.assert_close(g[2], R.from(lin.bias.grad), 0, 0, "bias")
    R.assert_close(g[3], R.from(x.grad), 0, 0, "x")
  end)

  it("frees the graph unless retain_graph, and takes an output as its own input", function()
    local x = f64(3):requires_grad_()
    local y = (x * x):sum()
    local g = ddp.autograd.grad(y, { y, x })
    assert.equal(1, g[1]:item())
    R.assert_close(g[2], R.from(x:detach() * 2), 0, 0, "2x")
    R.assert_error(function() ddp.autograd.grad(y, x) end, "second time")
    -- the same input twice: each entry has the whole gradient
    local z = (x * 3):sum()
    local g2 = ddp.autograd.grad(z, { x, x })
    R.assert_close(g2[1], R.from(ddp.full({ 3 }, 3, { dtype = "float64" })), 0, 0, "first")
    R.assert_close(g2[2], R.from(ddp.full({ 3 }, 3, { dtype = "float64" })), 0, 0, "second")
  end)

  it("gives nil for an unused input with allow_unused, an error without", function()
    local x, v = f64(3):requires_grad_(), f64(2):requires_grad_()
    local y = x:exp():sum()
    local g = ddp.autograd.grad(y, { v, x }, { allow_unused = true, retain_graph = true })
    assert.is_nil(g[1])
    R.assert_close(g[2], R.from(x:detach():exp()), 0, 0, "exp")
    R.assert_error(function() ddp.autograd.grad(y, { x, v }) end,
      "autograd.grad: input 2 is not used in the graph of the outputs")
  end)

  it("names bad arguments", function()
    local x = f64(3):requires_grad_()
    local y = x * 2
    R.assert_errors({
      { function() return ddp.autograd.grad(y:sum(), x, { create_graph = true }) end, "create_graph = true" },
      { function() return ddp.autograd.grad(y, x) end, "grad can be implicitly created only for scalar outputs" },
      { function() return ddp.autograd.grad(y, x, f64(4)) end, "gradient shape [4] does not match" },
      { function() return ddp.autograd.grad(y:sum(), f64(3)) end, "input 1 does not require grad" },
      { function() return ddp.autograd.grad(f64(1):sum(), x) end, "output 1: the tensor does not require grad" },
      { function() return ddp.autograd.grad(y:sum(), { x, "w" }) end, "inputs[2] is a string" },
      { function() return ddp.autograd.grad("y", x) end, "outputs must be a tensor or a list" },
      { function() return ddp.autograd.grad({ y:sum(), nil, y:sum() }, x) end, "outputs[2] is nil" },
      { function() return ddp.autograd.grad(y:sum(), x, { retain = true }) end, "unknown option 'retain'" },
      { function() return ddp.autograd.grad(y:sum(), x, { f64(1), f64(1) }) end, "2 grad_outputs for 1 outputs" },
      { function() return ddp.autograd.grad(y:sum(), x, ddp.ones(1), { grad_outputs = ddp.ones(1) }) end,
        "grad_outputs given twice" },
      { function() return ddp.core._autograd_grad({ y }, { x }, { f64(3), f64(3) }) end,
        "more grad_outputs than the 1 outputs" },
      { function() return ddp.core._autograd_grad({}, { 1 }) end, "inputs[1] is a number" },
    })
    -- grad_outputs in third place starting with nil (a one-element output) are not read as options
    local g3 = ddp.autograd.grad({ y:sum(), y }, x, { nil, ddp.full({ 3 }, 0.5, { dtype = "float64" }) },
      { retain_graph = true })
    R.assert_close(g3[1], R.from(ddp.full({ 3 }, 3, { dtype = "float64" })), 0, 0, "2 + 2 * 0.5")
    -- no outputs: nothing flows, so every input is unused
    assert.same({}, ddp.autograd.grad({}, x, { allow_unused = true }))
  end)

  it("retain_grad keeps intermediate gradients as PyTorch's, accumulating", function()
    ddp.manual_seed(5)
    local x, w = f64(4, 3), f64(3, 2)
    local ref = TR.run([[
import torch
x = T['x'].clone().requires_grad_(); w = T['w'].clone().requires_grad_()
h = x @ w; h.retain_grad()
a = torch.sigmoid(h); a.retain_grad()
v = a.view(8); v.retain_grad()
y = (v * v).sum()
y.backward(retain_graph=True)
OUT['h1'], OUT['a1'], OUT['v1'] = h.grad.clone(), a.grad.clone(), v.grad.clone()
y.backward()
OUT['h2'], OUT['gw'] = h.grad, w.grad
]], { x = x, w = w })
    local xl, wl = x:clone():requires_grad_(), w:clone():requires_grad_()
    local h = xl:matmul(wl)
    assert.equal(h, h:retain_grad()) -- returns the tensor
    local a = h:sigmoid()
    a:retain_grad()
    local v = a:view(8)
    v:retain_grad()
    assert.is_true(h.retains_grad)
    assert.is_false(xl.retains_grad)
    local y = (v * v):sum()
    y:backward({ retain_graph = true })
    R.assert_close(h.grad, R.from(ref.h1), 1e-12, 0, "h")
    R.assert_close(a.grad, R.from(ref.a1), 1e-12, 0, "a")
    R.assert_close(v.grad, R.from(ref.v1), 1e-12, 0, "a view")
    y:backward()
    R.assert_close(h.grad, R.from(ref.h2), 1e-12, 0, "h accumulated")
    R.assert_close(wl.grad, R.from(ref.gw), 1e-12, 0, "w")
    -- a leaf: nothing changes; a tensor without requires_grad: an error; a tensor not retained: no .grad
    assert.equal(xl, xl:retain_grad())
    R.assert_error(function() f64(2):retain_grad() end, "retain_grad: the tensor does not require grad")
    local z = xl * 3
    z:sum():backward()
    assert.is_nil(z.grad)
  end)
end)
