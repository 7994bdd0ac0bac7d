-- optim.Adamax, optim.NAdam and optim.RAdam (lua/ddplua/optim/composed.lua) against PyTorch's on the same
-- parameters and gradient sequences (float64 and float32, weight decay and other settings, RAdam through its
-- unrectified first steps), NAdam against PyTorch 2.0's formula (1.13 multiplies mu_t twice), their state in a state
-- dict (a resumed run continues bitwise), parameters without a gradient left alone, and bad hyperparameters.
local ddp = require "ddplua"
local gc = require "helpers.gradcheck"
local R = require "helpers.ref"
local TR = require "helpers.torch_ref"
local optim = ddp.optim

local STEPS = 8

local OC = require "helpers.optim_cases"

-- PyTorch 2.0's NAdam step (1.13's with mu_product_next = mu_product * mu_next), for the reference
local NADAM_20 = [[
class NAdam20(torch.optim.NAdam):
    @torch.no_grad()
    def step(self):
        for g in self.param_groups:
            b1, b2 = g["betas"]
            for p in g["params"]:
                st = self.state[p]
                if not st:
                    st["step"], st["mu_product"] = 0, torch.tensor(1.)
                    st["exp_avg"], st["exp_avg_sq"] = torch.zeros_like(p), torch.zeros_like(p)
                st["step"] += 1
                t, grad = st["step"], p.grad
                if g["weight_decay"] != 0:
                    grad = grad.add(p, alpha=g["weight_decay"])
                mu = b1 * (1. - 0.5 * (0.96 ** (t * g["momentum_decay"])))
                mu_next = b1 * (1. - 0.5 * (0.96 ** ((t + 1) * g["momentum_decay"])))
                st["mu_product"] *= mu
                mu_product_next = st["mu_product"] * mu_next
                st["exp_avg"].mul_(b1).add_(grad, alpha=1 - b1)
                st["exp_avg_sq"].mul_(b2).addcmul_(grad, grad, value=1 - b2)
                denom = st["exp_avg_sq"].div(1 - b2 ** t).sqrt().add_(g["eps"])
                p.addcdiv_(grad, denom, value=-g["lr"] * (1. - mu) / (1. - st["mu_product"].item()))
                p.addcdiv_(st["exp_avg"], denom, value=-g["lr"] * mu_next / (1. - mu_product_next.item()))
]]

describe("optim.Adamax, optim.NAdam and optim.RAdam", function()
  local p0 = R.randn({ 3, 4 }, 1)
  local gs = {}
  for s = 1, STEPS do gs[s] = R.randn({ 3, 4 }, 20 + s) end
  local cases = {
    { "Adamax", {}, "torch.optim.Adamax" },
    { "Adamax", { lr = 0.05, betas = { 0.8, 0.99 }, eps = 1e-4, weight_decay = 0.1 }, "torch.optim.Adamax" },
    { "NAdam", {}, "NAdam20" },
    { "NAdam", { lr = 0.01, betas = { 0.85, 0.95 }, momentum_decay = 0.01, weight_decay = 0.05 }, "NAdam20" },
    { "RAdam", {}, "torch.optim.RAdam" },
    { "RAdam", { lr = 0.02, betas = { 0.5, 0.6 }, eps = 1e-6, weight_decay = 0.2 }, "torch.optim.RAdam" },
  }

  it("follow PyTorch's updates in float64 and float32", function()
    if not TR.available() then return pending("skipped: /usr/bin/python3 cannot import torch") end
    OC.check_against_torch(cases, p0, gs, STEPS, 1e-13, NADAM_20)
  end)

  it("keep PyTorch's state names, skip parameters without a gradient, and resume bitwise from a state dict", function()
    local want = { Adamax = { "exp_avg", "exp_inf", "step" }, NAdam = { "exp_avg", "exp_avg_sq", "mu_product", "step" },
      RAdam = { "exp_avg", "exp_avg_sq", "step" } }
    for _, case in ipairs(cases) do OC.check_state_resume(case, p0, gs, STEPS, want[case[1]]) end
  end)

  it("reject bad hyperparameters, naming the optimizer", function()
    local p = ddp.zeros(2):requires_grad_()
    R.assert_error(function() optim.Adamax({ p }, { lr = -1 }):step() end, "Adamax: invalid lr -1")
    R.assert_error(function() optim.NAdam({ p }, { betas = { 0.9, 1.0 } }):step() end,
      "NAdam: invalid beta parameter at index 2")
    R.assert_error(function() optim.NAdam({ p }, { momentum_decay = -1 }):step() end, "invalid momentum_decay")
    R.assert_error(function() optim.RAdam({ p }, { amsgrad = true }) end, "RAdam: unknown option 'amsgrad'")
  end)
end)
