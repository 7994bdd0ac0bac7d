-- More of torch.optim.lr_scheduler (PyTorch 1.13's chainable forms, so the lr sequences agree to the last bit of
-- arithmetic order), installed into optim.lr_scheduler by lr_scheduler.lua: require("ddplua.optim.lr_more")(M, h).
--   MultiStepLR(o, milestones, gamma=0.1)          lr *= gamma at each milestone (a repeated one, once a repeat)
--   ExponentialLR(o, gamma)                        lr *= gamma every step
--   ConstantLR(o, factor=1/3, total_iters=5)       base * factor until total_iters, then base
--   MultiplicativeLR(o, lr_lambda)                 lr *= lr_lambda(t) every step (one function, or one per group)
--   PolynomialLR(o, total_iters=5, power=1)        base * (1 - t / total_iters)^power, then 0... held at the end
--   CosineAnnealingWarmRestarts(o, T_0, T_mult=1, eta_min=0)
--                                                  cosine from base to eta_min over T_i steps, T_i = T_0 T_mult^k;
--                                                  step(epoch) takes a fractional epoch too, as PyTorch's
-- Each takes last_epoch= and has step(), get_last_lr(), state_dict() and load_state_dict() as the others.
local E = require "ddplua.errors"
local util = require "ddplua.nn.util"

