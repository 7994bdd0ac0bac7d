-- optim.Optimizer: parameter groups, zero_grad, step and state dicts shared
-- by SGD, Adam and AdamW. A subclass gives its name, its hyperparameters
-- with their defaults, a check of one group, and the C step of one group
-- (one Lua -> C call per group per step; the loop over parameters is in C).
--
-- self.state is keyed by parameter tensor (state[p] = {momentum_buffer=}
-- or {step=, exp_avg=, exp_avg_sq=}); state_dict() names parameters by
-- position instead: 1, 2, ... across the groups in order (PyTorch's ids
-- counted from 1, like every Lua position).
local ddp = require "ddplua"
local E = require "ddplua.errors"
local core = ddp.core

local Optimizer = {}
Optimizer.__index = Optimizer
Optimizer.__name = "Optimizer"

--- For a check_group: fail unless each g[key] is a number >= min (0 when
--- not given), NaN refused.
function Optimizer.check_numbers(g, keys, fail, min)
  min = min or 0
  for _, key in ipairs(keys) do
    local v = g[key]
    if type(v) ~= "number" or v ~= v or v < min then
      fail(string.format("invalid %s %s (expected a number >= %g)", key, tostring(v), min))
    end
  end
end

--- A subclass: cls = Optimizer:extend(name, defaults, check_group, step_group)
function Optimizer:extend(name, defaults, check_group, step_group)
  local cls = setmetatable({}, { __index = self, __call = function(c, ...) return c.new(c, ...) end })
  cls.__index, cls.__name = cls, name
  cls.defaults_template, cls.check_group, cls.step_group = defaults, check_group, step_group
  cls.__tostring = self.__tostring
  return cls
end

