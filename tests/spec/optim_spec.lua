-- optim: SGD / Adam / AdamW updates against float64 references written
-- here, parameter groups, skipped parameters, zero_grad, state dicts, the
-- learning-rate schedulers and bad input.
local ddp = require "ddplua"
local gc = require "helpers.gradcheck"
local nn, optim = ddp.nn, ddp.optim

local flat = gc.flat_values

-- Deterministic float64 parameters and per-step gradients.
local function make_params(seed)
  ddp.manual_seed(seed)
  return { ddp.randn(3, 4, { dtype = "float64" }):requires_grad_(),
    ddp.randn(5, { dtype = "float64" }):requires_grad_() }
end
local function grads_for(step, params)
  ddp.manual_seed(1000 + step)
  local g = {}
  for i, p in ipairs(params) do g[i] = ddp.randn(p:size(), { dtype = "float64" }) end
  return g
end

-- Reference SGD (PyTorch's torch.optim.SGD) over flat arrays.
local function sgd_reference(p, grads_per_step, o)
  local buf
  for _, g in ipairs(grads_per_step) do
    local d = {}
    for i = 1, #p do d[i] = g[i] + o.weight_decay * p[i] end
    if o.momentum ~= 0 then
      if not buf then
        buf = { table.unpack(d) }
      else
        for i = 1, #p do buf[i] = o.momentum * buf[i] + (1 - o.dampening) * d[i] end
      end
      for i = 1, #p do d[i] = o.nesterov and d[i] + o.momentum * buf[i] or buf[i] end
    end
    for i = 1, #p do p[i] = p[i] - o.lr * d[i] end
  end
  return p
end

-- Reference Adam / AdamW (PyTorch's formulas).
local function adam_reference(p, grads_per_step, o, decoupled)
  local m, v = {}, {}
  for i = 1, #p do m[i], v[i] = 0, 0 end
  for t, g in ipairs(grads_per_step) do
    local b1, b2 = o.betas[1], o.betas[2]
    local bc1, bc2 = 1 - b1 ^ t, 1 - b2 ^ t
    for i = 1, #p do
      local gi = g[i]
      if decoupled then p[i] = p[i] * (1 - o.lr * o.weight_decay) else gi = gi + o.weight_decay * p[i] end
      m[i] = b1 * m[i] + (1 - b1) * gi
      v[i] = b2 * v[i] + (1 - b2) * gi * gi
      p[i] = p[i] - o.lr / bc1 * m[i] / (math.sqrt(v[i]) / math.sqrt(bc2) + o.eps)
    end
  end
  return p
end

local STEPS = 4

-- Runs the optimizer STEPS times and compares each parameter with the reference.
local function check_against_reference(make_opt, reference, o)
  local params = make_params(1)
  local start = { flat(params[1]), flat(params[2]) }
  local per_param = { {}, {} }
  local opt = make_opt(params)
  for s = 1, STEPS do
    local g = grads_for(s, params)
    for i, p in ipairs(params) do
      p.grad = g[i]
      per_param[i][s] = flat(g[i])
    end
    opt:step()
  end
  for i, p in ipairs(params) do
    local want = reference(start[i], per_param[i], o)
    local err = gc.max_abs_diff(p, want)
    assert.is_true(err < 1e-12, "parameter " .. i .. " differs from the reference by " .. err)
  end
end

describe("optim.SGD", function()
  local cases = {
    { lr = 0.1, momentum = 0, dampening = 0, weight_decay = 0, nesterov = false },
    { lr = 0.05, momentum = 0, dampening = 0, weight_decay = 0.01, nesterov = false },
    { lr = 0.05, momentum = 0.9, dampening = 0, weight_decay = 0, nesterov = false },
    { lr = 0.02, momentum = 0.8, dampening = 0.3, weight_decay = 0.05, nesterov = false },
    { lr = 0.03, momentum = 0.9, dampening = 0, weight_decay = 0.01, nesterov = true },
  }
  for _, o in ipairs(cases) do
    it(string.format("matches the reference: lr %g momentum %g dampening %g weight_decay %g nesterov %s", o.lr,
      o.momentum, o.dampening, o.weight_decay, tostring(o.nesterov)), function()
      check_against_reference(function(params) return optim.SGD(params, o) end, sgd_reference, o)
    end)
  end

  it("matches the float64 reference to float32 precision on float32 parameters", function()
    ddp.manual_seed(4)
    local p = ddp.randn(50):requires_grad_()
    local start = flat(p:double())
    local opt = optim.SGD({ p }, { lr = 0.1, momentum = 0.9, weight_decay = 0.01 })
    local gs = {}
    for s = 1, 3 do
      local g = ddp.randn(50)
      p.grad = g
      gs[s] = flat(g:double())
      opt:step()
    end
    local want = sgd_reference(start, gs, { lr = 0.1, momentum = 0.9, dampening = 0, weight_decay = 0.01 })
    assert.is_true(gc.max_abs_diff(p, want) < 1e-5)
  end)
end)

describe("optim.Adam and optim.AdamW", function()
  local o = { lr = 0.01, betas = { 0.9, 0.99 }, eps = 1e-8, weight_decay = 0 }
  it("Adam matches the reference", function()
    check_against_reference(function(params) return optim.Adam(params, o) end,
      function(p, g, opts) return adam_reference(p, g, opts, false) end, o)
  end)

  local l2 = { lr = 0.01, betas = { 0.8, 0.999 }, eps = 1e-6, weight_decay = 0.1 }
  it("Adam with weight decay (L2 in the gradient) matches the reference", function()
    check_against_reference(function(params) return optim.Adam(params, l2) end,
      function(p, g, opts) return adam_reference(p, g, opts, false) end, l2)
  end)

  it("AdamW (decoupled weight decay) matches the reference", function()
    check_against_reference(function(params) return optim.AdamW(params, l2) end,
      function(p, g, opts) return adam_reference(p, g, opts, true) end, l2)
  end)

  it("have PyTorch's defaults", function()
    local p = make_params(1)
    local a, w = optim.Adam(p), optim.AdamW(p)
    assert.are.same({ 0.9, 0.999 }, a.param_groups[1].betas)
    assert.are.equal(1e-3, a.param_groups[1].lr)
    assert.are.equal(1e-8, a.param_groups[1].eps)
    assert.are.equal(0, a.param_groups[1].weight_decay)
    assert.are.equal(1e-2, w.param_groups[1].weight_decay)
  end)
end)

describe("optimizers", function()
  it("skip parameters without a gradient and keep no state for them", function()
    local params = make_params(2)
    local before = params[2]:totable()
    local opt = optim.SGD(params, { lr = 0.1, momentum = 0.9 })
    params[1].grad = ddp.ones(3, 4, { dtype = "float64" })
    opt:step()
    assert.are.same(before, params[2]:totable())
    assert.is_not_nil(opt.state[params[1]].momentum_buffer)
    assert.is_nil(opt.state[params[2]])
    local adam = optim.Adam(params)
    adam:step()
    assert.is_nil(adam.state[params[2]])
    assert.are.equal(1, adam.state[params[1]].step)
  end)

  it("apply each parameter group's own hyperparameters, in one C call per group", function()
    local a, b = make_params(3), make_params(4)
    local a0, b0 = a[1]:totable(), b[1]:totable()
    local opt = optim.SGD({ { params = a, lr = 0.5 }, { params = b } }, { lr = 0.1 })
    assert.are.equal(0.5, opt.param_groups[1].lr)
    assert.are.equal(0.1, opt.param_groups[2].lr)
    for _, p in ipairs({ a[1], a[2], b[1], b[2] }) do p.grad = ddp.ones(p:size(), { dtype = "float64" }) end
    local core = require "ddplua.core"
    local real, calls = core._sgd_step, 0
    core._sgd_step = function(...)
      calls = calls + 1
      return real(...)
    end
    local ok, err = pcall(opt.step, opt)
    core._sgd_step = real
    assert(ok, err)
    assert.are.equal(2, calls)
    assert.is_true(gc.max_abs_diff(a[1], (ddp.tensor(a0, { dtype = "float64" }) - 0.5):totable()) < 1e-15)
    assert.is_true(gc.max_abs_diff(b[1], (ddp.tensor(b0, { dtype = "float64" }) - 0.1):totable()) < 1e-15)
  end)

  it("zero_grad drops gradients (a kept buffer reads as none and keeps its memory), or zeroes them", function()
    local params = make_params(5)
    local opt = optim.SGD(params, { lr = 0.1 })
    params[1].grad = ddp.ones(3, 4, { dtype = "float64" })
    params[2].grad = ddp.ones(5, { dtype = "float64" })
    ddp.core.keep_grad_buf(params[2], true)
    opt:zero_grad()
    assert.is_nil(params[1].grad)
    assert.is_nil(params[2].grad)
    params[1].grad = ddp.ones(3, 4, { dtype = "float64" })
    params[2].grad = ddp.ones(5, { dtype = "float64" })
    opt:zero_grad(false)
    assert.are.equal(0, params[1].grad:abs():sum():item())
    assert.are.same({ 0, 0, 0, 0, 0 }, params[2].grad:totable())
  end)

  it("skips a kept gradient buffer dropped by zero_grad, as PyTorch skips None; zero_grad(false) steps zeros", function()
    local p = ddp.tensor({ 1.0 }, { dtype = "float64", requires_grad = true })
    ddp.core.keep_grad_buf(p, true)
    local opt = optim.SGD({ p }, { lr = 0.1, momentum = 0.9 })
    p.grad = ddp.tensor({ 1.0 }, { dtype = "float64" })
    opt:step() -- buf = 1, p = 1 - 0.1
    opt:zero_grad()
    opt:step() -- no gradient: skipped (momentum would have moved it to 0.81)
    assert.is_true(math.abs(p:item() - 0.9) < 1e-15, tostring(p:item()))
    assert.is_nil(p.grad)
    opt:zero_grad(false)
    opt:step() -- a zero gradient: buf = 0.9, p = 0.9 - 0.09
    assert.is_true(math.abs(p:item() - 0.81) < 1e-15, tostring(p:item()))
    assert.are.same({ 0 }, p.grad:totable())
  end)

  it("train a small model (the loss goes down)", function()
    ddp.manual_seed(6)
    local model = nn.Sequential { nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1) }
    local x = ddp.randn(64, 4)
    local y = x:sum(2, true) * 0.5
    local opt = optim.Adam(model:parameters(), { lr = 0.01 })
    local first, last
    for s = 1, 100 do
      opt:zero_grad()
      local loss = nn.MSELoss()(model(x), y)
      loss:backward()
      opt:step()
      if s == 1 then first = loss:item() end
      last = loss:item()
    end
    assert.is_true(last < 0.1 * first, string.format("loss %g -> %g", first, last))
  end)

  it("run a closure with gradients on and return its loss", function()
    local p = ddp.tensor({ 1.0, 2.0 }, { dtype = "float64", requires_grad = true })
    local opt = optim.SGD({ p }, { lr = 0.5 })
    local loss = ddp.no_grad(function()
      return opt:step(function()
        opt:zero_grad()
        local l = (p * p):sum()
        l:backward()
        return l
      end)
    end)
    assert.are.equal(5, loss:item())
    assert.are.same({ 0, 0 }, p:totable())
  end)
end)

describe("optimizer state dicts", function()
  local function run(opt, params, from, to)
    for s = from, to do
      local g = grads_for(s, params)
      for i, p in ipairs(params) do p.grad = g[i] end
      opt:step()
    end
  end

  for _, kind in ipairs({ "SGD", "Adam", "AdamW" }) do
    it(kind .. " resumes exactly from state_dict / load_state_dict", function()
      local opts = kind == "SGD" and { lr = 0.1, momentum = 0.9 } or { lr = 0.01 }
      local a = make_params(7)
      local oa = optim[kind](a, opts)
      run(oa, a, 1, 3)
      local sd = oa:state_dict()
      assert.are.same({ 1, 2 }, sd.param_groups[1].params)
      assert.is_not_nil(sd.state[1])
      local b = { a[1]:detach():clone():requires_grad_(), a[2]:detach():clone():requires_grad_() }
      local ob = optim[kind](b, { lr = 123 })
      ob:load_state_dict(sd)
      assert.are.equal(opts.lr, ob.param_groups[1].lr)
      run(oa, a, 4, 6)
      run(ob, b, 4, 6)
      assert.are.same(a[1]:totable(), b[1]:totable())
      assert.are.same(a[2]:totable(), b[2]:totable())
    end)
  end

  it("names a mismatch between the saved and the current groups", function()
    local a = make_params(8)
    local sd = optim.SGD(a, { lr = 0.1, momentum = 0.9 }):state_dict()
    local ok, err = pcall(function() optim.SGD({ a[1] }, { lr = 0.1 }):load_state_dict(sd) end)
    assert.is_false(ok)
    assert.matches("parameter group 1 of the loaded state dict has 2 parameters, the optimizer's has 1", err)
    ok, err = pcall(function()
      optim.SGD({ { params = { a[1] } }, { params = { a[2] } } }, { lr = 0.1 }):load_state_dict(sd)
    end)
    assert.is_false(ok)
    assert.matches("loaded state dict has 1 parameter groups, the optimizer has 2", err)
    local opt = optim.SGD(a, { lr = 0.1, momentum = 0.9 })
    for _, p in ipairs(a) do p.grad = ddp.zeros(p:size(), { dtype = "float64" }) end
    opt:step()
    sd = opt:state_dict()
    local b = { ddp.zeros(4, 3, { dtype = "float64" }):requires_grad_(), a[2] }
    ok, err = pcall(function() optim.SGD(b, { lr = 0.1, momentum = 0.9 }):load_state_dict(sd) end)
    assert.is_false(ok)
    assert.matches("loaded state 'momentum_buffer' of parameter 1 has shape %[3, 4%] but the parameter has shape "
      .. "%[4, 3%]", err)
  end)
end)

describe("optimizer errors", function()
  local p = ddp.zeros(2):requires_grad_()
  local function fails(pattern, fn)
    local ok, err = pcall(fn)
    assert.is_false(ok, "expected an error matching " .. pattern)
    assert.matches(pattern, err)
  end

  it("name bad hyperparameters", function()
    fails("SGD: invalid lr %-0.1 %(expected a number >= 0%) %(parameter group 1%)",
      function() optim.SGD({ p }, { lr = -0.1 }) end)
    fails("SGD: invalid momentum %-1", function() optim.SGD({ p }, { lr = 0.1, momentum = -1 }) end)
    fails("SGD: nesterov momentum requires a momentum > 0 and zero dampening",
      function() optim.SGD({ p }, { lr = 0.1, nesterov = true }) end)
    fails("SGD: unknown option 'momentun' %(valid options: dampening, lr, momentum, nesterov, weight_decay%)",
      function() optim.SGD({ p }, { lr = 0.1, momentun = 0.9 }) end)
    fails("Adam: invalid beta parameter at index 2: 1 %(expected 0 <= beta < 1%)",
      function() optim.Adam({ p }, { betas = { 0.9, 1 } }) end)
    fails("AdamW: invalid eps %-1", function() optim.AdamW({ p }, { eps = -1 }) end)
    fails("Adam: unknown option 'amsgrads'", function() optim.Adam({ p }, { amsgrads = true }) end)
    local opt = optim.SGD({ p }, { lr = 0.1 })
    opt.param_groups[1].lr = -1 -- changed after construction: caught at step time
    fails("SGD: invalid lr %-1", function() opt:step() end)
  end)

  it("name bad parameter lists", function()
    fails("SGD: got an empty parameter list", function() optim.SGD({}, { lr = 0.1 }) end)
    fails("SGD: parameter 2 of group 1 is a string, expected a tensor", function() optim.SGD({ p, "w" }) end)
    fails("Adam: parameter 1 of group 1 is not a leaf tensor", function() optim.Adam({ p * 2 }) end)
    fails("parameter 1 of group 1 is int64; parameters must be floating point",
      function() optim.SGD({ ddp.zeros(2, { dtype = "int64" }) }) end)
    fails("SGD: parameter 1 of group 2 appears in more than one place",
      function() optim.SGD({ { params = { p } }, { params = { p } } }) end)
    fails("SGD: expected a list of parameters, got a module %(pass model:parameters%(%)%)",
      function() optim.SGD(nn.Linear(2, 2), { lr = 0.1 }) end)
    fails("SGD: parameter group 2 has an empty parameter list",
      function() optim.SGD({ { params = { p } }, { params = {} } }) end)
    fails("SGD: unknown option 'lrr' in parameter group 1", function() optim.SGD({ { params = { p }, lrr = 1 } }) end)
  end)

  it("never see a gradient that does not match its parameter: assigning one is refused, as in PyTorch", function()
    local q = ddp.zeros(2):requires_grad_()
    local opt = optim.SGD({ q }, { lr = 0.1 })
    q.grad = ddp.ones(2)
    fails("assigned grad is float64 but the tensor is float32", function() q.grad = ddp.zeros(2, { dtype = "float64" }) end)
    opt:step()
    for _, v in ipairs(q:detach():totable()) do assert.is_true(math.abs(v + 0.1) < 1e-7, tostring(v)) end
  end)
end)

describe("lr_scheduler", function()
  local function sgd(lr) return optim.SGD({ ddp.zeros(1):requires_grad_() }, { lr = lr }) end

  it("StepLR multiplies the lr by gamma every step_size steps", function()
    local opt = sgd(0.5)
    local s = optim.lr_scheduler.StepLR(opt, { step_size = 3, gamma = 0.1 })
    assert.are.same({ 0.5 }, s:get_last_lr())
    for t = 1, 10 do
      s:step()
      local want = 0.5 * 0.1 ^ (t // 3)
      assert.is_true(math.abs(opt.param_groups[1].lr - want) < 1e-15 * want + 1e-18, "step " .. t)
      assert.are.equal(opt.param_groups[1].lr, s:get_last_lr()[1])
    end
  end)

  it("CosineAnnealingLR follows eta_min + (base - eta_min)(1 + cos(pi t / T_max)) / 2", function()
    local opt = optim.SGD({ { params = { ddp.zeros(1):requires_grad_() }, lr = 0.1 },
      { params = { ddp.zeros(1):requires_grad_() }, lr = 0.02 } })
    local s = optim.lr_scheduler.CosineAnnealingLR(opt, { T_max = 7, eta_min = 0.001 })
    for t = 1, 17 do -- past T_max the schedule comes back up, as PyTorch's does
      s:step()
      for i, base in ipairs({ 0.1, 0.02 }) do
        local want = 0.001 + (base - 0.001) * (1 + math.cos(math.pi * t / 7)) / 2
        assert.is_true(math.abs(opt.param_groups[i].lr - want) < 1e-12, string.format("group %d step %d: %.17g vs "
          .. "%.17g", i, t, opt.param_groups[i].lr, want))
      end
    end
  end)

  it("resumes from its state_dict", function()
    local o1, o2 = sgd(0.1), sgd(0.1)
    local s1 = optim.lr_scheduler.CosineAnnealingLR(o1, { T_max = 10 })
    for _ = 1, 4 do s1:step() end
    local s2 = optim.lr_scheduler.CosineAnnealingLR(o2, { T_max = 10 })
    s2:load_state_dict(s1:state_dict())
    o2.param_groups[1].lr = o1.param_groups[1].lr -- the optimizer's own state dict carries this
    assert.are.equal(4, s2.last_epoch)
    for _ = 1, 3 do
      s1:step()
      s2:step()
      assert.are.equal(o1.param_groups[1].lr, o2.param_groups[1].lr)
    end
    local o3 = sgd(0.3)
    local st = optim.lr_scheduler.StepLR(o3, { step_size = 2 })
    st:step()
    local sd = st:state_dict()
    assert.are.equal(2, sd.step_size)
    assert.are.equal(0.1, sd.gamma)
    assert.is_nil(sd.optimizer)
  end)

  it("name bad options", function()
    local ok, err = pcall(function() optim.lr_scheduler.StepLR(sgd(0.1), { step_size = 0 }) end)
    assert.is_false(ok)
    assert.matches("StepLR: step_size must be a positive integer, got 0", err)
    ok, err = pcall(function() optim.lr_scheduler.StepLR(sgd(0.1), { step = 2 }) end)
    assert.is_false(ok)
    assert.matches("StepLR: unknown option 'step'", err)
    ok, err = pcall(function() optim.lr_scheduler.CosineAnnealingLR(sgd(0.1), { T_max = 1.5 }) end)
    assert.is_false(ok)
    assert.matches("CosineAnnealingLR: T_max must be a positive integer, got 1.5", err)
    ok, err = pcall(function() optim.lr_scheduler.CosineAnnealingLR({}, { T_max = 3 }) end)
    assert.is_false(ok)
    assert.matches("CosineAnnealingLR: expected an optimizer", err)
  end)
end)
