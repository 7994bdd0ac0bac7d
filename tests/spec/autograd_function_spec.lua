-- ddp.autograd.Function (autograd.lua over src/lua/l_autograd_fn.c): custom ops with Lua forward and backward,
-- against the same torch.autograd.Function in PyTorch 1.13: two tensor inputs and a number, two results, saved
-- tensors, needs_input_grad, a result without gradient (zeros given, as materialize_grads), retain_graph
-- accumulating, the op inside autograd.grad and beside ordinary ops; no node under no_grad or without inputs that
-- require grad; an input handed back comes back as a new tensor; errors from backward named, with the op.
local ddp = require "ddplua"
local R = require "helpers.ref"
local TR = require "helpers.torch_ref"

local function f64(...) return ddp.randn({ ... }, { dtype = "float64" }) end

-- y1 = a * b * s, y2 = exp(a); backward by hand
local MulExp = ddp.autograd.Function:extend("MulExp")
function MulExp.forward(ctx, a, b, s)
  ctx:save_for_backward(a, b)
  ctx.s = s
  local e = a:exp()
  ctx.e = e
  return a * b * s, e
end
function MulExp.backward(ctx, g1, g2)
  local a, b = table.unpack(ctx.saved_tensors)
  local ga = ctx.needs_input_grad[1] and (g1 * b * ctx.s + g2 * ctx.e) or nil
  local gb = ctx.needs_input_grad[2] and g1 * a * ctx.s or nil
  return ga, gb, nil
end

describe("autograd.Function", function()
  it("gives the gradients of the same Function in PyTorch", function()
    ddp.manual_seed(51)
    local a, b, w = f64(3, 4), f64(3, 4), f64(3, 4)
    local ref = TR.run([[
import torch
class MulExp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b, s):
        ctx.save_for_backward(a, b); ctx.s = s; ctx.e = a.exp()
        return a * b * s, ctx.e
    @staticmethod
    def backward(ctx, g1, g2):
        a, b = ctx.saved_tensors
        return g1 * b * ctx.s + g2 * ctx.e, g1 * a * ctx.s, None
a = T['a'].clone().requires_grad_(); b = T['b'].clone().requires_grad_()
y1, y2 = MulExp.apply(a, b, 1.5)
((y1 * T['w']).sum() + y2.sin().sum()).backward(retain_graph=True)
OUT['ga1'], OUT['gb1'] = a.grad.clone(), b.grad.clone()
(y1 * T['w']).sum().backward()
OUT['ga2'], OUT['gb2'], OUT['y1'], OUT['y2'] = a.grad, b.grad, y1, y2
]], { a = a, b = b, w = w })
    local al, bl = a:clone():requires_grad_(), b:clone():requires_grad_()
    local y1, y2 = MulExp.apply(al, bl, 1.5)
    assert.equal("MulExpBackward", y1.grad_fn)
    R.assert_close(y1, R.from(ref.y1), 1e-12, 1e-12, "y1")
    R.assert_close(y2, R.from(ref.y2), 1e-12, 1e-12, "y2")
    ;((y1 * w):sum() + y2:sin():sum()):backward({ retain_graph = true })
    R.assert_close(al.grad, R.from(ref.ga1), 1e-12, 1e-12, "a")
    R.assert_close(bl.grad, R.from(ref.gb1), 1e-12, 1e-12, "b")
    ;(y1 * w):sum():backward() -- y2 unused: its gradient comes as zeros
    R.assert_close(al.grad, R.from(ref.ga2), 1e-12, 1e-12, "a accumulated")
    R.assert_close(bl.grad, R.from(ref.gb2), 1e-12, 1e-12, "b accumulated")
    R.assert_error(function() (y1 * w):sum():backward() end, "backward of MulExpBackward: trying to backward")
  end)

  it("works inside autograd.grad, with one input requiring grad, and not under no_grad", function()
    local a, b = f64(4):requires_grad_(), f64(4)
    local y1 = MulExp.apply(a, b, 2)
    local g = ddp.autograd.grad(y1:sum(), a)[1]
    R.assert_close(g, R.from(b * 2), 0, 0, "d(sum 2ab)/da")
    local z = ddp.no_grad(function() return (MulExp.apply(a, b, 2)) end)
    assert.is_false(z.requires_grad)
    assert.is_nil(z.grad_fn)
    -- an input handed back is a new tensor; the input keeps no history
    local Id = ddp.autograd.Function:extend("Id")
    function Id.forward(_, x) return x end
    function Id.backward(_, g2) return g2 * 3 end
    local y = Id.apply(a)
    assert.is_false(rawequal(y, a))
    assert.is_true(a.is_leaf)
    y:sum():backward()
    R.assert_close(a.grad, R.from(ddp.full({ 4 }, 3, { dtype = "float64" })), 0, 0, "3")
  end)

  it("names errors from backward", function()
    local x = f64(3):requires_grad_()
    local function fn(bwd)
      local C = ddp.autograd.Function:extend("Bad")
      function C.forward(_, t) return t * 2 end
      C.backward = bwd
      return C
    end
    R.assert_error(function() fn(function() return ddp.zeros(2):double() end).apply(x):sum():backward() end,
      "BadBackward: backward returned a float64 [2] gradient for input 1")
    R.assert_error(function() fn(function() return "g" end).apply(x):sum():backward() end,
      "returned a string for input 1")
    R.assert_error(function() fn(function() error("boom") end).apply(x):sum():backward() end, "BadBackward:")
    R.assert_error(function() fn(function() (x * 2):sum():backward() end).apply(x):sum():backward() end,
      "called during backward (from a gradient hook or a custom Function")
    local NoBwd = ddp.autograd.Function:extend("NoBwd")
    function NoBwd.forward(_, t) return t end
    R.assert_error(function() NoBwd.apply(x) end, "must define forward(ctx, ...) and backward(ctx, ...)")
    R.assert_error(function() ddp.autograd.Function:extend(5) end, "the name must be a string")
    local S = ddp.autograd.Function:extend("S")
    function S.forward(ctx, t) ctx:save_for_backward(t, 3) return t end
    function S.backward(_, g) return g end
    R.assert_error(function() S.apply(x) end, "save_for_backward: argument 2 is a number")
    -- and the next backward works
    x.grad = nil
    ;(x * 2):sum():backward()
    R.assert_close(x.grad, R.from(ddp.full({ 3 }, 2, { dtype = "float64" })), 0, 0, "after the errors")
  end)
end)
