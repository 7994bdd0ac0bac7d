-- optim.SGD(params, {lr=1e-3, momentum=0, dampening=0, nesterov=false,
-- weight_decay=0}), PyTorch's update:
--   g += weight_decay * p
--   buf = g (first step) or momentum * buf + (1 - dampening) * g
--   p -= lr * (nesterov and g + momentum * buf or buf)      (g when momentum = 0)
local core = require "ddplua.core"
local Optimizer = require "ddplua.optim.optimizer"

local defaults = { lr = 1e-3, momentum = 0, dampening = 0, weight_decay = 0, nesterov = false }

local function number_at_least(g, key, min, fail)
  local v = g[key]
  if type(v) ~= "number" or v ~= v or v < min then
    fail(string.format("invalid %s %s (expected a number >= %g)", key, tostring(v), min))
  end
end

local function check_group(g, fail)
  number_at_least(g, "lr", 0, fail)
  number_at_least(g, "momentum", 0, fail)
  number_at_least(g, "dampening", 0, fail)
  number_at_least(g, "weight_decay", 0, fail)
  if type(g.nesterov) ~= "boolean" then fail("nesterov must be a boolean, got " .. tostring(g.nesterov)) end
  if g.nesterov and (g.momentum <= 0 or g.dampening ~= 0) then
    fail("nesterov momentum requires a momentum > 0 and zero dampening")
  end
end

local function step_group(g, state) core._sgd_step(g, state) end

return Optimizer:extend("SGD", defaults, check_group, step_group)
