-- Elementwise activation modules, one line each below: the class name and
-- the op-table op it runs (src/ops/op_table.h; the runtime registers every
-- op there as a tensor method). A module's constructor takes the op's
-- parameters, positionally or by name ({negative_slope = 0.2}), with the
-- defaults the op table declares (core._unary_params: PyTorch's), then
-- PyTorch's `inplace` (accepted for PyTorch's sake: the result is the same,
-- computed out of place); forward passes them on. A parameter PyTorch
-- requires (threshold's threshold and value: a NaN default in the op table)
-- must be given. nn (init.lua) exports the classes and nn.F (functional.lua)
-- M.F: each op as a function, and the forms that are not one op (gelu's
-- approximate, relu6), so a new activation is one line here. nn.Identity(...)
-- returns its input (its arguments are ignored, as PyTorch's are).
local core = require "ddplua.core"
local E = require "ddplua.errors"
local Module = require "ddplua.nn.module"
local util = require "ddplua.nn.util"

local M = { modules = {}, ops = {}, F = {} }

-- op's parameters, {{name, default}, ...} (core._unary_params: the op table's); a NaN default marks one PyTorch
-- requires (threshold's)
local function params_of(op) return core._unary_params[op] or {} end
local function required(p) return p[2] ~= p[2] end

local function quoted(v) return type(v) == "string" and string.format("%q", v) or tostring(v) end

-- o (all optional):
--   extra:  a PyTorch setting in the place of inplace (GELU's approximate), {name, check(self, value)}
--   fixed:  the op's parameters, fixed (ReLU6: hardtanh's 0, 6); the constructor then takes inplace only
--   op:     function(self) -> the op forward runs (GELU's approximation), default op
--   check:  function(who, values by name): PyTorch's checks of the values, for the module and nn.F forms;
--           module_check the module's alone (nn.Hardtanh's max_val > min_val)
--   repr:   function(self) -> extra_repr (default "name=value, ...")
local function activation(name, op, o)
  o = o or {}
  local params = o.fixed and {} or params_of(op)
  local names = {}
  for i, p in ipairs(params) do names[i] = p[1] end
  names[#names + 1] = o.extra and o.extra[1] or "inplace"

  local cls = Module:extend(name)
  function cls:__init(...)
    local opts = util.args(name, names, ...)
    if opts.inplace ~= nil and type(opts.inplace) ~= "boolean" then
      E.raise(string.format("%s: inplace must be a boolean, got %s", name, type(opts.inplace)))
    end
    for _, p in ipairs(params) do
      local v = opts[p[1]]
      if v == nil then
        if required(p) then
          E.raise(string.format("%s: %s is required (it has no default, as in PyTorch)", name, p[1]))
        end
        v = p[2]
      end
      if type(v) ~= "number" then E.raise(string.format("%s: %s must be a number, got %s", name, p[1], type(v))) end
      self[p[1]] = v
    end
    if o.check then o.check(name, self) end
    if o.module_check then o.module_check(name, self) end
    if o.extra then o.extra[2](self, opts[o.extra[1]]) end
  end
  function cls:forward(x)
    local f = o.op and o.op(self) or op
    if o.fixed then return x[f](x, table.unpack(o.fixed)) end
    local vals = {}
    for i, p in ipairs(params) do vals[i] = self[p[1]] end
    return x[f](x, table.unpack(vals, 1, #params))
  end
  function cls:extra_repr()
    if o.repr then return o.repr(self) end
    local parts = {}
    for i, p in ipairs(params) do parts[i] = string.format("%s=%g", p[1], self[p[1]]) end
    return table.concat(parts, ", ")
  end
  M.modules[name] = cls
  M[name] = cls
  if o.fixed then return end
  M.ops[#M.ops + 1] = op
  -- nn.F.op(x, params...): the op, with the required parameters and PyTorch's checks of the module
  local fparams = params_of(op)
  M.F[op] = function(x, ...)
    if o.check or next(fparams) then
      local vals = {}
      for i, p in ipairs(fparams) do
        local v = select(i, ...)
        if v == nil and required(p) then
          E.raise(string.format("%s: %s (argument %d) is required (it has no default, as in PyTorch)", op, p[1],
            i + 1))
        end
        if v == nil then v = p[2] end
        vals[p[1]] = v
      end
      if o.check then o.check(op, vals) end
    end
    return x[op](x, ...)
  end
end

-- GELU(approximate = "none"): "none" is the exact erf form, "tanh" PyTorch's tanh approximation (op gelu_tanh)
local function approximate_of(who, v)
  if v == nil then return "none" end
  if v ~= "none" and v ~= "tanh" then
    E.raise(string.format('%s: approximate must be "none" or "tanh", got %s', who, quoted(v)))
  end
  return v
end

activation("ReLU", "relu")
activation("GELU", "gelu", {
  extra = { "approximate", function(self, v) self.approximate = approximate_of("GELU", v) end },
  op = function(self) return self.approximate == "tanh" and "gelu_tanh" or "gelu" end,
  repr = function(self)
    return self.approximate == "none" and "" or string.format("approximate='%s'", self.approximate)
  end,
})
activation("Tanh", "tanh")
activation("Sigmoid", "sigmoid")
activation("LeakyReLU", "leaky_relu") -- LeakyReLU(negative_slope = 0.01)
activation("ELU", "elu") -- ELU(alpha = 1)
activation("SiLU", "silu")
activation("Softplus", "softplus") -- Softplus(beta = 1, threshold = 20)
activation("Hardtanh", "hardtanh", { -- Hardtanh(min_val = -1, max_val = 1)
  module_check = function(who, v)
    if not (v.max_val > v.min_val) then
      E.raise(string.format("%s: max_val (%g) must be greater than min_val (%g)", who, v.max_val, v.min_val))
    end
  end,
})
activation("ReLU6", "hardtanh", { fixed = { 0, 6 }, repr = function() return "" end }) -- hardtanh(x, 0, 6)
activation("Hardsigmoid", "hardsigmoid")
activation("Hardswish", "hardswish")
activation("Mish", "mish")
activation("SELU", "selu")
activation("CELU", "celu", { -- CELU(alpha = 1)
  check = function(who, v)
    if v.alpha == 0 then E.raise(who .. ": alpha cannot be 0 (celu divides by it)") end
  end,
})
activation("LogSigmoid", "logsigmoid")
activation("Softsign", "softsign")
activation("Tanhshrink", "tanhshrink")
local function lambd_check(who, v)
  if type(v.lambd) == "number" and not (v.lambd >= 0) then
    E.raise(string.format("%s: lambd must be greater or equal to 0, got %g", who, v.lambd))
  end
end
-- Softshrink(lambd = 0.5), Hardshrink(lambd = 0.5), printed as PyTorch's: Softshrink(0.5)
local function lambd_repr(self) return string.format("%g", self.lambd) end
activation("Softshrink", "softshrink", { check = lambd_check, repr = lambd_repr })
activation("Hardshrink", "hardshrink", { repr = lambd_repr })
activation("Threshold", "threshold") -- Threshold(threshold, value): both required, as PyTorch's

-- nn.F's forms that are not one op each
--- gelu(x [, approximate]): approximate "none" (the default) or "tanh", or as {approximate = ...}
function M.F.gelu(x, approximate, ...)
  if select("#", ...) > 0 then
    E.raise(string.format("gelu: expected at most 1 argument after the tensor (approximate), got %d",
      select("#", ...) + 1))
  end
  if type(approximate) == "table" then
    approximate = util.check_opts("gelu", approximate, { "approximate" }).approximate
  end
  return approximate_of("gelu", approximate) == "tanh" and x:gelu_tanh() or x:gelu()
end
--- relu6(x) = hardtanh(x, 0, 6)
function M.F.relu6(x, ...)
  if select("#", ...) > 0 then
    E.raise(string.format("relu6: expected no argument after the tensor, got %d", select("#", ...)))
  end
  return x:hardtanh(0, 6)
end

M.Identity = Module:extend("Identity")
function M.Identity:__init() end
function M.Identity:forward(x) return x end

return M
