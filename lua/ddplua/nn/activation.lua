-- Elementwise activation modules, one line each below: the class name and
-- the op-table op it runs (src/ops/op_table.h; the runtime registers every
-- op there as a tensor method). A module's constructor takes the op's
-- parameters, positionally or by name ({negative_slope = 0.2}), with the
-- defaults the op table declares (core._unary_params: PyTorch's); forward
-- passes them on. nn (init.lua) exports the classes and nn.F
-- (functional.lua) the ops as functions, so a new activation is one line
-- here.
local core = require "ddplua.core"
local Module = require "ddplua.nn.module"

local M = { modules = {}, ops = {} }

local function activation(name, op)
  local params = core._unary_params[op] or {} -- { {name, default}, ... }
  local names = {}
  for i, p in ipairs(params) do names[i] = p[1] end
  local valid = { table.unpack(names) }
  valid[#valid + 1] = "inplace"

  local cls = Module:extend(name)
  function cls:__init(...)
    local args, n = { ... }, select("#", ...)
    local opts = {}
    if n == 1 and type(args[1]) == "table" then
      opts = args[1]
      for k in pairs(opts) do
        local ok = false
        for _, v in ipairs(valid) do ok = ok or k == v end
        if not ok then
          error(string.format("%s: unknown option '%s' (valid options: %s)", name, tostring(k),
            table.concat(valid, ", ")), 3)
        end
      end
    else
      if n > #params + 1 then
        error(string.format("%s: expected at most %d argument(s) (%s), got %d", name, #params + 1,
          table.concat(valid, ", "), n), 3)
      end
      for i, p in ipairs(params) do opts[p[1]] = args[i] end
      opts.inplace = args[#params + 1]
    end
    if opts.inplace ~= nil and type(opts.inplace) ~= "boolean" then
      error(string.format("%s: inplace must be a boolean, got %s", name, type(opts.inplace)), 3)
    end
    if opts.inplace then
      error(name .. ": inplace=true is not supported (the activation returns a new tensor)", 3)
    end
    for _, p in ipairs(params) do
      local v = opts[p[1]]
      if v == nil then v = p[2] end
      if type(v) ~= "number" then
        error(string.format("%s: %s must be a number, got %s", name, p[1], type(v)), 3)
      end
      self[p[1]] = v
    end
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
activation("GELU", "gelu") -- the exact erf form, PyTorch's default
activation("Tanh", "tanh")
activation("Sigmoid", "sigmoid")
activation("LeakyReLU", "leaky_relu") -- LeakyReLU(negative_slope = 0.01)
activation("ELU", "elu") -- ELU(alpha = 1)
activation("SiLU", "silu")
activation("Softplus", "softplus") -- Softplus(beta = 1, threshold = 20)

return M