return function(M, h)
  local group_lrs = function(self)
    local out = {}
    for i, g in ipairs(self.optimizer.param_groups) do out[i] = g.lr end
    return out
  end

  -- MultiStepLR ---------------------------------------------------------------------

  local MultiStepLR = M._class("MultiStepLR")
  M.MultiStepLR = MultiStepLR

  function MultiStepLR.new(optimizer, ...)
    h.check_optimizer("MultiStepLR", optimizer)
    local o = util.args("MultiStepLR", { "milestones", "gamma", "last_epoch" }, ...)
    if type(o.milestones) ~= "table" then
      E.raisef("MultiStepLR: milestones must be a list of step counts, got %s", type(o.milestones))
    end
    local counts, sorted = {}, {}
    for i, m in ipairs(o.milestones) do
      if math.type(m) ~= "integer" then E.raisef("MultiStepLR: milestones[%d] must be an integer, got %s", i,
          tostring(m)) end
      counts[tostring(m)] = (counts[tostring(m)] or 0) + 1 -- string keys: state_dict's tables are lists or maps
      sorted[#sorted + 1] = m
    end
    table.sort(sorted)
    local self = setmetatable({ milestones = counts, _sorted = sorted }, MultiStepLR)
    self.gamma = h.number("MultiStepLR", "gamma", o.gamma == nil and 0.1 or o.gamma)
    return self:_start(optimizer, o.last_epoch)
  end

  function MultiStepLR:get_lr()
    local k = self.milestones[tostring(self.last_epoch)]
    local lrs = group_lrs(self)
    if not k then return lrs end
    for i = 1, #lrs do lrs[i] = lrs[i] * self.gamma ^ k end
    return lrs
  end

  function MultiStepLR:_get_closed_form_lr()
    local passed = 0 -- bisect_right(sorted milestones, last_epoch)
    for _, m in ipairs(self._sorted) do if m <= self.last_epoch then passed = passed + 1 end end
    local out = {}
    for i, b in ipairs(self.base_lrs) do out[i] = b * self.gamma ^ passed end
    return out
  end

  -- ExponentialLR ---------------------------------------------------------------------

  local ExponentialLR = M._class("ExponentialLR")
  M.ExponentialLR = ExponentialLR

  function ExponentialLR.new(optimizer, ...)
    h.check_optimizer("ExponentialLR", optimizer)
    local o = util.args("ExponentialLR", { "gamma", "last_epoch" }, ...)
    local self = setmetatable({}, ExponentialLR)
    self.gamma = h.number("ExponentialLR", "gamma", o.gamma)
    return self:_start(optimizer, o.last_epoch)
  end

  function ExponentialLR:get_lr()
    local lrs = group_lrs(self)
    if self.last_epoch == 0 then return lrs end
    for i = 1, #lrs do lrs[i] = lrs[i] * self.gamma end
    return lrs
  end

  function ExponentialLR:_get_closed_form_lr()
    local out = {}
    for i, b in ipairs(self.base_lrs) do out[i] = b * self.gamma ^ self.last_epoch end
    return out
  end

  -- ConstantLR ---------------------------------------------------------------------------

  local ConstantLR = M._class("ConstantLR")
  M.ConstantLR = ConstantLR

  function ConstantLR.new(optimizer, ...)
    h.check_optimizer("ConstantLR", optimizer)
    local o = util.args("ConstantLR", { "factor", "total_iters", "last_epoch" }, ...)
    local self = setmetatable({}, ConstantLR)
    self.factor = h.number("ConstantLR", "factor", o.factor == nil and 1.0 / 3 or o.factor, 0, 1)
    if self.factor == 0 then E.raise("ConstantLR: factor must be > 0 (the last step divides by it)") end
    self.total_iters = h.positive_int("ConstantLR", "total_iters", o.total_iters == nil and 5 or o.total_iters)
    return self:_start(optimizer, o.last_epoch)
  end

  function ConstantLR:get_lr()
    local lrs = group_lrs(self)
    if self.last_epoch == 0 then
      for i = 1, #lrs do lrs[i] = lrs[i] * self.factor end
    elseif self.last_epoch == self.total_iters then
      for i = 1, #lrs do lrs[i] = lrs[i] * (1.0 / self.factor) end
    end
    return lrs
  end

  function ConstantLR:_get_closed_form_lr()
    local out = {}
    local f = self.last_epoch >= self.total_iters and 1 or 0
    for i, b in ipairs(self.base_lrs) do out[i] = b * (self.factor + f * (1 - self.factor)) end
    return out
  end

  -- MultiplicativeLR -------------------------------------------------------------------

  local MultiplicativeLR = M._class("MultiplicativeLR")
  M.MultiplicativeLR = MultiplicativeLR
  MultiplicativeLR._not_state = { optimizer = true, lr_lambdas = true }

  function MultiplicativeLR.new(optimizer, ...)
    h.check_optimizer("MultiplicativeLR", optimizer)
    local o = util.args("MultiplicativeLR", { "lr_lambda", "last_epoch" }, ...)
    local self = setmetatable({ lr_lambdas = h.lambdas_of("MultiplicativeLR", o.lr_lambda, optimizer) },
      MultiplicativeLR)
    return self:_start(optimizer, o.last_epoch)
  end

  function MultiplicativeLR:get_lr()
    local lrs = group_lrs(self)
    if self.last_epoch == 0 then return lrs end
    for i = 1, #lrs do
      local f = self.lr_lambdas[i](self.last_epoch)
      if type(f) ~= "number" then
        E.raisef("MultiplicativeLR: lr_lambda(%d) returned %s, expected a number", self.last_epoch, tostring(f))
      end
      lrs[i] = lrs[i] * f
    end
    return lrs
  end

  -- PolynomialLR ---------------------------------------------------------------------------

  local PolynomialLR = M._class("PolynomialLR")
  M.PolynomialLR = PolynomialLR

  function PolynomialLR.new(optimizer, ...)
    h.check_optimizer("PolynomialLR", optimizer)
    local o = util.args("PolynomialLR", { "total_iters", "power", "last_epoch" }, ...)
    local self = setmetatable({}, PolynomialLR)
    self.total_iters = h.positive_int("PolynomialLR", "total_iters", o.total_iters == nil and 5 or o.total_iters)
    self.power = h.number("PolynomialLR", "power", o.power == nil and 1.0 or o.power)
    return self:_start(optimizer, o.last_epoch)
  end

  function PolynomialLR:get_lr()
    local t, n = self.last_epoch, self.total_iters
    local lrs = group_lrs(self)
    if t == 0 or t > n then return lrs end
    local decay = ((1.0 - t / n) / (1.0 - (t - 1) / n)) ^ self.power
    for i = 1, #lrs do lrs[i] = lrs[i] * decay end
    return lrs
  end

  function PolynomialLR:_get_closed_form_lr()
    local out = {}
    for i, b in ipairs(self.base_lrs) do
      out[i] = b * (1.0 - math.min(self.total_iters, self.last_epoch) / self.total_iters) ^ self.power
    end
    return out
  end

  -- CosineAnnealingWarmRestarts ----------------------------------------------------------

  local Warm = M._class("CosineAnnealingWarmRestarts")
  M.CosineAnnealingWarmRestarts = Warm

  function Warm.new(optimizer, ...)
    local name = "CosineAnnealingWarmRestarts"
    h.check_optimizer(name, optimizer)
    local o = util.args(name, { "T_0", "T_mult", "eta_min", "last_epoch" }, ...)
    local self = setmetatable({}, Warm)
    self.T_0 = h.positive_int(name, "T_0", o.T_0)
    self.T_mult = h.positive_int(name, "T_mult", o.T_mult == nil and 1 or o.T_mult)
    self.eta_min = h.number(name, "eta_min", o.eta_min or 0)
    self.T_i = self.T_0
    self.T_cur = o.last_epoch == nil and -1 or o.last_epoch
    return self:_start(optimizer, o.last_epoch)
  end

  function Warm:get_lr()
    local out = {}
    for i, b in ipairs(self.base_lrs) do
      out[i] = self.eta_min + (b - self.eta_min) * (1 + math.cos(math.pi * self.T_cur / self.T_i)) / 2
    end
    return out
  end

  --- step() or step(epoch): epoch may be fractional (a step within an epoch: epoch + i / iters), as PyTorch's.
  function Warm:step(epoch)
    self._step_count = self._step_count + 1
    if epoch == nil and self.last_epoch < 0 then epoch = 0 end
    if epoch == nil then
      epoch = self.last_epoch + 1
      self.T_cur = self.T_cur + 1
      if self.T_cur >= self.T_i then
        self.T_cur = self.T_cur - self.T_i
        self.T_i = self.T_i * self.T_mult
      end
    else
      if type(epoch) ~= "number" or epoch ~= epoch or epoch < 0 then
        E.raisef("CosineAnnealingWarmRestarts: expected a non-negative epoch, got %s", tostring(epoch))
      end
      if epoch >= self.T_0 then
        if self.T_mult == 1 then
          self.T_cur = math.fmod(epoch, self.T_0)
        else
          local n = math.floor(math.log(epoch / self.T_0 * (self.T_mult - 1) + 1, self.T_mult))
          self.T_cur = epoch - self.T_0 * (self.T_mult ^ n - 1) / (self.T_mult - 1)
          self.T_i = self.T_0 * self.T_mult ^ n
        end
      else
        self.T_i = self.T_0
        self.T_cur = epoch
      end
    end
    self.last_epoch = math.floor(epoch)
    self:_set_lrs(self:get_lr())
  end
end