-- What learning-rate schedulers add to a parameter group (PyTorch's names):
-- groups and load_state_dict accept them beside the optimizer's own hyperparameters.
local SCHEDULER_KEYS = { initial_lr = true, max_lr = true, min_lr = true, base_momentum = true, max_momentum = true }

local function type_name(v) return ddp.is_tensor(v) and "tensor" or type(v) end

local function is_group_list(params) return type(params[1]) == "table" and not ddp.is_tensor(params[1]) end

function Optimizer.new(cls, params, opts)
  local self = setmetatable({ param_groups = {}, state = {} }, cls)
  local name = cls.__name
  if type(params) ~= "table" or ddp.is_tensor(params) then
    E.raise(string.format("%s: expected a list of parameters or of parameter groups, got %s", name,
      type_name(params)))
  end
  if getmetatable(params) and getmetatable(params).__is_module then
    E.raise(string.format("%s: expected a list of parameters, got a module (pass model:parameters())", name))
  end
  if opts ~= nil and type(opts) ~= "table" then
    E.raise(string.format("%s: options must be a table, got %s", name, type(opts)))
  end
  opts = opts or {}
  self.defaults = {}
  for k, v in pairs(cls.defaults_template) do self.defaults[k] = v end
  for k, v in pairs(opts) do
    if cls.defaults_template[k] == nil then
      E.raise(string.format("%s: unknown option '%s' (valid options: %s)", name, tostring(k), self:_option_names()))
    end
    self.defaults[k] = v
  end
  if #params == 0 then E.raise(string.format("%s: got an empty parameter list", name)) end
  local groups = is_group_list(params) and params or { { params = params } }
  for _, g in ipairs(groups) do self:add_param_group(g) end
  return self
end

function Optimizer:_option_names()
  local names = {}
  for k in pairs(self.defaults_template) do names[#names + 1] = k end
  table.sort(names)
  return table.concat(names, ", ")
end

--- Adds {params=..., <hyperparameter>=...}; missing hyperparameters take
--- the optimizer's defaults.
function Optimizer:add_param_group(group)
  local name, gi = self.__name, #self.param_groups + 1
  if type(group) ~= "table" or ddp.is_tensor(group) then
    E.raise(string.format("%s: parameter group %d must be a table {params=...}, got %s", name, gi, type_name(group)))
  end
  local params = group.params
  if ddp.is_tensor(params) then params = { params } end
  if type(params) ~= "table" then
    E.raise(string.format("%s: parameter group %d has no params list", name, gi))
  end
  if #params == 0 then E.raise(string.format("%s: parameter group %d has an empty parameter list", name, gi)) end
  local seen = {}
  for _, g in ipairs(self.param_groups) do for _, p in ipairs(g.params) do seen[p] = true end end
  local list = {}
  for i, p in ipairs(params) do
    if not ddp.is_tensor(p) then
      E.raise(string.format("%s: parameter %d of group %d is a %s, expected a tensor", name, i, gi, type_name(p)))
    end
    if not p.is_leaf then
      E.raise(string.format("%s: parameter %d of group %d is not a leaf tensor (optimizers update leaves)", name, i,
        gi))
    end
    if not p:is_floating_point() then
      E.raise(string.format("%s: parameter %d of group %d is %s; parameters must be floating point", name, i, gi,
        p:dtype()))
    end
    if seen[p] then
      E.raise(string.format("%s: parameter %d of group %d appears in more than one place in the parameter groups",
        name, i, gi))
    end
    seen[p] = true
    list[i] = p
  end
  local g = { params = list }
  for k, v in pairs(group) do
    if k ~= "params" then
      if self.defaults[k] == nil and not SCHEDULER_KEYS[k] then
        E.raise(string.format("%s: unknown option '%s' in parameter group %d (valid options: %s)", name, tostring(k),
          gi, self:_option_names()))
      end
      g[k] = v
    end
  end
  for k, v in pairs(self.defaults) do
    if g[k] == nil then g[k] = type(v) == "table" and { table.unpack(v) } or v end
  end
  self.check_group(g, function(msg) E.raise(string.format("%s: %s (parameter group %d)", name, msg, gi)) end)
  self.param_groups[gi] = g
end

--- Sets every gradient to nil (set_to_none, the default) or zero; tensors
--- marked with core.keep_grad_buf(t, true) are always zeroed in place.
function Optimizer:zero_grad(set_to_none)
  if set_to_none == nil then set_to_none = true end
  for _, g in ipairs(self.param_groups) do core._zero_grads(g.params, set_to_none) end
end

--- One update of every parameter that has a gradient. With a closure, it
--- is called with gradients enabled first and its result returned.
function Optimizer:step(closure)
  local loss
  if closure ~= nil then loss = ddp.enable_grad(closure) end
  for _, g in ipairs(self.param_groups) do
    self.check_group(g, function(msg) E.raise(string.format("%s: %s", self.__name, msg)) end)
    self.step_group(g, self.state)
  end
  return loss
end

function Optimizer:state_dict()
  local state, groups, pos = {}, {}, 0
  for gi, g in ipairs(self.param_groups) do
    local ids = {}
    for i, p in ipairs(g.params) do
      pos = pos + 1
      ids[i] = pos
      local s = self.state[p]
      if s ~= nil then
        local copy = {}
        for k, v in pairs(s) do copy[k] = v end
        state[pos] = copy
      end
    end
    local cg = { params = ids }
    for k, v in pairs(g) do
      if k ~= "params" then cg[k] = type(v) == "table" and { table.unpack(v) } or v end
    end
    groups[gi] = cg
  end
  return { state = state, param_groups = groups }
end

--- Restores hyperparameters and state saved by state_dict(); the groups
--- must hold the same numbers of parameters. State tensors are copied and
--- cast to their parameter's dtype and device. Everything is checked before
--- anything changes: a group's hyperparameters as the optimizer checks its
--- own (an unknown one, or lr = "0.1", is an error naming the group), each
--- state value a tensor of its parameter's shape or a number.
function Optimizer:load_state_dict(sd)
  local name = self.__name
  local function fail(fmt, ...) E.raisef("%s: load_state_dict: " .. fmt, name, ...) end
  if type(sd) ~= "table" or type(sd.param_groups) ~= "table" or type(sd.state) ~= "table" then
    fail("expects a table {state=, param_groups=} from state_dict()")
  end
  if #sd.param_groups ~= #self.param_groups then
    fail("the loaded state dict has %d parameter groups, the optimizer has %d", #sd.param_groups, #self.param_groups)
  end
  local by_pos, merged = {}, {}
  for gi, g in ipairs(self.param_groups) do
    local sg = sd.param_groups[gi]
    if type(sg) ~= "table" or type(sg.params) ~= "table" or #sg.params ~= #g.params then
      fail("parameter group %d of the loaded state dict has %s parameters, the optimizer's has %d", gi,
        type(sg) == "table" and type(sg.params) == "table" and tostring(#sg.params) or "no", #g.params)
    end
    for i, p in ipairs(g.params) do by_pos[sg.params[i]] = p end
    local m = {}
    for k, v in pairs(g) do m[k] = v end
    for k, v in pairs(sg) do
      if k ~= "params" then
        if self.defaults[k] == nil and not SCHEDULER_KEYS[k] then
          fail("param_groups[%d] has an unknown hyperparameter '%s' (valid: %s)", gi, tostring(k), self:_option_names())
        end
        m[k] = type(v) == "table" and { table.unpack(v) } or v
      end
    end
    self.check_group(m, function(msg) fail("param_groups[%d]: %s", gi, msg) end)
    merged[gi] = m
  end
  local new_state = {}
  for pos, s in pairs(sd.state) do
    local p = by_pos[pos]
    if p == nil then fail("the loaded state names parameter %s, which no group holds", tostring(pos)) end
    if type(s) ~= "table" then fail("state[%s] is a %s, expected a table", tostring(pos), type_name(s)) end
    local copy = {}
    for k, v in pairs(s) do
      if ddp.is_tensor(v) then
        if table.concat(v:size(), "x") ~= table.concat(p:size(), "x") then
          fail("loaded state '%s' of parameter %s has shape [%s] but the parameter has shape [%s]", tostring(k),
            tostring(pos), table.concat(v:size(), ", "), table.concat(p:size(), ", "))
        end
        copy[k] = ddp.no_grad(function() return v:detach():to(p:dtype(), p:device()):clone() end)
      elseif math.type(v) == "integer" and v >= 0 and k == "step" then
        copy[k] = v
      elseif self.scalar_state and self.scalar_state[k] and type(v) == "number" and v == v then
        copy[k] = v -- a per-parameter number of the optimizer's own (NAdam's mu_product)
      else
        fail("state[%s].%s is %s, expected %s", tostring(pos), tostring(k), type_name(v) == "string" and
          string.format("the string %q", v) or tostring(v), k == "step" and "a non-negative integer step count" or
          "a tensor of the parameter's shape")
      end
    end
    new_state[p] = copy
  end
  for gi, g in ipairs(self.param_groups) do
    for k, v in pairs(merged[gi]) do g[k] = v end
  end
  self.state = new_state
end

function Optimizer.__tostring(self)
  local lines = { self.__name .. " (" }
  for gi, g in ipairs(self.param_groups) do
    lines[#lines + 1] = string.format("Parameter Group %d", gi - 1)
    local keys = {}
    for k in pairs(g) do if k ~= "params" then keys[#keys + 1] = k end end
    table.sort(keys)
    for _, k in ipairs(keys) do
      local v = g[k]
      if type(v) == "table" then v = "(" .. table.concat(v, ", ") .. ")" end
      lines[#lines + 1] = string.format("    %s: %s", k, tostring(v))
    end
  end
  lines[#lines + 1] = ")"
  return table.concat(lines, "\n")
end

return Optimizer
