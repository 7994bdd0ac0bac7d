-- The learning-rate schedulers of issue 14 (LambdaLR, LinearLR, OneCycleLR,
-- SequentialLR, ReduceLROnPlateau, and StepLR / CosineAnnealingLR again)
-- against torch 1.13's torch.optim.lr_scheduler: the same lr (and, for
-- OneCycleLR, momentum / beta1) sequence, bit for bit, for the same
-- arguments on two parameter groups. Each also resumes bitwise from
-- ddp.save_checkpoint{scheduler=} in the middle of its schedule, and bad
-- arguments are errors naming them.
local ddp = require "ddplua"
local optim = ddp.optim
local S = optim.lr_scheduler
local U = require "helpers.io_util"
local R = require "helpers.ref"

local function sgd(momentum)
  return optim.SGD({ { params = { ddp.zeros(1):requires_grad_() }, lr = 0.1 },
    { params = { ddp.zeros(2):requires_grad_() }, lr = 0.01 } }, { lr = 0.1, momentum = momentum or 0.9 })
end
local function adam()
  return optim.Adam({ { params = { ddp.zeros(1):requires_grad_() }, lr = 0.1 },
    { params = { ddp.zeros(2):requires_grad_() }, lr = 0.01 } })
end

-- Each case: its optimizer, a constructor, the number of steps, the
-- metrics for ReduceLROnPlateau; the torch lines build the same.
local PLATEAU_METRICS = { 1.0, 0.9, 0.95, 0.95, 0.95, 0.8, 0.85, 0.85, 0.85, 0.85, 0.79, 0.9, 0.9, 0.9, 0.9, 0.9 }
local CASES = {
  { name = "StepLR", steps = 12, opt = sgd,
    make = function(o) return S.StepLR(o, 3, 0.5) end,
    torch = "S.StepLR(o, 3, 0.5)" },
  { name = "CosineAnnealingLR", steps = 15, opt = sgd,
    make = function(o) return S.CosineAnnealingLR(o, { T_max = 5, eta_min = 0.001 }) end,
    torch = "S.CosineAnnealingLR(o, T_max=5, eta_min=0.001)" },
  { name = "LambdaLR", steps = 8, opt = sgd,
    make = function(o) return S.LambdaLR(o, function(t) return 1 / (t + 1) end) end,
    torch = "S.LambdaLR(o, lambda t: 1 / (t + 1))" },
  { name = "LambdaLR per group", steps = 8, opt = sgd,
    make = function(o) return S.LambdaLR(o, { function(t) return 0.5 * t + 1 end, function(t) return 2 - t / 8 end }) end,
    torch = "S.LambdaLR(o, [lambda t: 0.5 * t + 1, lambda t: 2 - t / 8])" },
  { name = "LinearLR", steps = 8, opt = sgd,
    make = function(o) return S.LinearLR(o, { start_factor = 0.25, total_iters = 4 }) end,
    torch = "S.LinearLR(o, start_factor=0.25, total_iters=4)" },
  { name = "LinearLR defaults", steps = 7, opt = sgd,
    make = function(o) return S.LinearLR(o) end,
    torch = "S.LinearLR(o)" },
  { name = "OneCycleLR", steps = 19, opt = sgd, momentum = true,
    make = function(o) return S.OneCycleLR(o, { 1.0, 0.1 }, 20) end,
    torch = "S.OneCycleLR(o, [1.0, 0.1], 20)" },
  { name = "OneCycleLR three_phase linear", steps = 23, opt = sgd, momentum = true,
    make = function(o) return S.OneCycleLR(o, { max_lr = 0.5, epochs = 4, steps_per_epoch = 6, pct_start = 0.25,
      anneal_strategy = "linear", three_phase = true, div_factor = 10, final_div_factor = 100 }) end,
    torch = "S.OneCycleLR(o, max_lr=0.5, epochs=4, steps_per_epoch=6, pct_start=0.25, anneal_strategy='linear', " ..
      "three_phase=True, div_factor=10, final_div_factor=100)" },
  { name = "OneCycleLR Adam beta1", steps = 9, opt = adam, beta1 = true,
    make = function(o) return S.OneCycleLR(o, { max_lr = 0.01, total_steps = 10, base_momentum = 0.8,
      max_momentum = 0.9 }) end,
    torch = "S.OneCycleLR(o, max_lr=0.01, total_steps=10, base_momentum=0.8, max_momentum=0.9)", torch_opt = "adam" },
  { name = "SequentialLR", steps = 12, opt = sgd,
    make = function(o) return S.SequentialLR(o, { S.LinearLR(o, { start_factor = 0.1, total_iters = 3 }),
      S.CosineAnnealingLR(o, 6) }, { 3 }) end,
    torch = "S.SequentialLR(o, [S.LinearLR(o, start_factor=0.1, total_iters=3), S.CosineAnnealingLR(o, 6)], [3])" },
  { name = "SequentialLR of three", steps = 14, opt = sgd,
    make = function(o) return S.SequentialLR(o, { schedulers = { S.LinearLR(o, 0.5, 1.0, 2), S.StepLR(o, 2, 0.5),
      S.LambdaLR(o, function(t) return 0.9 ^ t end) }, milestones = { 3, 7 } }) end,
    torch = "S.SequentialLR(o, schedulers=[S.LinearLR(o, 0.5, 1.0, 2), S.StepLR(o, 2, 0.5), " ..
      "S.LambdaLR(o, lambda t: 0.9 ** t)], milestones=[3, 7])" },
  { name = "ReduceLROnPlateau", steps = #PLATEAU_METRICS, opt = sgd, metrics = PLATEAU_METRICS,
    make = function(o) return S.ReduceLROnPlateau(o, { factor = 0.5, patience = 2, cooldown = 1, threshold = 0.01,
      min_lr = { 0.02, 0.001 } }) end,
    torch = "S.ReduceLROnPlateau(o, factor=0.5, patience=2, cooldown=1, threshold=0.01, min_lr=[0.02, 0.001])" },
  { name = "ReduceLROnPlateau max abs", steps = #PLATEAU_METRICS, opt = sgd, metrics = PLATEAU_METRICS,
    make = function(o) return S.ReduceLROnPlateau(o, "max", 0.3, 1, 0.05, "abs") end,
    torch = "S.ReduceLROnPlateau(o, 'max', 0.3, 1, 0.05, 'abs')" },
  { name = "MultiStepLR", steps = 10, opt = sgd,
    make = function(o) return S.MultiStepLR(o, { 5, 2, 5 }, 0.5) end,
    torch = "S.MultiStepLR(o, [5, 2, 5], 0.5)" },
  { name = "ExponentialLR", steps = 8, opt = sgd,
    make = function(o) return S.ExponentialLR(o, { gamma = 0.9 }) end,
    torch = "S.ExponentialLR(o, gamma=0.9)" },
  { name = "ConstantLR", steps = 6, opt = sgd,
    make = function(o) return S.ConstantLR(o, 0.5, 3) end,
    torch = "S.ConstantLR(o, 0.5, 3)" },
  { name = "ConstantLR defaults", steps = 7, opt = sgd,
    make = function(o) return S.ConstantLR(o) end,
    torch = "S.ConstantLR(o)" },
  { name = "MultiplicativeLR per group", steps = 8, opt = sgd,
    make = function(o) return S.MultiplicativeLR(o, { function() return 0.95 end, function(t) return 1 - t / 20 end })
    end,
    torch = "S.MultiplicativeLR(o, [lambda t: 0.95, lambda t: 1 - t / 20])" },
  { name = "PolynomialLR", steps = 7, opt = sgd,
    make = function(o) return S.PolynomialLR(o, { total_iters = 4, power = 2.0 }) end,
    torch = "S.PolynomialLR(o, total_iters=4, power=2.0)" },
  { name = "CosineAnnealingWarmRestarts T_mult 2", steps = 16, opt = sgd,
    make = function(o) return S.CosineAnnealingWarmRestarts(o, 3, 2, 0.001) end,
    torch = "S.CosineAnnealingWarmRestarts(o, 3, 2, 0.001)" },
  { name = "CosineAnnealingWarmRestarts", steps = 9, opt = sgd,
    make = function(o) return S.CosineAnnealingWarmRestarts(o, { T_0 = 4 }) end,
    torch = "S.CosineAnnealingWarmRestarts(o, T_0=4)" },
}

