-- Learning-rate schedulers with PyTorch 1.13's semantics (its chainable
-- forms, so the lr sequences agree with torch.optim.lr_scheduler's to the
-- last bit of arithmetic order), names and arguments: after the optimizer,
-- PyTorch's arguments positionally or as one options table.
--   StepLR(o, step_size, gamma=0.1)            lr *= gamma every step_size steps
--   CosineAnnealingLR(o, T_max, eta_min=0)     eta_min + (base - eta_min)(1 + cos(pi t / T_max)) / 2
--   LambdaLR(o, lr_lambda)                     base * lr_lambda(t) (one function, or one per group)
--   LinearLR(o, start_factor=1/3, end_factor=1, total_iters=5)
--   OneCycleLR(o, max_lr, total_steps=, epochs=, steps_per_epoch=, pct_start=0.3, anneal_strategy="cos",
--              cycle_momentum=true, base_momentum=0.85, max_momentum=0.95, div_factor=25,
--              final_div_factor=1e4, three_phase=false)
--   SequentialLR(o, schedulers, milestones)    each scheduler in turn, switching at the milestones
--   MultiStepLR, ExponentialLR, ConstantLR, MultiplicativeLR, PolynomialLR, CosineAnnealingWarmRestarts
--                                              (lr_more.lua)
--   ReduceLROnPlateau(o, mode="min", factor=0.1, patience=10, threshold=1e-4, threshold_mode="rel",
--                     cooldown=0, min_lr=0, eps=1e-8)   step(metric) after each validation
-- Each takes last_epoch= (-1: a new schedule) and has step(), get_last_lr(),
-- state_dict() (plain numbers, strings and booleans: ddp.save_checkpoint's
-- scheduler= saves it and load_state_dict restores it bitwise; LambdaLR's
-- functions are not saved, as PyTorch saves no plain function) and
-- load_state_dict(). Construction performs PyTorch's initial step (the lr
-- becomes the schedule's value at t = 0).
local util = require "ddplua.nn.util"
local E = require "ddplua.errors"

local M = {}
local cos, pi = math.cos, math.pi

local Scheduler = {}
Scheduler.__index = Scheduler
Scheduler.__name = "LRScheduler"
M.LRScheduler = Scheduler

local function scheduler_class(name, base)
  base = base or Scheduler
  local cls = setmetatable({}, { __index = base, __call = function(c, ...) return c.new(...) end })
  cls.__index = cls
  cls.__name = name
  return cls
end
M._class = scheduler_class

local function check_optimizer(name, o)
  if type(o) ~= "table" or type(o.param_groups) ~= "table" then
    E.raisef("%s: expected an optimizer, got %s", name, type(o))
  end
end

local function number(name, key, v, lo, hi)
  if type(v) ~= "number" or v ~= v or (lo and v < lo) or (hi and v > hi) then
    E.raisef("%s: %s must be a number%s, got %s", name, key,
      lo and hi and string.format(" in [%g, %g]", lo, hi) or (lo and string.format(" >= %g", lo) or ""), tostring(v))
  end
  return v
end

local function positive_int(name, key, v)
  if math.type(v) ~= "integer" or v < 1 then E.raisef("%s: %s must be a positive integer, got %s", name, key,
      tostring(v)) end
  return v
end

-- One value per parameter group: a number, or a list with one per group.
local function per_group(name, key, v, optimizer)
  local n = #optimizer.param_groups
  if type(v) == "table" then
    if #v ~= n then E.raisef("%s: expected %d values for %s (one per parameter group), got %d", name, n, key, #v) end
    for i = 1, n do number(name, key .. "[" .. i .. "]", v[i]) end
    return { table.unpack(v) }
  end
  number(name, key, v)
  local out = {}
  for i = 1, n do out[i] = v end
  return out
end

