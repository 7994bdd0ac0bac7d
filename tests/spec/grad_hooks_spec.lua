-- t:register_hook (tensor_hooks.lua over dp_backward_watch): hooks on leaves and intermediate tensors change the
-- gradients as PyTorch's do (same values through an MLP, against torch 1.13), in registration order, removable;
-- a leaf whose gradient buffer backward would write directly (DDP's bucket views) still goes through its hook; a
-- DDP model of one rank gets its hooked gradients; errors inside hooks, wrong returns and re-entered backward are
-- named, and leave the next backward working.
local ddp = require "ddplua"
local R = require "helpers.ref"
local TR = require "helpers.torch_ref"
local nn, F, dist = ddp.nn, ddp.nn.F, ddp.distributed

local function f64(...) return ddp.randn({ ... }, { dtype = "float64" }) end

describe("gradient hooks", function()
  it("change gradients as PyTorch's, in order, and come off with remove()", function()
    ddp.manual_seed(21)
    local x, w1, w2 = f64(6, 4), f64(4, 5), f64(5, 2)
    local ref = TR.run([[
import torch
x = T['x'].clone().requires_grad_(); w1 = T['w1'].clone().requires_grad_(); w2 = T['w2'].clone().requires_grad_()
w1.register_hook(lambda g: g * 0.5)
w1.register_hook(lambda g: g + 1)
h = torch.relu(x @ w1)
h.register_hook(lambda g: g.clamp(-0.1, 0.1))
r = w2.register_hook(lambda g: g * 100)
r.remove()
y = torch.tanh(h @ w2).sum()
y.backward()
OUT['gx'], OUT['gw1'], OUT['gw2'] = x.grad, w1.grad, w2.grad
]], { x = x, w1 = w1, w2 = w2 })
    local xl, w1l, w2l = x:clone():requires_grad_(), w1:clone():requires_grad_(), w2:clone():requires_grad_()
    w1l:register_hook(function(g) return g * 0.5 end)
    w1l:register_hook(function(g) return g + 1 end)
    local h = xl:matmul(w1l):relu()
    h:register_hook(function(g) return g:clamp(-0.1, 0.1) end)
    local r = w2l:register_hook(function(g) return g * 100 end)
    r:remove()
    r:remove() -- twice: nothing more
    h:matmul(w2l):tanh():sum():backward()
    R.assert_close(xl.grad, R.from(ref.gx), 1e-12, 0, "x")
    R.assert_close(w1l.grad, R.from(ref.gw1), 1e-12, 0, "w1: both hooks, in order")
    R.assert_close(w2l.grad, R.from(ref.gw2), 1e-12, 0, "w2: the removed hook")
  end)

  it("see a leaf's whole gradient once, also where backward writes its buffer directly", function()
    local lin = nn.Linear(3, 2, { dtype = "float64" })
    ddp.core.keep_grad_buf(lin.weight, true)
    lin.weight.grad = ddp.zeros(2, 3, { dtype = "float64" })
    local calls = 0
    lin.weight:register_hook(function(g)
      calls = calls + 1
      return g * 0
    end)
    local x = f64(4, 3)
    -- the weight gets gradient from two uses; the hook sees their sum once
    local y = (lin(x) + F.linear(x, lin.weight)):sum()
    y:backward()
    assert.equal(1, calls)
    assert.equal(0, lin.weight.grad:abs():sum():item())
    assert.is_true(lin.bias.grad:abs():sum():item() > 0)
  end)

  it("name errors and leave the next backward working", function()
    local x = f64(3):requires_grad_()
    local h1 = x:register_hook(function() error("boom") end)
    R.assert_error(function() (x * 2):sum():backward() end, "gradient hook:")
    h1:remove()
    local h2 = x:register_hook(function(g) return g:sum() end)
    R.assert_error(function() (x * 2):sum():backward() end, "returned a float64 [] tensor for a float64 [3] gradient")
    h2:remove()
    local h3 = x:register_hook(function() return "x" end)
    R.assert_error(function() (x * 2):sum():backward() end, "must return nil or a tensor, got a string")
    h3:remove()
    local h4 = x:register_hook(function(g) (x * 3):sum():backward() end)
    R.assert_error(function() (x * 2):sum():backward() end, "called during backward (from a gradient hook or a custom Function")
    h4:remove()
    x.grad = nil
    ;(x * 2):sum():backward()
    R.assert_close(x.grad, R.from(ddp.full({ 3 }, 2, { dtype = "float64" })), 0, 0, "after the errors")
    R.assert_errors({
      { function() return f64(2):register_hook(function() end) end, "does not require gradient" },
      { function() return x:register_hook(5) end, "register_hook: expected a function, got number" },
    })
  end)

  it("keep with retain_grad the gradient PyTorch 1.13 keeps: before all hooks, or after all", function()
    -- 1.13 runs a tensor's Python hooks as one hook placed where the first was registered
    local ref = TR.run([[
import torch
w = torch.ones(2, dtype=torch.float64, requires_grad=True)
h = w * 2; h.retain_grad(); h.register_hook(lambda g: g * 3); h.sum().backward(); OUT['before'] = h.grad
h = w * 2; h.register_hook(lambda g: g * 3); h.retain_grad(); h.register_hook(lambda g: g + 1)
h.sum().backward(); OUT['between'] = h.grad; OUT['w'] = w.grad
]], {})
    local w = ddp.ones(2, { dtype = "float64" }):requires_grad_()
    local h = w * 2
    h:retain_grad()
    h:register_hook(function(g) return g * 3 end)
    h:sum():backward()
    R.assert_close(h.grad, R.from(ref.before), 0, 0, "retained before the hook")
    h = w * 2
    h:register_hook(function(g) return g * 3 end)
    h:retain_grad()
    h:retain_grad() -- a second call keeps the first place
    h:register_hook(function(g) return g + 1 end)
    h:sum():backward()
    R.assert_close(h.grad, R.from(ref.between), 0, 0, "retained after a hook: after every hook")
    R.assert_close(w.grad, R.from(ref.w), 0, 0, "w")
  end)

  it("let a loop retain and hook a tensor every step, past the 4096 watched at once", function()
    -- the tensors of steps already backwarded leave the tables at the next backward, not at a full collection
    -- (none runs here): this loop failed at step 4097 with "more than 4096 tensors retain their gradients"
    local w = f64(4):requires_grad_()
    local calls, h = 0, nil
    collectgarbage("stop")
    local ok, err = pcall(function()
      for _ = 1, 5000 do
        h = w * 2
        h:retain_grad()
        h:register_hook(function(g)
          calls = calls + 1
          return g * 3
        end)
        h:sum():backward()
      end
    end)
    collectgarbage("restart")
    assert.is_true(ok, tostring(err))
    assert.equal(5000, calls)
    R.assert_close(h.grad, R.from(ddp.ones(4, { dtype = "float64" })), 0, 0, "the last step's retained gradient")
    R.assert_close(w.grad, R.from(ddp.full({ 4 }, 5000 * 6, { dtype = "float64" })), 0, 0, "hooked, accumulated")
  end)

  it("run on a DDP model's parameters before its reducer takes the gradients", function()
    dist.init_process_group { backend = "cpu", init_method = "tcp://127.0.0.1:" .. dist.find_free_port(),
      world_size = 1, rank = 0 }
    ddp.manual_seed(7)
    local net = nn.Linear(4, 3)
    local model = dist.DistributedDataParallel(net)
    net.weight:register_hook(function(g) return g * 2 end)
    local x = ddp.randn(5, 4)
    F.mse_loss(model(x), ddp.zeros(5, 3)):backward()
    local got = net.weight.grad:clone()
    -- the same without DDP and without the hook, doubled
    local plain = nn.Linear(4, 3)
    plain:load_state_dict(net:state_dict())
    F.mse_loss(plain(x), ddp.zeros(5, 3)):backward()
    dist.destroy_process_group()
    R.assert_close(got, R.from(plain.weight.grad * 2), 1e-6, 1e-6, "hooked DDP gradient")
  end)
end)
