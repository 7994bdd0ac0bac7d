-- Learning-rate schedulers (PyTorch's chainable forms): each step() moves
-- last_epoch on by one and sets every group's lr.
--   StepLR(o, {step_size=, gamma=0.1}): lr *= gamma every step_size steps
--   CosineAnnealingLR(o, {T_max=, eta_min=0}):
--     lr_t = eta_min + (base_lr - eta_min) * (1 + cos(pi * t / T_max)) / 2
local M = {}

local Scheduler = {}
Scheduler.__index = Scheduler
M.LRScheduler = Scheduler

local function check_opts(name, opts, valid)
  if type(opts) ~= "table" then error(string.format("%s: expected an options table, got %s", name, type(opts)), 4) end
  for k in pairs(opts) do
    local ok = false
    for _, v in ipairs(valid) do ok = ok or k == v end
    if not ok then
      error(string.format("%s: unknown option '%s' (valid options: %s)", name, tostring(k), table.concat(valid, ", ")),
        4)
    end
  end
end

local function new_scheduler(cls, name, optimizer)
  if type(optimizer) ~= "table" or type(optimizer.param_groups) ~= "table" then
    error(string.format("%s: expected an optimizer, got %s", name, type(optimizer)), 4)
  end
  local self = setmetatable({ optimizer = optimizer, last_epoch = 0, base_lrs = {}, _last_lr = {} }, cls)
  for i, g in ipairs(optimizer.param_groups) do
    if g.initial_lr == nil then g.initial_lr = g.lr end
    self.base_lrs[i] = g.initial_lr
    self._last_lr[i] = g.lr
  end
  return self
end

function Scheduler:step()
  self.last_epoch = self.last_epoch + 1
  local lrs = self:get_lr()
  for i, g in ipairs(self.optimizer.param_groups) do
    g.lr = lrs[i]
    self._last_lr[i] = lrs[i]
  end
end

--- The lr of every group as the last step() set it.
function Scheduler:get_last_lr() return { table.unpack(self._last_lr) } end

--- Everything but the optimizer.
function Scheduler:state_dict()
  local sd = {}
  for k, v in pairs(self) do
    if k ~= "optimizer" then sd[k] = type(v) == "table" and { table.unpack(v) } or v end
  end
  return sd
end

--- Restores what state_dict() returned. Every field is checked against the
--- scheduler's own before anything changes: an unknown field (which would
--- land on the object, over a method) or one of another type is an error
--- naming it, and so is a list of another length (one entry per group).
function Scheduler:load_state_dict(sd)
  local name = getmetatable(self).__name or "LRScheduler"
  local function fail(fmt, ...) error(string.format("%s: load_state_dict: " .. fmt, name, ...), 3) end
  if type(sd) ~= "table" or math.type(sd.last_epoch) ~= "integer" or sd.last_epoch < 0 then
    fail("expected a table from a scheduler's state_dict() (with an integer last_epoch >= 0)")
  end
  local own = self:state_dict()
  for k, v in pairs(sd) do
    local mine = own[k]
    if mine == nil then fail("unknown field '%s'", tostring(k)) end
    if type(v) ~= type(mine) or (math.type(mine) == "integer" and math.type(v) ~= "integer") then
      fail("%s is %s, expected %s like the scheduler's own", k, type(v) == "string" and string.format("%q", v) or
        tostring(v), math.type(mine) == "integer" and "an integer" or "a " .. type(mine))
    end
    if type(v) == "table" then
      if #v ~= #mine then fail("%s has %d entries, the scheduler's own has %d", k, #v, #mine) end
      for i = 1, #v do
        if type(v[i]) ~= "number" then fail("%s[%d] is %s, expected a number", k, i, tostring(v[i])) end
      end
    end
  end
  local cls = getmetatable(self)
  if cls.check_state then cls.check_state(sd, fail) end
  for k, v in pairs(sd) do self[k] = type(v) == "table" and { table.unpack(v) } or v end
end

local function scheduler_class(name)
  local cls = setmetatable({}, { __index = Scheduler, __call = function(c, ...) return c.new(...) end })
  cls.__index = cls
  cls.__name = name
  return cls
end

M.StepLR = scheduler_class("StepLR")

function M.StepLR.new(optimizer, opts)
  check_opts("StepLR", opts, { "step_size", "gamma" })
  if math.type(opts.step_size) ~= "integer" or opts.step_size < 1 then
    error("StepLR: step_size must be a positive integer, got " .. tostring(opts.step_size), 3)
  end
  local gamma = opts.gamma or 0.1
  if type(gamma) ~= "number" then error("StepLR: gamma must be a number, got " .. tostring(gamma), 3) end
  local self = new_scheduler(M.StepLR, "StepLR", optimizer)
  self.step_size, self.gamma = opts.step_size, gamma
  return self
end

-- what load_state_dict may restore (the constructor checks the same)
function M.StepLR.check_state(sd, fail)
  if sd.step_size ~= nil and sd.step_size < 1 then fail("step_size must be a positive integer, got %d", sd.step_size) end
end

function M.StepLR:get_lr()
  local lrs = {}
  for i, g in ipairs(self.optimizer.param_groups) do
    if self.last_epoch == 0 or self.last_epoch % self.step_size ~= 0 then lrs[i] = g.lr
    else lrs[i] = g.lr * self.gamma end
  end
  return lrs
end

M.CosineAnnealingLR = scheduler_class("CosineAnnealingLR")

function M.CosineAnnealingLR.new(optimizer, opts)
  check_opts("CosineAnnealingLR", opts, { "T_max", "eta_min" })
  if math.type(opts.T_max) ~= "integer" or opts.T_max < 1 then
    error("CosineAnnealingLR: T_max must be a positive integer, got " .. tostring(opts.T_max), 3)
  end
  local eta_min = opts.eta_min or 0
  if type(eta_min) ~= "number" then error("CosineAnnealingLR: eta_min must be a number", 3) end
  local self = new_scheduler(M.CosineAnnealingLR, "CosineAnnealingLR", optimizer)
  self.T_max, self.eta_min = opts.T_max, eta_min
  return self
end

function M.CosineAnnealingLR.check_state(sd, fail)
  if sd.T_max ~= nil and sd.T_max < 1 then fail("T_max must be a positive integer, got %d", sd.T_max) end
end

function M.CosineAnnealingLR:get_lr()
  local t, T, eta, pi, cos = self.last_epoch, self.T_max, self.eta_min, math.pi, math.cos
  local lrs = {}
  for i, g in ipairs(self.optimizer.param_groups) do
    local base = self.base_lrs[i]
    if t == 0 then
      lrs[i] = g.lr
    elseif (t - 1 - T) % (2 * T) == 0 then
      lrs[i] = g.lr + (base - eta) * (1 - cos(pi / T)) / 2
    else
      lrs[i] = (1 + cos(pi * t / T)) / (1 + cos(pi * (t - 1) / T)) * (g.lr - eta) + eta
    end
  end
  return lrs
end

return M