--- PyTorch's _LRScheduler.__init__: initial_lr per group, base_lrs, and the
--- initial step (last_epoch -1 -> 0).
function Scheduler._start(self, optimizer, last_epoch)
  local name = self.__name
  last_epoch = last_epoch == nil and -1 or last_epoch
  if math.type(last_epoch) ~= "integer" or last_epoch < -1 then
    E.raisef("%s: last_epoch must be an integer >= -1, got %s", name, tostring(last_epoch))
  end
  self.optimizer = optimizer
  self.base_lrs = {}
  for i, g in ipairs(optimizer.param_groups) do
    if last_epoch == -1 then
      if g.initial_lr == nil then g.initial_lr = g.lr end
    elseif g.initial_lr == nil then
      E.raisef("%s: parameter group %d has no initial_lr, which resuming with last_epoch=%d needs", name, i,
        last_epoch)
    end
    self.base_lrs[i] = g.initial_lr
  end
  self.last_epoch = last_epoch
  self:_initial_step()
  return self
end

function Scheduler:_initial_step()
  self._step_count = 0
  self:step()
end

--- step(): the next value of the schedule. step(epoch) jumps to a given
--- epoch (PyTorch's deprecated form; SequentialLR uses step(0)).
function Scheduler:step(epoch)
  self._step_count = self._step_count + 1
  local values
  if epoch == nil then
    self.last_epoch = self.last_epoch + 1
    values = self:get_lr()
  else
    if math.type(epoch) ~= "integer" then E.raisef("%s: step(epoch) expects an integer, got %s", self.__name,
        tostring(epoch)) end
    self.last_epoch = epoch
    values = self._get_closed_form_lr and self:_get_closed_form_lr() or self:get_lr()
  end
  self:_set_lrs(values)
end

-- every group's lr set to values[i], and remembered as the last lrs
function Scheduler:_set_lrs(values)
  local last = {}
  for i, g in ipairs(self.optimizer.param_groups) do
    g.lr = values[i]
    last[i] = g.lr
  end
  self._last_lr = last
end

--- The lr of every group as the last step() set it.
function Scheduler:get_last_lr() return { table.unpack(self._last_lr) } end

local function copy(v)
  if type(v) ~= "table" then return v end
  local out = {}
  for k, x in pairs(v) do out[k] = copy(x) end
  return out
end

-- Fields that are not state: the optimizer, functions, other schedulers.
Scheduler._not_state = { optimizer = true }

--- Every field but the optimizer (and what _not_state names), copied.
function Scheduler:state_dict()
  local sd = {}
  for k, v in pairs(self) do
    if not self._not_state[k] and type(v) ~= "function" then sd[k] = copy(v) end
  end
  return sd
end

--- Restores what state_dict() returned. Every field is checked against the
--- scheduler's own before anything changes: an unknown field (which would
--- land on the object, over a method) or one of another type is an error
--- naming it, and so is a list of another length (one entry per group).
function Scheduler:load_state_dict(sd)
  local name = self.__name or "LRScheduler"
  local function fail(fmt, ...) E.raisef("%s: load_state_dict: " .. fmt, name, ...) end
  if type(sd) ~= "table" or math.type(sd.last_epoch) ~= "integer" or sd.last_epoch < -1 then
    fail("expected a table from a scheduler's state_dict() (with an integer last_epoch >= -1)")
  end
  local own = self:state_dict()
  -- v must look like mine: the same type (integers stay integers), lists of the same length
  local function check(path, v, mine)
    if type(v) ~= type(mine) or (math.type(mine) == "integer" and math.type(v) ~= "integer") then
      fail("%s is %s, expected %s like the scheduler's own", path, type(v) == "string" and string.format("%q", v) or
        tostring(v), math.type(mine) == "integer" and "an integer" or "a " .. type(mine))
    end
    if type(v) == "table" then
      if #v ~= #mine then fail("%s has %d entries, the scheduler's own has %d", path, #v, #mine) end
      for k, x in pairs(v) do
        if mine[k] == nil then fail("%s has an unknown entry '%s'", path, tostring(k)) end
        check(path .. "." .. tostring(k), x, mine[k])
      end
    end
  end
  for k, v in pairs(sd) do
    local mine = own[k]
    if mine == nil then fail("unknown field '%s'", tostring(k)) end
    if not (self._not_state[k] and type(v) == "table") then check(k, v, mine) end
  end
  local cls = getmetatable(self)
  if cls.check_state then cls.check_state(sd, fail) end
  for k, v in pairs(sd) do
    if not self._not_state[k] then self[k] = copy(v) end
  end
