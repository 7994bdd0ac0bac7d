-- Elementwise activations: nn.ReLU([inplace]), nn.GELU([approximate])
-- (exact erf form, PyTorch's default "none"; "tanh" is not implemented),
-- nn.Tanh(), nn.Sigmoid(), and nn.Identity(...) (returns its input; its
-- arguments are ignored, as PyTorch's are). ReLU's inplace (positional or
-- {inplace=}) is accepted for PyTorch's sake: the result is the same,
-- computed out of place.
local Module = require "ddplua.nn.module"
local util = require "ddplua.nn.util"

local M = {}

local function activation(name, method, settings, check)
  local cls = Module:extend(name)
  cls.forward = function(_, x) return x[method](x) end
  cls.__init = function(self, ...)
    local opts = util.args(name, settings, ...)
    if check then check(self, opts) end
  end
  M[name] = cls
end

activation("ReLU", "relu", { "inplace" })
activation("GELU", "gelu", { "approximate" }, function(self, o)
  util.unsupported("GELU", "approximate", o.approximate, "none", "only the exact erf form is implemented")
  self.approximate = "none"
end)
activation("Tanh", "tanh", {})
activation("Sigmoid", "sigmoid", {})

M.Identity = Module:extend("Identity")
function M.Identity:__init() end
function M.Identity:forward(x) return x end

return M
