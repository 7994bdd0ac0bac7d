-- optim.SGD(params, {lr=1e-3, momentum=0, dampening=0, nesterov=false,
-- weight_decay=0}), PyTorch's update:
--   g += weight_decay * p
--   buf = g (first step) or momentum * buf + (1 - dampening) * g
--   p -= lr * (nesterov and g + momentum * buf or buf)      (g when momentum = 0)
local core = require "ddplua.core"
local Optimizer = require "ddplua.optim.optimizer"

local defaults = { lr = 1e-3, momentum = 0, dampening = 0, weight_decay = 0, nesterov = false }

local function check_group(g, fail)
  Optimizer.check_numbers(g, { "lr", "momentum", "dampening", "weight_decay" }, fail)
  if type(g.nesterov) ~= "boolean" then fail("nesterov must be a boolean, got " .. tostring(g.nesterov)) end
  if g.nesterov and (g.momentum <= 0 or g.dampening ~= 0) then
    fail("nesterov momentum requires a momentum > 0 and zero dampening")
  end
end

local function step_group(g, state) core._sgd_step(g, state) end

return Optimizer:extend("SGD", defaults, check_group, step_group)
