-- Mixed precision on the CPU: GradScaler (scaling, unscaling with inf/NaN
-- detection, step skipping, PyTorch's growth/backoff rule, state dicts,
-- misuse errors) and autocast (its state; CPU bfloat16 in cpu_autocast_spec, the
-- guard and function forms, bad arguments).
local ddp = require "ddplua"
local amp = ddp.amp

-- A minimal optimizer with PyTorch's param_groups layout: plain SGD.
local function sgd(params, lr)
  local o = { param_groups = { { params = params, lr = lr } }, steps = 0 }
  function o:step()
    self.steps = self.steps + 1
    ddp.no_grad(function()
      for _, p in ipairs(self.param_groups[1].params) do
        if p.grad then p:copy_(p - p.grad * lr) end
      end
    end)
    return "stepped"
  end
  return o
end

-- PyTorch's update rule (torch._amp_update_scale_), written from its
-- documentation as an independent reference for the scale sequence.
local function reference_scales(init, growth, backoff, interval, infs)
  local scale, tracker, out = init, 0, {}
  for _, inf in ipairs(infs) do
    if inf then
      scale, tracker = scale * backoff, 0
    else
      tracker = tracker + 1
      if tracker == interval then scale, tracker = scale * growth, 0 end
    end
    out[#out + 1] = scale
  end
  return out
end

local function flat(t)
  local out = {}
  local function walk(v)
    if type(v) == "table" then for _, e in ipairs(v) do walk(e) end else out[#out + 1] = v end
  end
  walk(t:totable())
  return out
end

describe("GradScaler", function()
  it("has PyTorch's defaults", function()
    local s = amp.GradScaler()
    assert.are.equal(65536.0, s:get_scale())
    assert.are.equal(2.0, s:get_growth_factor())
    assert.are.equal(0.5, s:get_backoff_factor())
    assert.are.equal(2000, s:get_growth_interval())
    assert.is_true(s:is_enabled())
  end)

  it("scales the loss and unscales the gradients back to the unscaled ones", function()
    local x = ddp.tensor({ { 1.0, 2.0 }, { 3.0, -1.0 } }, { dtype = "float64" })
    local w = ddp.tensor({ 0.5, -0.25 }, { dtype = "float64", requires_grad = true })
    local function objective() return (x:matmul(w) * x:matmul(w)):sum() end
    objective():backward() -- the reference gradient, without scaling
    local ref = flat(w.grad)
    w.grad = nil
    local s = amp.GradScaler { init_scale = 1024.0 }
    local loss = objective()
    local scaled = s:scale(loss)
    assert.are.equal(loss:item() * 1024.0, scaled:item())
    scaled:backward()
    assert.are.equal(ref[1] * 1024.0, flat(w.grad)[1])
    local opt = sgd({ w }, 0.1)
    s:unscale_(opt)
    assert.are.same(ref, flat(w.grad)) -- powers of two: exact
    assert.is_false(s:found_inf(opt))
  end)

  it("scales every tensor of a table of losses", function()
    local s = amp.GradScaler { init_scale = 8.0 }
    local r = s:scale({ a = ddp.tensor(1.5), b = ddp.tensor(-2.0) })
    assert.are.equal(12.0, r.a:item())
    assert.are.equal(-16.0, r.b:item())
  end)

  it("steps on finite gradients and returns the optimizer's result", function()
    local p = ddp.tensor({ 1.0, 2.0 }, { requires_grad = true })
    local s = amp.GradScaler { init_scale = 4.0 }
    s:scale((p * 3):sum()):backward() -- gradient 3 * 4 = 12 per element
    local opt = sgd({ p }, 0.5)
    assert.are.equal("stepped", s:step(opt))
    assert.are.equal(1, opt.steps)
    assert.are.same({ 1.0 - 0.5 * 3, 2.0 - 0.5 * 3 }, flat(p))
    s:update()
  end)

  it("skips the step when a gradient is inf or NaN and backs off the scale", function()
    for _, bad in ipairs({ math.huge, -math.huge, 0 / 0 }) do
      local p = ddp.tensor({ 1.0, 2.0 }, { requires_grad = true })
      local q = ddp.tensor({ 5.0 }, { requires_grad = true })
      local s = amp.GradScaler { init_scale = 16.0 }
      p.grad = ddp.tensor({ 1.0, bad })
      q.grad = ddp.tensor({ 2.0 })
      local opt = sgd({ p, q }, 1.0)
      assert.is_nil(s:step(opt))
      assert.are.equal(0, opt.steps)
      assert.is_true(s:found_inf(opt))
      assert.are.same({ 1.0, 2.0 }, flat(p)) -- untouched
      s:update()
      assert.are.equal(8.0, s:get_scale())
    end
  end)

  it("detects overflow in bfloat16 and float64 gradients too", function()
    local s = amp.GradScaler { init_scale = 2.0 }
    local a = ddp.tensor({ 1.0, 2.0 }, { dtype = "bfloat16", requires_grad = true })
    a.grad = ddp.tensor({ 1.0, 2.0 }):to("bfloat16")
    local b = ddp.tensor({ 1.0 }, { dtype = "float64", requires_grad = true })
    b.grad = ddp.tensor({ 1e308 }, { dtype = "float64" })
    local opt = sgd({ a, b }, 1.0)
    s:unscale_(opt)
    assert.are.same({ 0.5, 1.0 }, flat(a.grad:float()))
    assert.is_false(s:found_inf(opt))
    local s2 = amp.GradScaler { init_scale = 0.25 } -- unscaling multiplies by 4: 4e308 overflows float64
    local opt2 = sgd({ a, b }, 1.0)
    s2:unscale_(opt2)
    assert.is_true(s2:found_inf(opt2))
  end)

  it("follows PyTorch's growth/backoff rule over a sequence of steps", function()
    local pattern = { false, false, false, true, false, false, false, false, true, true, false, false, false }
    local s = amp.GradScaler { init_scale = 256.0, growth_factor = 4.0, backoff_factor = 0.25, growth_interval = 3 }
    local expect = reference_scales(256.0, 4.0, 0.25, 3, pattern)
    for i, inf in ipairs(pattern) do
      local p = ddp.tensor({ 1.0 }, { requires_grad = true })
      p.grad = ddp.tensor({ inf and math.huge or 1.0 })
      local opt = sgd({ p }, 1.0)
      s:step(opt)
      s:update()
      assert.are.equal(expect[i], s:get_scale(), "after step " .. i)
    end
  end)

  it("counts an inf seen by any of several optimizers", function()
    local s = amp.GradScaler { init_scale = 32.0, growth_interval = 1 }
    local a = ddp.tensor({ 1.0 }, { requires_grad = true })
    local b = ddp.tensor({ 1.0 }, { requires_grad = true })
    a.grad, b.grad = ddp.tensor({ 1.0 }), ddp.tensor({ 0 / 0 })
    local oa, ob = sgd({ a }, 1.0), sgd({ b }, 1.0)
    s:step(oa)
    s:step(ob)
    assert.are.equal(1, oa.steps)
    assert.are.equal(0, ob.steps)
    s:update()
    assert.are.equal(16.0, s:get_scale())
    a.grad, b.grad = ddp.tensor({ 1.0 }), ddp.tensor({ 1.0 })
    s:step(oa)
    s:step(ob)
    s:update()
    assert.are.equal(32.0, s:get_scale()) -- growth_interval 1: one clean iteration grows it
  end)

  it("accepts an explicit new scale and keeps PyTorch's state_dict keys", function()
    local s = amp.GradScaler { init_scale = 8.0, growth_interval = 5 }
    local p = ddp.tensor({ 1.0 }, { requires_grad = true })
    p.grad = ddp.tensor({ 1.0 })
    s:step(sgd({ p }, 1.0))
    s:update()
    local sd = s:state_dict()
    assert.are.same({ scale = 8.0, growth_factor = 2.0, backoff_factor = 0.5, growth_interval = 5,
                      _growth_tracker = 1 }, sd)
    local t = amp.GradScaler()
    t:load_state_dict(sd)
    assert.are.same(sd, t:state_dict())
    t:update(128.0)
    assert.are.equal(128.0, t:get_scale())
    local ok, err = pcall(function() t:update(-1) end)
    assert.is_false(ok)
    assert.matches("new_scale must be a positive finite number", err)
    ok, err = pcall(function() t:load_state_dict({ scale = 1.0 }) end)
    assert.is_false(ok)
    assert.matches("'growth_factor' must be a number", err)
  end)

  it("is a pass-through when disabled", function()
    local s = amp.GradScaler { enabled = false }
    local loss = ddp.tensor(3.0)
    assert.are.equal(loss, s:scale(loss))
    assert.are.equal(1.0, s:get_scale())
    local p = ddp.tensor({ 1.0 }, { requires_grad = true })
    p.grad = ddp.tensor({ math.huge })
    local opt = sgd({ p }, 1.0)
    s:step(opt) -- no inf check when disabled, as in PyTorch
    assert.are.equal(1, opt.steps)
    assert.are.same({}, s:state_dict())
  end)

  it("rejects misuse with messages that say what went wrong", function()
    local function err_of(f)
      local ok, e = pcall(f)
      assert.is_false(ok)
      return e
    end
    assert.matches("unknown option 'init'", err_of(function() amp.GradScaler { init = 1 } end))
    assert.matches("growth_factor must be > 1", err_of(function() amp.GradScaler { growth_factor = 0.5 } end))
    assert.matches("backoff_factor must be in %(0, 1%)", err_of(function() amp.GradScaler { backoff_factor = 2 } end))
    assert.matches("growth_interval must be an integer >= 1",
                   err_of(function() amp.GradScaler { growth_interval = 1.5 } end))
    local s = amp.GradScaler()
    local p = ddp.tensor({ 1.0 }, { requires_grad = true })
    p.grad = ddp.tensor({ 1.0 })
    local opt = sgd({ p }, 1.0)
    assert.matches("no inf checks were recorded", err_of(function() s:update() end))
    s:unscale_(opt)
    assert.matches("already been called on this optimizer", err_of(function() s:unscale_(opt) end))
    s:step(opt)
    assert.matches("step%(%) has already been called", err_of(function() s:step(opt) end))
    assert.matches("after step%(%)", err_of(function() s:unscale_(opt) end))
    s:update()
    assert.matches("neither param_groups nor params", err_of(function() s:unscale_({}) end))
    assert.matches("expected a tensor", err_of(function() s:scale(3) end))
    assert.matches("element 1 of the gradient list is a number",
                   err_of(function() ddp.core.amp_unscale_({ 1 }, 1.0) end))
    assert.matches("gradient 1 has dtype int64",
                   err_of(function() ddp.core.amp_unscale_({ ddp.tensor({ 1 }) }, 1.0) end))
  end)
end)

describe("autocast", function()
  it("leaves float64 CPU tensors alone, and float32 ones under float16 (bfloat16: cpu_autocast_spec)", function()
    ddp.manual_seed(3)
    local x, w, b = ddp.randn(4, 5), ddp.randn(3, 5), ddp.randn(3)
    local ref_lin, ref_mm = ddp.linear(x, w, b), x:matmul(w:transpose(1, 2))
    local xd, wd = x:double(), w:double()
    local ref_d = xd:matmul(wd:transpose(1, 2))
    do
      local _ <close> = ddp.autocast("bfloat16")
      assert.are.equal("bfloat16", amp.get_autocast_dtype())
      local yd = xd:matmul(wd:transpose(1, 2))
      assert.are.equal("float64", yd:dtype())
      assert.are.same(flat(ref_d), flat(yd))
    end
    do -- PyTorch's CPU autocast knows bfloat16 only
      local _ <close> = ddp.autocast("float16")
      local y = ddp.linear(x, w, b)
      assert.are.equal("float32", y:dtype())
      assert.are.same(flat(ref_lin), flat(y))
      assert.are.same(flat(ref_mm), flat(x:matmul(w:transpose(1, 2))))
    end
    assert.is_false(amp.is_autocast_enabled())
  end)

  it("nests, restores the previous state and accepts the function form", function()
    do
      local _ <close> = ddp.autocast("float16")
      do
        local _ <close> = ddp.autocast(false)
        assert.is_false(amp.is_autocast_enabled())
      end
      assert.are.equal("float16", amp.get_autocast_dtype())
      local r1, r2 = ddp.autocast("bfloat16", function(a) return amp.get_autocast_dtype(), a + 1 end, 41)
      assert.are.equal("bfloat16", r1)
      assert.are.equal(42, r2)
      assert.are.equal("float16", amp.get_autocast_dtype())
      local ok, err = pcall(ddp.autocast, "bfloat16", function() error("boom") end)
      assert.is_false(ok)
      assert.matches("boom", err)
      assert.are.equal("float16", amp.get_autocast_dtype())
    end
    do
      local _ <close> = ddp.autocast { dtype = "float16" }
      assert.are.equal("float16", amp.get_autocast_dtype())
    end
    assert.is_false(amp.is_autocast_enabled())
  end)

  it("rejects dtypes other than bfloat16 and float16", function()
    local ok, err = pcall(ddp.autocast, "float64")
    assert.is_false(ok)
    assert.matches("expected \"bfloat16\", \"float16\" or false, got float64", err)
    ok, err = pcall(ddp.core.set_autocast, "int64")
    assert.is_false(ok)
    assert.matches("dtype must be \"bfloat16\" or \"float16\", got 'int64'", err)
    ok, err = pcall(ddp.autocast, { dtype = "bfloat16", device = "cuda" })
    assert.is_false(ok)
    assert.matches("unknown option 'device'", err)
  end)
end)
