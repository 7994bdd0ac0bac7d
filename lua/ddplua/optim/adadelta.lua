-- optim.Adadelta(params, {lr=1.0, rho=0.9, eps=1e-6, weight_decay=0}),
-- PyTorch's update (src/ops/model_math.h):
--   g += weight_decay * p;  square_avg = rho * square_avg + (1 - rho) * g^2
--   delta = sqrt(acc_delta + eps) / sqrt(square_avg + eps) * g
--   acc_delta = rho * acc_delta + (1 - rho) * delta^2;  p -= lr * delta
-- State per parameter (PyTorch's names): step, square_avg, acc_delta.
local core = require "ddplua.core"
local Optimizer = require "ddplua.optim.optimizer"

local function check_group(g, fail)
  Optimizer.check_numbers(g, { "lr", "eps", "weight_decay" }, fail)
  local rho = g.rho
  if type(rho) ~= "number" or not (rho >= 0 and rho <= 1) then
    fail(string.format("invalid rho %s (expected a number in [0, 1])", tostring(rho)))
  end
end

return Optimizer:extend("Adadelta", { lr = 1.0, rho = 0.9, eps = 1e-6, weight_decay = 0 }, check_group,
  function(g, state) core._adadelta_step(g, state) end)