end

local function group_lrs(self)
  local out = {}
  for i, g in ipairs(self.optimizer.param_groups) do out[i] = g.lr end
  return out
end

-- StepLR ------------------------------------------------------------------------

M.StepLR = scheduler_class("StepLR")

function M.StepLR.new(optimizer, ...)
  check_optimizer("StepLR", optimizer)
  local o = util.args("StepLR", { "step_size", "gamma", "last_epoch" }, ...)
  local self = setmetatable({}, M.StepLR)
  self.step_size = positive_int("StepLR", "step_size", o.step_size)
  self.gamma = number("StepLR", "gamma", o.gamma == nil and 0.1 or o.gamma)
  return self:_start(optimizer, o.last_epoch)
end

-- what load_state_dict may restore (the constructor checks the same)
function M.StepLR.check_state(sd, fail)
  if sd.step_size ~= nil and sd.step_size < 1 then fail("step_size must be a positive integer, got %d", sd.step_size) end
end

function M.StepLR:get_lr()
  if self.last_epoch == 0 or self.last_epoch % self.step_size ~= 0 then return group_lrs(self) end
  local lrs = group_lrs(self)
  for i = 1, #lrs do lrs[i] = lrs[i] * self.gamma end
  return lrs
end

function M.StepLR:_get_closed_form_lr()
  local out = {}
  for i, b in ipairs(self.base_lrs) do out[i] = b * self.gamma ^ (self.last_epoch // self.step_size) end
  return out
end

-- CosineAnnealingLR -------------------------------------------------------------

M.CosineAnnealingLR = scheduler_class("CosineAnnealingLR")

function M.CosineAnnealingLR.new(optimizer, ...)
  check_optimizer("CosineAnnealingLR", optimizer)
  local o = util.args("CosineAnnealingLR", { "T_max", "eta_min", "last_epoch" }, ...)
  local self = setmetatable({}, M.CosineAnnealingLR)
  self.T_max = positive_int("CosineAnnealingLR", "T_max", o.T_max)
  self.eta_min = number("CosineAnnealingLR", "eta_min", o.eta_min or 0)
  return self:_start(optimizer, o.last_epoch)
end

function M.CosineAnnealingLR.check_state(sd, fail)
  if sd.T_max ~= nil and sd.T_max < 1 then fail("T_max must be a positive integer, got %d", sd.T_max) end
end

function M.CosineAnnealingLR:get_lr()
  local t, T, eta = self.last_epoch, self.T_max, self.eta_min
  local lrs = group_lrs(self)
  if t == 0 then return lrs end
  for i, lr in ipairs(lrs) do
    local base = self.base_lrs[i]
    if self._step_count == 1 and t > 0 then
      lrs[i] = eta + (base - eta) * (1 + cos(t * pi / T)) / 2
    elseif (t - 1 - T) % (2 * T) == 0 then
      lrs[i] = lr + (base - eta) * (1 - cos(pi / T)) / 2
    else
      lrs[i] = (1 + cos(pi * t / T)) / (1 + cos(pi * (t - 1) / T)) * (lr - eta) + eta
    end
  end
  return lrs
end

function M.CosineAnnealingLR:_get_closed_form_lr()
  local out = {}
  for i, b in ipairs(self.base_lrs) do
    out[i] = self.eta_min + (b - self.eta_min) * (1 + cos(pi * self.last_epoch / self.T_max)) / 2
  end
  return out
end

-- LambdaLR ------------------------------------------------------------------------

-- lr_lambda: one function of the step for every group, or a list with one per group
local function lambdas_of(name, f, optimizer)
  local n, lambdas = #optimizer.param_groups, {}
  if type(f) == "function" then
    for i = 1, n do lambdas[i] = f end
  elseif type(f) == "table" and #f == n then
    for i = 1, n do
      if type(f[i]) ~= "function" then E.raisef("%s: lr_lambda[%d] must be a function, got %s", name, i,
          type(f[i])) end
      lambdas[i] = f[i]
    end
  elseif type(f) == "table" then
    E.raisef("%s: expected %d lr_lambdas (one per parameter group), got %d", name, n, #f)
  else
    E.raisef("%s: lr_lambda must be a function of the step (or a list, one per group), got %s", name, type(f))
  end
  return lambdas
end

M.LambdaLR = scheduler_class("LambdaLR")
M.LambdaLR._not_state = { optimizer = true, lr_lambdas = true }

function M.LambdaLR.new(optimizer, ...)
  check_optimizer("LambdaLR", optimizer)
  local o = util.args("LambdaLR", { "lr_lambda", "last_epoch" }, ...)
  local self = setmetatable({ lr_lambdas = lambdas_of("LambdaLR", o.lr_lambda, optimizer) }, M.LambdaLR)
  return self:_start(optimizer, o.last_epoch)
end

function M.LambdaLR:get_lr()
  local out = {}
  for i, b in ipairs(self.base_lrs) do
    local f = self.lr_lambdas[i](self.last_epoch)
    if type(f) ~= "number" then
      E.raisef("LambdaLR: lr_lambda(%d) returned %s, expected a number", self.last_epoch, tostring(f))
    end
    out[i] = b * f
  end
  return out
end

-- LinearLR --------------------------------------------------------------------------

M.LinearLR = scheduler_class("LinearLR")

function M.LinearLR.new(optimizer, ...)
  check_optimizer("LinearLR", optimizer)
  local o = util.args("LinearLR", { "start_factor", "end_factor", "total_iters", "last_epoch" }, ...)
  local self = setmetatable({}, M.LinearLR)
  self.start_factor = number("LinearLR", "start_factor", o.start_factor == nil and 1.0 / 3 or o.start_factor, 0, 1)
  self.end_factor = number("LinearLR", "end_factor", o.end_factor == nil and 1.0 or o.end_factor, 0, 1)
  if self.start_factor == 0 then E.raise("LinearLR: start_factor must be > 0 (it divides later steps)") end
  self.total_iters = positive_int("LinearLR", "total_iters", o.total_iters == nil and 5 or o.total_iters)
  return self:_start(optimizer, o.last_epoch)
end

function M.LinearLR:get_lr()
  local t, s, e, n = self.last_epoch, self.start_factor, self.end_factor, self.total_iters
  local lrs = group_lrs(self)
  if t == 0 then
    for i = 1, #lrs do lrs[i] = lrs[i] * s end
  elseif t <= n then
    for i = 1, #lrs do lrs[i] = lrs[i] * (1.0 + (e - s) / (n * s + (t - 1) * (e - s))) end
  end
  return lrs
end

function M.LinearLR:_get_closed_form_lr()
  local out = {}
  local s, e, n = self.start_factor, self.end_factor, self.total_iters
  for i, b in ipairs(self.base_lrs) do out[i] = b * (s + (e - s) * math.min(n, self.last_epoch) / n) end
  return out
end

-- SequentialLR ------------------------------------------------------------------------

M.SequentialLR = scheduler_class("SequentialLR")
M.SequentialLR._not_state = { optimizer = true, _schedulers = true }

function M.SequentialLR.new(optimizer, ...)
  check_optimizer("SequentialLR", optimizer)
  local o = util.args("SequentialLR", { "schedulers", "milestones", "last_epoch" }, ...)
  local scheds, miles = o.schedulers, o.milestones
  if type(scheds) ~= "table" or #scheds == 0 then
    E.raise("SequentialLR: schedulers must be a non-empty list of schedulers, got " .. type(scheds))
  end
  for i, s in ipairs(scheds) do
    if type(s) ~= "table" or getmetatable(s) == nil or type(s.step) ~= "function" then
      E.raisef("SequentialLR: schedulers[%d] is not a scheduler", i)
    end
    if s.optimizer ~= optimizer then
      E.raisef("SequentialLR: schedulers[%d] belongs to another optimizer than the one passed in", i)
    end
  end
  if type(miles) ~= "table" or #miles ~= #scheds - 1 then
    E.raisef("SequentialLR: expected %d milestones (one fewer than the %d schedulers), got %s", #scheds - 1, #scheds,
      type(miles) == "table" and tostring(#miles) or type(miles))
  end
  for i, m in ipairs(miles) do
    if math.type(m) ~= "integer" or (i > 1 and m < miles[i - 1]) then
      E.raisef("SequentialLR: milestones must be increasing integers, got %s at position %d", tostring(m), i)
    end
  end
  local last_epoch = o.last_epoch == nil and -1 or o.last_epoch
  local self = setmetatable({ optimizer = optimizer, _schedulers = { table.unpack(scheds) },
    _milestones = { table.unpack(miles) }, last_epoch = last_epoch + 1 }, M.SequentialLR)
  for _, g in ipairs(optimizer.param_groups) do g.lr = g.initial_lr end -- back to the initial values
  for _, s in ipairs(scheds) do s.last_epoch = s.last_epoch - 1 end     -- undo their initial steps
  scheds[1]:_initial_step()                                             -- and redo the first one's
  self._last_lr = scheds[1]:get_last_lr()
  return self
end

-- bisect_right: how many milestones are <= t
local function bisect_right(list, t)
  local n = 0
  for _, m in ipairs(list) do
    if m <= t then n = n + 1 else break end
  end
  return n
end

function M.SequentialLR:step()
  self.last_epoch = self.last_epoch + 1
  local idx = bisect_right(self._milestones, self.last_epoch)
  local s = self._schedulers[idx + 1]
  if idx > 0 and self._milestones[idx] == self.last_epoch then s:step(0) else s:step() end
  self._last_lr = s:get_last_lr()
end

function M.SequentialLR:state_dict()
  local sd = Scheduler.state_dict(self)
  sd._schedulers = {}
  for i, s in ipairs(self._schedulers) do sd._schedulers[i] = s:state_dict() end
  return sd
end

function M.SequentialLR:load_state_dict(sd)
  Scheduler.load_state_dict(self, sd)
  local list = sd._schedulers
  if type(list) ~= "table" or #list ~= #self._schedulers then
    E.raisef("SequentialLR: the state dict holds %s scheduler states, this SequentialLR has %d schedulers",
      type(list) == "table" and tostring(#list) or "no", #self._schedulers)
  end
  for i, s in ipairs(self._schedulers) do s:load_state_dict(list[i]) end
end

-- OneCycleLR and ReduceLROnPlateau (lua/ddplua/optim/onecycle_plateau.lua); MultiStepLR, ExponentialLR,
-- ConstantLR, MultiplicativeLR, PolynomialLR and CosineAnnealingWarmRestarts (lua/ddplua/optim/lr_more.lua)
local helpers = { check_optimizer = check_optimizer, number = number, positive_int = positive_int,
  per_group = per_group, lambdas_of = lambdas_of }
require("ddplua.optim.onecycle_plateau")(M, helpers)
require("ddplua.optim.lr_more")(M, helpers)

return M
