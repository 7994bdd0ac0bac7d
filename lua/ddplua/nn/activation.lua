-- Elementwise activation modules, one line each below: the class name and
-- the op-table op it runs (src/ops/op_table.h; the runtime registers every
-- op there as a tensor method). A module's constructor takes the op's
-- parameters, positionally or by name ({negative_slope = 0.2}), with the
-- defaults the op table declares (core._unary_params: PyTorch's), then
-- PyTorch's `inplace` (accepted for PyTorch's sake: the result is the same,
-- computed out of place); forward passes them on. nn (init.lua) exports the
-- classes and nn.F (functional.lua) the ops as functions, so a new
-- activation is one line here. nn.Identity(...) returns its input (its
-- arguments are ignored, as PyTorch's are).
local core = require "ddplua.core"
local E = require "ddplua.errors"
local Module = require "ddplua.nn.module"
local util = require "ddplua.nn.util"

local M = { modules = {}, ops = {} }

-- extra: a PyTorch setting in the place of inplace (GELU's approximate), {name, check(self, value)}
local function activation(name, op, extra)
  local params = core._unary_params[op] or {} -- { {name, default}, ... }
  local names = {}
  for i, p in ipairs(params) do names[i] = p[1] end
  names[#names + 1] = extra and extra[1] or "inplace"

  local cls = Module:extend(name)
  function cls:__init(...)
    local opts = util.args(name, names, ...)
    if opts.inplace ~= nil and type(opts.inplace) ~= "boolean" then
      E.raise(string.format("%s: inplace must be a boolean, got %s", name, type(opts.inplace)))
    end
    for _, p in ipairs(params) do
      local v = opts[p[1]]
      if v == nil then v = p[2] end
      if type(v) ~= "number" then E.raise(string.format("%s: %s must be a number, got %s", name, p[1], type(v))) end
      self[p[1]] = v
    end
    if extra then extra[2](self, opts[extra[1]]) end
  end
  function cls:forward(x)
    local vals = {}
    for i, p in ipairs(params) do vals[i] = self[p[1]] end
    return x[op](x, table.unpack(vals, 1, #params))
  end
  function cls:extra_repr()
    local parts = {}
    for i, p in ipairs(params) do parts[i] = string.format("%s=%g", p[1], self[p[1]]) end
    return table.concat(parts, ", ")
  end
  M.modules[name] = cls
  M[name] = cls
  M.ops[#M.ops + 1] = op
end

activation("ReLU", "relu")
activation("GELU", "gelu", { "approximate", function(self, v) -- the exact erf form, PyTorch's default
  util.unsupported("GELU", "approximate", v, "none", "only the exact erf form is implemented")
  self.approximate = "none"
end })
activation("Tanh", "tanh")
activation("Sigmoid", "sigmoid")
activation("LeakyReLU", "leaky_relu") -- LeakyReLU(negative_slope = 0.01)
activation("ELU", "elu") -- ELU(alpha = 1)
activation("SiLU", "silu")
activation("Softplus", "softplus") -- Softplus(beta = 1, threshold = 20)

M.Identity = Module:extend("Identity")
function M.Identity:__init() end
function M.Identity:forward(x) return x end

return M