local function record(case, o, s, from, to, out)
  local function snap()
    local row = {}
    for i, g in ipairs(o.param_groups) do
      row[#row + 1] = g.lr
      if case.momentum then row[#row + 1] = g.momentum end
      if case.beta1 then row[#row + 1] = g.betas[1] end
    end
    out[#out + 1] = row
  end
  if from == 0 then snap() end
  for t = math.max(from, 1), to do
    if case.metrics then s:step(case.metrics[t]) else s:step() end
    snap()
  end
  return out
end

local TORCH = [==[
import json, sys, torch
S = torch.optim.lr_scheduler
cases = json.loads(sys.argv[1])
out = {}
for c in cases:
    p1, p2 = torch.zeros(1, requires_grad=True), torch.zeros(2, requires_grad=True)
    groups = [{"params": [p1], "lr": 0.1}, {"params": [p2], "lr": 0.01}]
    if c["opt"] == "adam":
        o = torch.optim.Adam(groups)
    else:
        o = torch.optim.SGD(groups, lr=0.1, momentum=0.9)
    s = eval(c["make"])
    rows = []
    def snap():
        row = []
        for g in o.param_groups:
            row.append(g["lr"])
            if c["momentum"]:
                row.append(g["momentum"])
            if c["beta1"]:
                row.append(g["betas"][0])
        rows.append(row)
    snap()
    for t in range(c["steps"]):
        o.step()
        if c["metrics"]:
            s.step(c["metrics"][t])
        else:
            s.step()
        snap()
    out[c["name"]] = rows
print(json.dumps(out))
]==]

describe("learning-rate schedulers", function()
  it("give torch 1.13's lr sequences bit for bit", function()
    if not U.have_torch() then
      pending("/usr/bin/python3 cannot import torch: the sequences were not compared with PyTorch's")
      return
    end
    local spec = {}
    for i, c in ipairs(CASES) do
      spec[i] = { name = c.name, make = c.torch, steps = c.steps, opt = c.torch_opt or "sgd",
        momentum = c.momentum or false, beta1 = c.beta1 or false, metrics = c.metrics or false }
    end
    local dir = U.tmpdir()
    U.write(dir .. "/sched.py", TORCH)
    local ok, out = U.run("PYTHONWARNINGS=ignore " .. U.python .. " " .. U.quote(dir .. "/sched.py") .. " " ..
      U.quote(ddp.core.json_encode(spec)))
    U.rm_rf(dir)
    assert.is_true(ok, out)
    local torch = ddp.core.json_decode(out:match("[^\n]*{[^\n]*"))
    for _, c in ipairs(CASES) do
      local o = c.opt()
      local got = record(c, o, c.make(o), 0, c.steps, {})
      local want = torch[c.name]
      assert.are.equal(#want, #got, c.name)
      for t = 1, #want do
        for k = 1, #want[t] do
          assert.are.equal(want[t][k], got[t][k], string.format("%s: step %d, value %d: torch %.17g, ddplua %.17g",
            c.name, t - 1, k, want[t][k], got[t][k] or 0 / 0))
        end
      end
    end
  end)

  it("resume bitwise from ddp.save_checkpoint{scheduler=} in the middle of the schedule", function()
    local dir = U.tmpdir()
    for _, c in ipairs(CASES) do
      local o = c.opt()
      local whole = record(c, o, c.make(o), 0, c.steps, {})
      local half = c.steps // 2
      local o1 = c.opt()
      local s1 = c.make(o1)
      record(c, o1, s1, 1, half, {})
      local path = dir .. "/ckpt.safetensors"
      ddp.save_checkpoint(path, { optimizer = o1, scheduler = s1 })
      local o2 = c.opt()
      local s2 = c.make(o2)
      ddp.load_checkpoint(path, { optimizer = o2, scheduler = s2 })
      local rest = record(c, o2, s2, half + 1, c.steps, {})
      for k, row in ipairs(rest) do
        assert.are.same(whole[half + 1 + k], row, string.format("%s: step %d after resuming at %d", c.name,
          half + k, half))
      end
      -- get_last_lr is the lr of each group after the last step (rows hold lr [, momentum | beta1] per group)
      local row, stride = whole[half + 1], (c.momentum or c.beta1) and 2 or 1
      assert.are.same({ row[1], row[1 + stride] }, s1:get_last_lr(), c.name)
    end
    U.rm_rf(dir)
  end)

  it("CosineAnnealingWarmRestarts takes fractional epochs as torch 1.13's (step(epoch + i / iters))", function()
    if not U.have_torch() then
      pending("/usr/bin/python3 cannot import torch: the sequences were not compared with PyTorch's")
      return
    end
    local epochs = { 0.25, 0.5, 1.75, 3, 4.5, 9.25, 10, 21.5, 2 }
    local dir = U.tmpdir()
    U.write(dir .. "/warm.py", table.concat({
      "import json, torch",
      "p = torch.zeros(1, requires_grad=True)",
      "o = torch.optim.SGD([p], lr=0.1)",
      "s = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(o, 3, 2, 0.001)",
      "out = []",
      "for e in " .. ddp.core.json_encode(epochs) .. ":",
      "    s.step(e)",
      "    out.append(o.param_groups[0]['lr'])",
      "print(json.dumps(out))" }, "\n") .. "\n")
    local ok, out = U.run("PYTHONWARNINGS=ignore " .. U.python .. " " .. U.quote(dir .. "/warm.py"))
    U.rm_rf(dir)
    assert.is_true(ok, out)
    local want = ddp.core.json_decode(out:match("[^\n]*%[[^\n]*"))
    local o = ddp.optim.SGD({ ddp.zeros(1):requires_grad_() }, { lr = 0.1 })
    local s = S.CosineAnnealingWarmRestarts(o, 3, 2, 0.001)
    for i, e in ipairs(epochs) do
      s:step(e)
      assert.are.equal(want[i], o.param_groups[1].lr, string.format("epoch %g: torch %.17g", e, want[i]))
    end
    R.assert_error(function() s:step(-1) end, "expected a non-negative epoch")
    R.assert_error(function() S.MultiStepLR(o, { 1.5 }) end, "milestones[1] must be an integer")
    R.assert_error(function() S.ConstantLR(o, 2) end, "factor must be a number in [0, 1]")
    R.assert_error(function() S.ExponentialLR(o) end, "gamma must be a number")
    R.assert_error(function() S.CosineAnnealingWarmRestarts(o, 0) end, "T_0 must be a positive integer")
  end)

  it("keep their state in plain values; LambdaLR leaves its functions out", function()
    local o = sgd()
    local s = S.LambdaLR(o, function(t) return t + 1 end)
    local sd = s:state_dict()
    assert.is_nil(sd.lr_lambdas)
    assert.is_nil(sd.optimizer)
    assert.are.equal(0, sd.last_epoch)
    local seq = S.SequentialLR(o, { S.StepLR(o, 2), S.LinearLR(o) }, { 2 })
    sd = seq:state_dict()
    assert.are.equal(2, #sd._schedulers)
    assert.is_nil(sd._schedulers[1].optimizer)
    local plateau = S.ReduceLROnPlateau(o)
    assert.are.equal(math.huge, plateau:state_dict().best)
    plateau:step(ddp.tensor(3.5))
    assert.are.equal(3.5, plateau:state_dict().best)
  end)

  it("name bad arguments", function()
    local function fails(pattern, f, ...)
      local ok, err = pcall(f, ...)
      assert.is_false(ok, pattern)
      assert.matches(pattern, tostring(err))
    end
    local o = sgd()
    fails("LambdaLR: lr_lambda must be a function of the step", S.LambdaLR, o, 0.5)
    fails("LambdaLR: expected 2 lr_lambdas %(one per parameter group%), got 1", S.LambdaLR, o, { function() end })
    fails("LambdaLR: lr_lambda%(0%) returned nil, expected a number", S.LambdaLR, o, function() end)
    fails("LinearLR: start_factor must be a number in %[0, 1%], got 2", S.LinearLR, o, 2)
    fails("LinearLR: total_iters must be a positive integer, got 0", S.LinearLR, o, { total_iters = 0 })
    fails("LinearLR: unknown option 'total_steps'", S.LinearLR, o, { total_steps = 3 })
    fails("OneCycleLR: give total_steps, or epochs and steps_per_epoch", S.OneCycleLR, o, 0.1)
    fails("OneCycleLR: max_lr is required", S.OneCycleLR, o, { total_steps = 5 })
    fails("OneCycleLR: expected 2 values for max_lr %(one per parameter group%), got 3", S.OneCycleLR, o,
      { 0.1, 0.2, 0.3 }, 10)
    fails('OneCycleLR: anneal_strategy must be "cos" or "linear", got exp', S.OneCycleLR, o,
      { max_lr = 1, total_steps = 5, anneal_strategy = "exp" })
    fails("OneCycleLR: pct_start must be a number in %[0, 1%], got 1.5", S.OneCycleLR, o, 1, 10, nil, nil, 1.5)
    local oc = S.OneCycleLR(sgd(), 1, 2)
    oc:step()
    oc:step()
    fails("OneCycleLR: tried to step 4 times; the specified number of total steps is 2", function() oc:step() end)
    fails("SequentialLR: expected 1 milestones %(one fewer than the 2 schedulers%), got 0", S.SequentialLR, o,
      { S.StepLR(o, 1), S.StepLR(o, 1) }, {})
    fails("SequentialLR: schedulers%[1%] belongs to another optimizer", S.SequentialLR, o, { S.StepLR(sgd(), 1) }, {})
    fails("SequentialLR: schedulers%[2%] is not a scheduler", S.SequentialLR, o, { S.StepLR(o, 1), 3 }, { 1 })
    fails("ReduceLROnPlateau: factor must be < 1, got 1", S.ReduceLROnPlateau, o, { factor = 1.0 })
    fails('ReduceLROnPlateau: mode must be "min" or "max", got up', S.ReduceLROnPlateau, o, "up")
    fails('ReduceLROnPlateau: threshold_mode must be "rel" or "abs", got x', S.ReduceLROnPlateau, o,
      { threshold_mode = "x" })
    fails("ReduceLROnPlateau: step expects the metric %(a number or a one%-element tensor%), got string", function()
      S.ReduceLROnPlateau(o):step("low")
    end)
    fails("StepLR: expected an optimizer, got number", S.StepLR, 3, 1)
    fails("StepLR: step_size must be a positive integer, got nil", S.StepLR, o)
    fails("StepLR: last_epoch must be an integer >= %-1, got %-2", S.StepLR, o, { step_size = 1, last_epoch = -2 })
    fails("StepLR: parameter group 1 has no initial_lr, which resuming with last_epoch=3 needs", S.StepLR, sgd(), 1,
      0.1, 3)
  end)
end)
