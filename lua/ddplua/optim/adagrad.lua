-- optim.Adagrad(params, {lr=1e-2, lr_decay=0, weight_decay=0,
-- initial_accumulator_value=0, eps=1e-10}), PyTorch's update
-- (src/ops/model_math.h):
--   step += 1;  g += weight_decay * p;  clr = lr / (1 + (step - 1) * lr_decay)
--   sum += g^2;  p -= clr * g / (sqrt(sum) + eps)
-- State per parameter (PyTorch's names): step, sum (starting at
-- initial_accumulator_value).
local core = require "ddplua.core"
local Optimizer = require "ddplua.optim.optimizer"

local function check_group(g, fail)
  Optimizer.check_numbers(g, { "lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps" }, fail)
end

return Optimizer:extend("Adagrad",
  { lr = 1e-2, lr_decay = 0, weight_decay = 0, initial_accumulator_value = 0, eps = 1e-10 }, check_group,
  function(g, state) core._adagrad_step(g, state) end)
