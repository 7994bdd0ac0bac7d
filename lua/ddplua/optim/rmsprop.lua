-- optim.RMSprop(params, {lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0,
-- momentum=0, centered=false}), PyTorch's update (src/ops/model_math.h):
--   g += weight_decay * p;  square_avg = alpha * square_avg + (1 - alpha) * g^2
--   avg = sqrt(square_avg - grad_avg^2) + eps  (centered: grad_avg = alpha * grad_avg + (1 - alpha) * g)
--         sqrt(square_avg) + eps               (otherwise)
--   momentum > 0: buf = momentum * buf + g / avg, p -= lr * buf;  else p -= lr * g / avg
-- State per parameter (PyTorch's names): step, square_avg, momentum_buffer, grad_avg.
local core = require "ddplua.core"
local Optimizer = require "ddplua.optim.optimizer"

local function check_group(g, fail)
  Optimizer.check_numbers(g, { "lr", "alpha", "eps", "weight_decay", "momentum" }, fail)
  if type(g.centered) ~= "boolean" then fail("centered must be a boolean, got " .. tostring(g.centered)) end
end

return Optimizer:extend("RMSprop",
  { lr = 1e-2, alpha = 0.99, eps = 1e-8, weight_decay = 0, momentum = 0, centered = false }, check_group,
  function(g, state) core._rmsprop_step(g, state) end)
