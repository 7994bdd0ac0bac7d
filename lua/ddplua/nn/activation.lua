-- Elementwise activations: nn.ReLU(), nn.GELU() (exact erf form, PyTorch's
-- default), nn.Tanh(), nn.Sigmoid().
local Module = require "ddplua.nn.module"

local M = {}

local function activation(name, method)
  local cls = Module:extend(name)
  cls.forward = function(_, x) return x[method](x) end
  M[name] = cls
end

activation("ReLU", "relu")
activation("GELU", "gelu")
activation("Tanh", "tanh")
activation("Sigmoid", "sigmoid")

return M
