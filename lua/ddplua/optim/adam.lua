-- optim.Adam(params, {lr=1e-3, betas={0.9, 0.999}, eps=1e-8, weight_decay=0, amsgrad=false})
-- and optim.AdamW(params, {..., weight_decay=1e-2}), PyTorch's updates:
--   Adam:  g += weight_decay * p          AdamW: p *= 1 - lr * weight_decay
--   m = b1 m + (1 - b1) g,  v = b2 v + (1 - b2) g^2,  t += 1
--   amsgrad: vmax = max(vmax, v), and vmax replaces v below (state max_exp_avg_sq)
--   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
local core = require "ddplua.core"
local Optimizer = require "ddplua.optim.optimizer"

-- lr, eps, weight_decay (and `numbers`, when given, instead) and the betas pair: shared with optim/composed.lua
local function check_betas(g, fail, numbers)
  Optimizer.check_numbers(g, numbers or { "lr", "eps", "weight_decay" }, fail)
  local b = g.betas
  if type(b) ~= "table" or #b ~= 2 then fail("betas must be a pair {beta1, beta2}") end
  for i = 1, 2 do
    if type(b[i]) ~= "number" or b[i] < 0 or b[i] >= 1 then
      fail(string.format("invalid beta parameter at index %d: %s (expected 0 <= beta < 1)", i, tostring(b[i])))
    end
  end
end

local function check_group(g, fail)
  check_betas(g, fail)
  if type(g.amsgrad) ~= "boolean" then fail("amsgrad must be a boolean, got " .. tostring(g.amsgrad)) end
end

local M = { check_betas = check_betas }

M.Adam = Optimizer:extend("Adam", { lr = 1e-3, betas = { 0.9, 0.999 }, eps = 1e-8, weight_decay = 0, amsgrad = false },
  check_group,
  function(g, state) core._adam_step(g, state, false) end)

M.AdamW = Optimizer:extend("AdamW", { lr = 1e-3, betas = { 0.9, 0.999 }, eps = 1e-8, weight_decay = 1e-2, amsgrad = false },
  check_group, function(g, state) core._adam_step(g, state, true) end)

return M
