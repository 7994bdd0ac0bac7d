-- nn.Module and nn.Sequential: registration, names, traversal, modes,
-- devices/dtypes, zero_grad, state dicts, printing, errors.
local ddp = require "ddplua"
local nn = ddp.nn

local function names_of(iter)
  local out = {}
  for n in iter do out[#out + 1] = n end
  return out
end

-- A custom model as a user writes one. (The batch norm layer is there for
-- its buffers and names; forward leaves it out so that this spec needs only
-- the linear ops.)
local Net = nn.Module:extend("Net")
function Net:__init(hidden)
  self.fc1 = nn.Linear(4, hidden)
  self.bn = nn.BatchNorm1d(hidden)
  self.fc2 = nn.Linear(hidden, 3)
  self.scale = 2 -- a plain field: not registered
end
function Net:forward(x) return self.fc2(self.fc1(x):relu()) end

describe("nn.Module", function()
  it("registers parameters, buffers and submodules by name in order (PyTorch's dotted names)", function()
    local seq = nn.Sequential { nn.Linear(3, 5), nn.ReLU(), nn.Linear(5, 2) }
    assert.are.same({ "0.weight", "0.bias", "2.weight", "2.bias" }, names_of(seq:named_parameters()))
    local net = Net(6)
    assert.are.same({ "fc1.weight", "fc1.bias", "bn.weight", "bn.bias", "fc2.weight", "fc2.bias" },
      names_of(net:named_parameters()))
    assert.are.same({ "bn.running_mean", "bn.running_var", "bn.num_batches_tracked" }, names_of(net:named_buffers()))
    assert.are.same({ "fc1", "bn", "fc2" }, names_of(net:named_children()))
    assert.are.same({ "", "fc1", "bn", "fc2" }, names_of(net:named_modules()))
    assert.are.equal(6, #net:parameters())
    assert.are.equal(3, #net:buffers())
    assert.are.equal(3, #net:children())
    assert.are.equal(4, #net:modules())
    assert.are.equal(net.fc1.weight, net:parameters()[1])
    assert.are.equal(2, net.scale)
  end)

  it("registers a leaf tensor that requires grad assigned to a field as a parameter", function()
    local M = nn.Module:extend("M")
    function M:__init()
      self.w = ddp.ones(2):requires_grad_()
      self.plain = ddp.zeros(2) -- a plain tensor field is not a parameter
      self:register_buffer("stat", ddp.zeros(1))
    end
    local m = M()
    assert.are.same({ "w" }, names_of(m:named_parameters()))
    assert.are.same({ "stat" }, names_of(m:named_buffers()))
  end)

  it("keeps a non-persistent buffer out of state_dict but moves and lists it (persistent=False)", function()
    local M = nn.Module:extend("NP")
    function M:__init()
      self:register_buffer("kept", ddp.ones(2))
      self:register_buffer("mask", ddp.ones(3, 3):tril(), false)
      self:register_buffer("scratch", ddp.zeros(1), { persistent = false })
    end
    local outer = nn.Sequential { M() }
    assert.are.same({ "0.kept", "0.mask", "0.scratch" }, names_of(outer:named_buffers()))
    local sd = outer:state_dict()
    assert.is_not_nil(sd["0.kept"])
    assert.is_nil(sd["0.mask"])
    assert.is_nil(sd["0.scratch"])
    -- strict loading neither misses nor refuses them
    outer:load_state_dict({ ["0.kept"] = ddp.full({ 2 }, 5) })
    assert.are.same({ 5, 5 }, outer[1].kept:totable())
    local ok, err = pcall(function() outer:load_state_dict({ ["0.kept"] = ddp.ones(2), ["0.mask"] = ddp.ones(3, 3) }) end)
    assert.is_false(ok)
    assert.matches('Unexpected key%(s%) in state_dict: "0.mask"', err)
    -- registering it again as persistent puts it back
    outer[1]:register_buffer("mask", outer[1].mask, true)
    assert.is_not_nil(outer:state_dict()["0.mask"])
    outer[1]:to("float64")
    assert.are.equal("float64", outer[1].scratch:dtype())
    ok, err = pcall(function() outer[1]:register_buffer("x", ddp.ones(1), "no") end)
    assert.is_false(ok)
    assert.matches("register_buffer 'x': persistent must be a boolean, got string", err)
  end)

  it("lists a parameter shared by two modules once", function()
    local a, b = nn.Linear(2, 2), nn.Linear(2, 2)
    b.weight = a.weight
    local seq = nn.Sequential { a, b }
    assert.are.same({ "0.weight", "0.bias", "1.bias" }, names_of(seq:named_parameters()))
  end)

  it("parameters() and buffers() list the tensors of named_parameters() and named_buffers(), in order", function()
    local function tensors_of(iter)
      local out = {}
      for _, t in iter do out[#out + 1] = t end
      return out
    end
    local a = nn.Linear(2, 2)
    local shared = nn.Sequential { a, nn.BatchNorm1d(2), a } -- a module twice: listed once
    local tied = nn.Sequential { nn.Linear(2, 2), nn.Linear(2, 2) }
    tied[2].weight = tied[1].weight
    for _, m in ipairs { Net(4), shared, tied, nn.ReLU() } do
      assert.are.same(tensors_of(m:named_parameters()), m:parameters())
      assert.are.same(tensors_of(m:named_buffers()), m:buffers())
      assert.are.same(tensors_of(m:named_parameters(false)), m:parameters(false))
      local params, buffers = nn.Module._parameters_and_buffers(m)
      assert.are.same(m:parameters(), params)
      assert.are.same(m:buffers(), buffers)
    end
    assert.are.equal(4, #shared:parameters())
    assert.are.equal(0, #shared:parameters(false))
    assert.are.equal(3, #tied:parameters())
  end)

  it("calls forward when called and rejects a module without forward", function()
    local x = ddp.randn(2, 4)
    local net = Net(3)
    assert.are.equal(table.concat(net:forward(x):size(), ","), table.concat(net(x):size(), ","))
    local Empty = nn.Module:extend("Empty")
    local ok, err = pcall(function() return Empty()(x) end)
    assert.is_false(ok)
    assert.matches("Empty: forward is not defined", err)
  end)

  it("switches train/eval recursively", function()
    local net = Net(3)
    assert.is_true(net.training and net.bn.training)
    assert.are.equal(net, net:eval())
    assert.is_false(net.training or net.bn.training or net.fc1.training)
    net:train()
    assert.is_true(net.training and net.bn.training and net.fc2.training)
    net:train(false)
    assert.is_false(net.bn.training)
  end)

  it("applies a function to every module, children first", function()
    local seen = {}
    local net = Net(3)
    net:apply(function(m) seen[#seen + 1] = m:_class_name() end)
    assert.are.same({ "Linear", "BatchNorm1d", "Linear", "Net" }, seen)
  end)

  it("converts dtypes in place, keeping the parameter objects and integer buffers", function()
    local net = Net(3)
    local w = net.fc1.weight
    local before = w:double():totable()
    net:to("float64")
    assert.are.equal(w, net.fc1.weight)
    assert.are.equal("float64", w:dtype())
    assert.are.same(before, w:totable())
    assert.is_true(w.requires_grad)
    assert.are.equal("float64", net.bn.running_mean:dtype())
    assert.are.equal("int64", net.bn.num_batches_tracked:dtype())
    net:to({ dtype = "float32" })
    assert.are.equal("float32", w:dtype())
    net:double()
    assert.are.equal("float64", net.fc2.bias:dtype())
    local y = net(ddp.randn(5, 4, { dtype = "float64" }))
    assert.are.equal("float64", y:dtype())
  end)

  it("zero_grad drops gradients by default and zeroes them in place with set_to_none=false", function()
    local lin = nn.Linear(3, 2)
    lin(ddp.randn(4, 3)):sum():backward()
    assert.is_not_nil(lin.weight.grad)
    lin:zero_grad()
    assert.is_nil(lin.weight.grad)
    assert.is_nil(lin.bias.grad)
    lin(ddp.randn(4, 3)):sum():backward()
    lin:zero_grad(false)
    assert.are.same({ 0, 0 }, lin.bias.grad:totable())
  end)

  it("zero_grad drops a kept gradient buffer but keeps its memory for the next backward", function()
    local lin = nn.Linear(3, 2)
    assert.is_false(ddp.core.keep_grad_buf(lin.weight))
    assert.are.equal(lin.weight, ddp.core.keep_grad_buf(lin.weight, true))
    assert.is_true(ddp.core.keep_grad_buf(lin.weight))
    lin(ddp.randn(4, 3)):sum():backward()
    local ptr = lin.weight.grad:data_ptr()
    lin:zero_grad()
    assert.is_nil(lin.weight.grad) -- PyTorch's None
    assert.is_nil(lin.bias.grad) -- not kept: dropped
    local x = ddp.randn(4, 3)
    lin(x):sum():backward() -- overwrites the kept buffer instead of adding to it
    assert.are.equal(ptr, lin.weight.grad:data_ptr())
    local want = x:sum(1):view(1, 3):expand(2, 3)
    assert.is_true((lin.weight.grad - want):abs():max():item() < 1e-6)
    -- a dropped kept buffer is no gradient through a dtype change too (not zeros that a step would apply)
    lin:zero_grad()
    lin:double()
    assert.is_nil(lin.weight.grad)
    lin(ddp.randn(4, 3, { dtype = "float64" })):sum():backward()
    assert.are.equal("float64", lin.weight.grad:dtype())
    local ok, err = pcall(function() ddp.core.keep_grad_buf(lin.weight, "yes") end)
    assert.is_false(ok)
    assert.matches("boolean expected", err)
  end)

  it("state_dict is ordered, includes buffers and shares memory with the model", function()
    local net = Net(3)
    local sd = net:state_dict()
    local keys = {}
    for k in pairs(sd) do keys[#keys + 1] = k end
    assert.are.same({ "fc1.weight", "fc1.bias", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var",
      "bn.num_batches_tracked", "fc2.weight", "fc2.bias" }, keys)
    assert.is_false(sd["fc1.weight"].requires_grad)
    assert.are.equal(net.fc1.weight:data_ptr(), sd["fc1.weight"]:data_ptr())
    assert.are.equal("int64", sd["bn.num_batches_tracked"]:dtype())
  end)

  it("load_state_dict copies values into the model", function()
    local a, b = Net(3), Net(3)
    a.bn.running_mean:fill_(0.5)
    b:load_state_dict(a:state_dict())
    for name, t in pairs(a:state_dict()) do
      assert.are.same(t:totable(), b:state_dict()[name]:totable(), name)
    end
    local x = ddp.randn(2, 4)
    a:eval()
    b:eval()
    assert.are.same(a(x):totable(), b(x):totable())
  end)

  it("load_state_dict names missing and unexpected keys", function()
    local net = Net(3)
    local sd = net:state_dict()
    sd["fc2.bias"] = nil
    sd["fc3.weight"] = ddp.zeros(1)
    local ok, err = pcall(function() net:load_state_dict(sd) end)
    assert.is_false(ok)
    assert.matches('Error%(s%) in loading state_dict for Net', err)
    assert.matches('Missing key%(s%) in state_dict: "fc2.bias"', err)
    assert.matches('Unexpected key%(s%) in state_dict: "fc3.weight"', err)
    local missing, unexpected = net:load_state_dict(sd, false)
    assert.are.same({ "fc2.bias" }, missing)
    assert.are.same({ "fc3.weight" }, unexpected)
  end)

  it("load_state_dict names a shape mismatch even when not strict", function()
    local net = Net(3)
    local sd = net:state_dict()
    sd["fc1.weight"] = ddp.zeros(2, 4)
    local ok, err = pcall(function() net:load_state_dict(sd, false) end)
    assert.is_false(ok)
    assert.matches("size mismatch for fc1.weight: copying a tensor with shape %[2, 4%] from the state dict, the shape "
      .. "in the current model is %[3, 4%]", err)
  end)

  it("prints like PyTorch's repr", function()
    local seq = nn.Sequential { nn.Linear(784, 10, false), nn.ReLU(), nn.Sequential { nn.Tanh() } }
    assert.are.equal(table.concat({
      "Sequential(",
      "  (0): Linear(in_features=784, out_features=10, bias=False)",
      "  (1): ReLU()",
      "  (2): Sequential(",
      "    (0): Tanh()",
      "  )",
      ")" }, "\n"), tostring(seq))
  end)

  it("rejects bad registrations with clear errors", function()
    local m = nn.Module()
    local ok, err = pcall(function() m:register_parameter("w", 3) end)
    assert.is_false(ok)
    assert.matches("parameter 'w' must be a tensor or nil, got number", err)
    ok, err = pcall(function() m:add_module("a.b", nn.ReLU()) end)
    assert.is_false(ok)
    assert.matches("name must be a non%-empty string without '%.'", err)
    ok, err = pcall(function() m:add_module("x", {}) end)
    assert.is_false(ok)
    assert.matches("submodule 'x' must be a module, got table", err)
    m:register_buffer("b", ddp.zeros(1))
    ok, err = pcall(function() m:register_parameter("b", ddp.zeros(1):requires_grad_()) end)
    assert.is_false(ok)
    assert.matches("'b' is already registered as a buffer", err)
    ok, err = pcall(function() m:register_parameter("p", (ddp.ones(2):requires_grad_() * 2)) end)
    assert.is_false(ok)
    assert.matches("parameter 'p' must be a leaf tensor", err)
  end)
end)

describe("nn.Sequential", function()
  it("indexes its modules from 1 (negative from the end) and has a length", function()
    local a, b, c = nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1)
    local seq = nn.Sequential { a, b, c }
    assert.are.equal(3, #seq)
    assert.are.equal(a, seq[1])
    assert.are.equal(c, seq[3])
    assert.are.equal(c, seq[-1])
    local d = nn.Tanh()
    seq[2] = d
    assert.are.equal(d, seq[2])
    seq:append(nn.Sigmoid())
    assert.are.equal(4, #seq)
    -- one past the end is nil, so ipairs(seq) stops there; further is an error
    assert.is_nil(seq[5])
    local ok, err = pcall(function() return seq[6] end)
    assert.is_false(ok)
    assert.matches("index 6 out of range %(it holds 4 modules", err)
    assert.are.equal(#nn.Sequential(nn.ReLU(), nn.Tanh()), 2)
  end)

  it("runs its modules in order", function()
    local x = ddp.randn(3, 2)
    local seq = nn.Sequential { nn.Linear(2, 4), nn.Tanh(), nn.Linear(4, 2) }
    local expected = seq[3](seq[2](seq[1](x)))
    assert.are.same(expected:totable(), seq(x):totable())
  end)

  it("rejects a non-module with the element's position", function()
    local ok, err = pcall(function() return nn.Sequential { nn.ReLU(), 42 } end)
    assert.is_false(ok)
    assert.matches("Sequential: element 2 is a number, expected a module", err)
    ok, err = pcall(function() return nn.Sequential { nn.ReLU(), ddp.zeros(1) } end)
    assert.is_false(ok)
    assert.matches("element 2 is a tensor", err)
    ok, err = pcall(function() return nn.Sequential { nn.ReLU(), nil, nn.ReLU() } end)
    assert.is_false(ok)
    assert.matches("element 2 is nil", err)
  end)
end)
