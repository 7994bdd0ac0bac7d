-- optim.Adamax, optim.NAdam and optim.RAdam: PyTorch 1.13's single-tensor updates, composed from the tensor ops
-- (under no_grad, in place through copy_), one parameter at a time. The other optimizers run one C loop per group;
-- these cost a dozen tensor ops a parameter, which is what PyTorch's per-parameter loop does too.
--
--   Adamax(params, {lr=2e-3, betas={0.9, 0.999}, eps=1e-8, weight_decay=0})
--     m = b1 m + (1 - b1) g;  u = max(b2 u, |g| + eps);  p -= lr / (1 - b1^t) * m / u
--   NAdam(params, {lr=2e-3, betas={0.9, 0.999}, eps=1e-8, weight_decay=0, momentum_decay=4e-3})
--     mu_t = b1 (1 - 0.96^(t psi) / 2), mu_product *= mu_t;  m, v as Adam's;  d = sqrt(v / (1 - b2^t)) + eps
--     p -= lr (1 - mu_t) / (1 - mu_product) g / d + lr mu_{t+1} / (1 - mu_product mu_{t+1}) m / d
--   RAdam(params, {lr=1e-3, betas={0.9, 0.999}, eps=1e-8, weight_decay=0})
--     m, v as Adam's; rho_t = rho_inf - 2 t b2^t / (1 - b2^t); past rho_t > 5 the rectified adaptive step
--     p -= lr r sqrt(1 - b2^t) m / (1 - b1^t) / (sqrt(v) + eps), else p -= lr m / (1 - b1^t)
-- weight_decay adds weight_decay * p to the gradient first (L2, as PyTorch 1.13's). State per parameter, PyTorch's
-- names: step, exp_avg, exp_inf (Adamax) or exp_avg_sq, mu_product (NAdam; a float32 value, as PyTorch's tensor).
-- NAdam's mu_product_next is mu_product mu_{t+1}, PyTorch 2.0's: 1.13 multiplies by mu_t once more (a bug 2.0
-- fixed), which shrinks the momentum term's step a little.
local ddp = require "ddplua"
local Optimizer = require "ddplua.optim.optimizer"

local M = {}

local check_group = require("ddplua.optim.adam").check_betas -- (g, fail [, the numbers to check])

-- each parameter with a gradient: fn(p, grad with weight decay added, its state (made by init(p) at first))
local function each_param(g, state, init, fn)
  ddp.no_grad(function()
    for _, p in ipairs(g.params) do
      local grad = p.grad
      if grad ~= nil then
        if g.weight_decay ~= 0 then grad = grad + p * g.weight_decay end
        local s = state[p]
        if s == nil then
          s = init(p)
          state[p] = s
        end
        s.step = s.step + 1
        fn(p, grad, s)
      end
    end
  end)
end

local function zeros(p) return ddp.zeros_like(p) end
local function f32(v) return (string.unpack("<f", string.pack("<f", v))) end

M.Adamax = Optimizer:extend("Adamax", { lr = 2e-3, betas = { 0.9, 0.999 }, eps = 1e-8, weight_decay = 0 },
  check_group, function(g, state)
    local b1, b2 = g.betas[1], g.betas[2]
    each_param(g, state, function(p) return { step = 0, exp_avg = zeros(p), exp_inf = zeros(p) } end,
      function(p, grad, s)
        s.exp_avg:copy_(s.exp_avg * b1 + grad * (1 - b1))
        s.exp_inf:copy_(ddp.maximum(s.exp_inf * b2, grad:abs() + g.eps))
        p:copy_(p - s.exp_avg / s.exp_inf * (g.lr / (1 - b1 ^ s.step)))
      end)
  end)

M.NAdam = Optimizer:extend("NAdam", { lr = 2e-3, betas = { 0.9, 0.999 }, eps = 1e-8, weight_decay = 0,
  momentum_decay = 4e-3 }, function(g, fail)
    check_group(g, fail, { "lr", "eps", "weight_decay", "momentum_decay" })
  end, function(g, state)
    local b1, b2 = g.betas[1], g.betas[2]
    each_param(g, state, function(p)
      return { step = 0, mu_product = 1.0, exp_avg = zeros(p), exp_avg_sq = zeros(p) }
    end, function(p, grad, s)
      local t = s.step
      local mu = b1 * (1 - 0.5 * 0.96 ^ (t * g.momentum_decay))
      local mu_next = b1 * (1 - 0.5 * 0.96 ^ ((t + 1) * g.momentum_decay))
      -- PyTorch keeps mu_product in a float32 tensor: its products round to float32
      s.mu_product = f32(s.mu_product * f32(mu))
      local mu_product_next = f32(s.mu_product * f32(mu_next))
      s.exp_avg:copy_(s.exp_avg * b1 + grad * (1 - b1))
      s.exp_avg_sq:copy_(s.exp_avg_sq * b2 + grad * grad * (1 - b2))
      local denom = (s.exp_avg_sq / (1 - b2 ^ t)):sqrt() + g.eps
      p:copy_(p - grad / denom * (g.lr * (1 - mu) / (1 - s.mu_product))
        - s.exp_avg / denom * (g.lr * mu_next / (1 - mu_product_next)))
    end)
  end)

M.RAdam = Optimizer:extend("RAdam", { lr = 1e-3, betas = { 0.9, 0.999 }, eps = 1e-8, weight_decay = 0 },
  check_group, function(g, state)
    local b1, b2 = g.betas[1], g.betas[2]
    local rho_inf = 2 / (1 - b2) - 1
    each_param(g, state, function(p) return { step = 0, exp_avg = zeros(p), exp_avg_sq = zeros(p) } end,
      function(p, grad, s)
        local t = s.step
        s.exp_avg:copy_(s.exp_avg * b1 + grad * (1 - b1))
        s.exp_avg_sq:copy_(s.exp_avg_sq * b2 + grad * grad * (1 - b2))
        local bc1, bc2 = 1 - b1 ^ t, 1 - b2 ^ t
        local m_hat = s.exp_avg / bc1
        local rho_t = rho_inf - 2 * t * b2 ^ t / bc2
        if rho_t > 5 then
          local rect = math.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
          local adaptive = math.sqrt(bc2) / (s.exp_avg_sq:sqrt() + g.eps)
          p:copy_(p - m_hat * g.lr * adaptive * rect) -- PyTorch's order of the products
        else
          p:copy_(p - m_hat * g.lr)
        end
      end)
  end)

M.NAdam.scalar_state = { mu_product = true } -- a number in the state (load_state_dict takes it)

return M
