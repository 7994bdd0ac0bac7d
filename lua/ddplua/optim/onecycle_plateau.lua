-- optim.lr_scheduler.OneCycleLR and ReduceLROnPlateau (PyTorch 1.13's), kept
-- apart from the simpler schedulers in lr_scheduler.lua, which installs them:
-- require("ddplua.optim.onecycle_plateau")(M, helpers).
--
-- OneCycleLR: lr warms up from max_lr / div_factor to max_lr over
-- pct_start of total_steps, then anneals to initial_lr / final_div_factor
-- (three_phase: back to initial_lr first); momentum (SGD's momentum, Adam's
-- beta1) cycles the other way between max_momentum and base_momentum. It
-- writes initial_lr, max_lr, min_lr (and max_momentum, base_momentum) into
-- the parameter groups, as PyTorch does. Stepping past total_steps is an
-- error.
--
-- ReduceLROnPlateau: step(metric) (a number or a one-element tensor);
-- after `patience` steps without an improvement of more than `threshold`
-- (relative or absolute, mode "min" or "max") every group's lr is
-- multiplied by factor (not below min_lr; changes smaller than eps are
-- skipped), then `cooldown` steps pass before counting again.
local E = require "ddplua.errors"
local util = require "ddplua.nn.util"

return function(M, h)
  local cos, pi = math.cos, math.pi

  -- OneCycleLR --------------------------------------------------------------------

  local OneCycleLR = M._class("OneCycleLR")
  M.OneCycleLR = OneCycleLR

  local NAMES = { "max_lr", "total_steps", "epochs", "steps_per_epoch", "pct_start", "anneal_strategy",
    "cycle_momentum", "base_momentum", "max_momentum", "div_factor", "final_div_factor", "three_phase", "last_epoch" }

  local function phases(total, pct, three)
    if three then
      return {
        { end_step = pct * total - 1, start_lr = "initial_lr", end_lr = "max_lr", start_momentum = "max_momentum",
          end_momentum = "base_momentum" },
        { end_step = 2 * pct * total - 2, start_lr = "max_lr", end_lr = "initial_lr",
          start_momentum = "base_momentum", end_momentum = "max_momentum" },
        { end_step = total - 1.0, start_lr = "initial_lr", end_lr = "min_lr", start_momentum = "max_momentum",
          end_momentum = "max_momentum" },
      }
    end
    return {
      { end_step = pct * total - 1, start_lr = "initial_lr", end_lr = "max_lr", start_momentum = "max_momentum",
        end_momentum = "base_momentum" },
      { end_step = total - 1.0, start_lr = "max_lr", end_lr = "min_lr", start_momentum = "base_momentum",
        end_momentum = "max_momentum" },
    }
  end

  function OneCycleLR.new(optimizer, ...)
    local who = "OneCycleLR"
    h.check_optimizer(who, optimizer)
    local o = util.args(who, NAMES, ...)
    local self = setmetatable({}, OneCycleLR)
    if o.total_steps ~= nil then
      self.total_steps = h.positive_int(who, "total_steps", o.total_steps)
    elseif o.epochs ~= nil or o.steps_per_epoch ~= nil then
      self.total_steps = h.positive_int(who, "epochs", o.epochs) * h.positive_int(who, "steps_per_epoch",
        o.steps_per_epoch)
    else
      E.raise("OneCycleLR: give total_steps, or epochs and steps_per_epoch")
    end
    local pct = h.number(who, "pct_start", o.pct_start == nil and 0.3 or o.pct_start, 0, 1)
    self._schedule_phases = phases(self.total_steps, pct + 0.0, o.three_phase == true)
    local strategy = o.anneal_strategy or "cos"
    if strategy ~= "cos" and strategy ~= "linear" then
      E.raisef('OneCycleLR: anneal_strategy must be "cos" or "linear", got %s', tostring(strategy))
    end
    self.anneal_strategy = strategy
    local div = h.number(who, "div_factor", o.div_factor == nil and 25.0 or o.div_factor)
    local final_div = h.number(who, "final_div_factor", o.final_div_factor == nil and 1e4 or o.final_div_factor)
    if o.max_lr == nil then E.raise("OneCycleLR: max_lr is required") end
    local max_lrs = h.per_group(who, "max_lr", o.max_lr, optimizer)
    local last_epoch = o.last_epoch == nil and -1 or o.last_epoch
    if last_epoch == -1 then
      for i, g in ipairs(optimizer.param_groups) do
        g.initial_lr = max_lrs[i] / div
        g.max_lr = max_lrs[i]
        g.min_lr = g.initial_lr / final_div
      end
    end
    self.cycle_momentum = o.cycle_momentum ~= false
    if self.cycle_momentum then
      local defaults = optimizer.defaults or {}
      if defaults.momentum == nil and defaults.betas == nil then
        E.raise("OneCycleLR: the optimizer has no momentum or betas to cycle; pass cycle_momentum=false")
      end
      self.use_beta1 = defaults.betas ~= nil
      local maxm = h.per_group(who, "max_momentum", o.max_momentum == nil and 0.95 or o.max_momentum, optimizer)
      local basem = h.per_group(who, "base_momentum", o.base_momentum == nil and 0.85 or o.base_momentum, optimizer)
      if last_epoch == -1 then
        for i, g in ipairs(optimizer.param_groups) do
          if self.use_beta1 then g.betas = { maxm[i], g.betas[2] } else g.momentum = maxm[i] end
          g.max_momentum, g.base_momentum = maxm[i], basem[i]
        end
      end
    end
    return self:_start(optimizer, last_epoch)
  end

  local function anneal(strategy, a, b, pct)
    if strategy == "cos" then return b + (a - b) / 2.0 * (cos(pi * pct) + 1) end
    return (b - a) * pct + a
  end

  function OneCycleLR:get_lr()
    local step = self.last_epoch
    if step > self.total_steps then
      E.raisef("OneCycleLR: tried to step %d times; the specified number of total steps is %d", step + 1,
        self.total_steps)
    end
    local lrs, ph = {}, self._schedule_phases
    for gi, g in ipairs(self.optimizer.param_groups) do
      local start, lr, mom = 0, nil, nil
      for i, p in ipairs(ph) do
        if step <= p.end_step or i == #ph then
          if p.end_step == start then
            E.raisef("OneCycleLR: a phase of zero steps (pct_start=%g of %d total steps)", (ph[1].end_step + 1) /
              self.total_steps, self.total_steps)
          end
          local pct = (step - start) / (p.end_step - start)
          lr = anneal(self.anneal_strategy, g[p.start_lr], g[p.end_lr], pct)
          if self.cycle_momentum then mom = anneal(self.anneal_strategy, g[p.start_momentum], g[p.end_momentum], pct) end
          break
        end
        start = p.end_step
      end
      lrs[gi] = lr
      if self.cycle_momentum then
        if self.use_beta1 then g.betas = { mom, g.betas[2] } else g.momentum = mom end
      end
    end
    return lrs
  end

  -- ReduceLROnPlateau -----------------------------------------------------------------

  local Plateau = {}
  Plateau.__index = Plateau
  Plateau.__name = "ReduceLROnPlateau"
  setmetatable(Plateau, { __call = function(c, ...) return c.new(...) end })
  M.ReduceLROnPlateau = Plateau

  local PNAMES = { "mode", "factor", "patience", "threshold", "threshold_mode", "cooldown", "min_lr", "eps",
    "verbose" }

  local function init_is_better(self)
    if self.mode ~= "min" and self.mode ~= "max" then
      E.raisef('ReduceLROnPlateau: mode must be "min" or "max", got %s', tostring(self.mode))
    end
    if self.threshold_mode ~= "rel" and self.threshold_mode ~= "abs" then
      E.raisef('ReduceLROnPlateau: threshold_mode must be "rel" or "abs", got %s', tostring(self.threshold_mode))
    end
    self.mode_worse = self.mode == "min" and math.huge or -math.huge
  end

  function Plateau.new(optimizer, ...)
    local who = "ReduceLROnPlateau"
    h.check_optimizer(who, optimizer)
    local o = util.args(who, PNAMES, ...)
    local self = setmetatable({ optimizer = optimizer }, Plateau)
    self.factor = h.number(who, "factor", o.factor == nil and 0.1 or o.factor, 0)
    if self.factor >= 1 then E.raise("ReduceLROnPlateau: factor must be < 1, got " .. self.factor) end
    self.min_lrs = h.per_group(who, "min_lr", o.min_lr or 0, optimizer)
    self.patience = o.patience == nil and 10 or o.patience
    if math.type(self.patience) ~= "integer" or self.patience < 0 then
      E.raise("ReduceLROnPlateau: patience must be an integer >= 0, got " .. tostring(self.patience))
    end
    self.cooldown = o.cooldown or 0
    if math.type(self.cooldown) ~= "integer" or self.cooldown < 0 then
      E.raise("ReduceLROnPlateau: cooldown must be an integer >= 0, got " .. tostring(self.cooldown))
    end
    self.verbose = o.verbose == true
    self.cooldown_counter = 0
    self.mode = o.mode or "min"
    self.threshold = h.number(who, "threshold", o.threshold == nil and 1e-4 or o.threshold, 0)
    self.threshold_mode = o.threshold_mode or "rel"
    self.eps = h.number(who, "eps", o.eps == nil and 1e-8 or o.eps, 0)
    self.last_epoch = 0
    init_is_better(self)
    self.best, self.num_bad_epochs = self.mode_worse, 0
    self._last_lr = {}
    for i, g in ipairs(optimizer.param_groups) do self._last_lr[i] = g.lr end
    return self
  end

  function Plateau:is_better(a, best)
    if self.mode == "min" and self.threshold_mode == "rel" then return a < best * (1.0 - self.threshold) end
    if self.mode == "min" then return a < best - self.threshold end
    if self.threshold_mode == "rel" then return a > best * (self.threshold + 1.0) end
    return a > best + self.threshold
  end

  --- step(metric [, epoch])
  function Plateau:step(metrics, epoch)
    local current = metrics
    if type(metrics) == "userdata" and type(metrics.item) == "function" then current = metrics:item() end
    if type(current) ~= "number" then
      E.raise("ReduceLROnPlateau: step expects the metric (a number or a one-element tensor), got " .. type(metrics))
    end
    current = current + 0.0
    if epoch == nil then epoch = self.last_epoch + 1 end
    self.last_epoch = epoch
    if self:is_better(current, self.best) then
      self.best, self.num_bad_epochs = current, 0
    else
      self.num_bad_epochs = self.num_bad_epochs + 1
    end
    if self.cooldown_counter > 0 then
      self.cooldown_counter = self.cooldown_counter - 1
      self.num_bad_epochs = 0
    end
    if self.num_bad_epochs > self.patience then
      for i, g in ipairs(self.optimizer.param_groups) do
        local old = g.lr + 0.0
        local new = math.max(old * self.factor, self.min_lrs[i])
        if old - new > self.eps then
          g.lr = new
          if self.verbose then require("ddplua.rank").print(string.format(
            "Epoch %05d: reducing learning rate of group %d to %.4e.", epoch, i - 1, new)) end
        end
      end
      self.cooldown_counter, self.num_bad_epochs = self.cooldown, 0
    end
    local last = {}
    for i, g in ipairs(self.optimizer.param_groups) do last[i] = g.lr end
    self._last_lr = last
  end

  function Plateau:get_last_lr() return { table.unpack(self._last_lr) } end

  function Plateau:state_dict()
    local sd = {}
    for k, v in pairs(self) do
      if k ~= "optimizer" then sd[k] = type(v) == "table" and { table.unpack(v) } or v end
    end
    return sd
  end

  function Plateau:load_state_dict(sd)
    if type(sd) ~= "table" or sd.mode == nil then
      E.raise("ReduceLROnPlateau: load_state_dict expects a table from its state_dict()")
    end
    for k, v in pairs(sd) do
      if k ~= "optimizer" then self[k] = type(v) == "table" and { table.unpack(v) } or v end
    end
    init_is_better(self)
  end
end
