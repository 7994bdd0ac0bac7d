-- Mixed precision (PyTorch's torch.autocast and torch.amp.GradScaler).
--
-- bfloat16 autocast: matmul, linear and conv2d compute in bfloat16 (float32
-- accumulation) while parameters stay float32, on CUDA tensors and on CPU
-- tensors alike (on the CPU: oneDNN's bfloat16 kernels where the CPU has
-- AMX or AVX512-BF16, else the operands widened to float32); softmax,
-- log_softmax, cross_entropy, mse_loss, layer_norm and batch_norm compute
-- their bfloat16 inputs in float32, as PyTorch's autocast does:
--
--   do local _ <close> = ddp.autocast("bfloat16")
--     loss = nn.F.cross_entropy(model(x), y)   -- float32 loss
--   end
--   loss:backward()           -- float32 gradients for the float32 weights
--
-- float16 needs loss scaling, because small gradients underflow in
-- float16: GradScaler multiplies the loss by a large factor before
-- backward, divides the gradients by it before the optimizer step, skips
-- steps whose gradients overflowed, and adapts the factor:
--
--   local scaler = ddp.amp.GradScaler()
--   do local _ <close> = ddp.autocast("float16"); loss = ... end
--   scaler:scale(loss):backward()
--   scaler:step(opt)          -- unscales, then steps unless inf/NaN was found
--   scaler:update()
--
-- float16 autocast leaves CPU tensors alone (PyTorch's CPU autocast knows
-- bfloat16 only); GradScaler works on any device.
local core = require "ddplua.core"

local M = {}

-- autocast -------------------------------------------------------------------

local guard_mt = {
  __close = function(self) core.set_autocast(self.prev) end,
  __name = "autocast",
}

--- autocast(dtype) -> to-be-closed guard; autocast(dtype, fn, ...) runs fn
--- with autocast on and returns its results. dtype: "bfloat16", "float16",
--- false (autocast off inside the region), or {dtype=, enabled=}.
function M.autocast(dtype, fn, ...)
  if type(dtype) == "table" then
    local opts = dtype
    for k in pairs(opts) do
      if k ~= "dtype" and k ~= "enabled" then
        error("autocast: unknown option '" .. tostring(k) .. "' (expected dtype, enabled)", 2)
      end
    end
    if opts.enabled == false then dtype = false else dtype = opts.dtype or "bfloat16" end
  end
  if dtype ~= false and dtype ~= "bfloat16" and dtype ~= "float16" then
    error("autocast: expected \"bfloat16\", \"float16\" or false, got " .. tostring(dtype), 2)
  end
  if fn == nil then return setmetatable({ prev = core.set_autocast(dtype) }, guard_mt) end
  if type(fn) ~= "function" then error("autocast: the second argument must be a function, got " .. type(fn), 2) end
  local prev = core.set_autocast(dtype)
  local res = table.pack(pcall(fn, ...))
  core.set_autocast(prev)
  if not res[1] then error(res[2], 0) end
  return table.unpack(res, 2, res.n)
end

--- The calling thread's autocast dtype, or false.
function M.get_autocast_dtype() return core.get_autocast() end
function M.is_autocast_enabled() return core.get_autocast() ~= false end

-- GradScaler -----------------------------------------------------------------

local FLOAT32_MAX = 3.4028234663852886e38

local GradScaler = {}
GradScaler.__index = GradScaler
GradScaler.__name = "GradScaler"
M.GradScaler_class = GradScaler

local function check_number(opts, key, default, ok, what)
  local v = opts[key]
  if v == nil then return default end
  if type(v) ~= "number" or not ok(v) then
    error(string.format("GradScaler: %s must be %s, got %s", key, what, tostring(v)), 3)
  end
  return v
end

--- GradScaler{init_scale=2^16, growth_factor=2, backoff_factor=0.5,
--- growth_interval=2000, enabled=true}: PyTorch's defaults and rules.
function M.GradScaler(opts)
  opts = opts or {}
  if type(opts) ~= "table" then error("GradScaler: expected an options table, got " .. type(opts), 2) end
  local valid = { init_scale = true, growth_factor = true, backoff_factor = true, growth_interval = true,
                  enabled = true }
  for k in pairs(opts) do
    if not valid[k] then
      error("GradScaler: unknown option '" .. tostring(k) ..
            "' (expected init_scale, growth_factor, backoff_factor, growth_interval, enabled)", 2)
    end
  end
  local self = setmetatable({}, GradScaler)
  self._scale = check_number(opts, "init_scale", 65536.0, function(v) return v > 0 and v < math.huge end,
                             "a positive finite number")
  self._growth_factor = check_number(opts, "growth_factor", 2.0, function(v) return v > 1 end, "> 1")
  self._backoff_factor = check_number(opts, "backoff_factor", 0.5, function(v) return v > 0 and v < 1 end,
                                      "in (0, 1)")
  self._growth_interval = check_number(opts, "growth_interval", 2000,
                                       function(v) return math.type(v) == "integer" and v >= 1 end,
                                       "an integer >= 1")
  if opts.enabled ~= nil and type(opts.enabled) ~= "boolean" then
    error("GradScaler: enabled must be a boolean, got " .. tostring(opts.enabled), 2)
  end
  self._enabled = opts.enabled ~= false
  self._growth_tracker = 0
  self._per_optimizer = setmetatable({}, { __mode = "k" }) -- optimizer -> {stage=, found_inf=}
  return self
end

function GradScaler:is_enabled() return self._enabled end
--- The current scale (1.0 when disabled, as in PyTorch).
function GradScaler:get_scale() return self._enabled and self._scale or 1.0 end
function GradScaler:get_growth_factor() return self._growth_factor end
function GradScaler:get_backoff_factor() return self._backoff_factor end
function GradScaler:get_growth_interval() return self._growth_interval end

--- scale(loss) -> loss * scale (a tensor, or a table of tensors).
function GradScaler:scale(outputs)
  if not self._enabled then return outputs end
  if type(outputs) == "table" then
    local r = {}
    for k, v in pairs(outputs) do r[k] = self:scale(v) end
    return r
  end
  if type(outputs) ~= "userdata" then
    error("GradScaler:scale: expected a tensor (the loss) or a table of them, got " .. type(outputs), 2)
  end
  return outputs * self._scale
end

-- The gradients of an optimizer's parameters: optimizer.param_groups[i].params
-- (PyTorch's layout) or optimizer.params.
local function gradients_of(optimizer)
  local groups = optimizer.param_groups
  if groups == nil and optimizer.params ~= nil then groups = { { params = optimizer.params } } end
  if type(groups) ~= "table" then
    error("GradScaler: the optimizer has neither param_groups nor params", 3)
  end
  local grads = {}
  for _, group in ipairs(groups) do
    for _, p in ipairs(group.params or {}) do
      local g = p.grad
      if g ~= nil then grads[#grads + 1] = g end
    end
  end
  return grads
end

local function state_of(self, optimizer)
  local st = self._per_optimizer[optimizer]
  if not st then
    st = { stage = "ready", found_inf = false }
    self._per_optimizer[optimizer] = st
  end
  return st
end

--- unscale_(optimizer): divides the optimizer's gradients by the scale in
--- place (call it before clipping gradients) and records whether any of
--- them is inf or NaN.
function GradScaler:unscale_(optimizer)
  if not self._enabled then return end
  local st = state_of(self, optimizer)
  if st.stage == "unscaled" then
    error("GradScaler:unscale_() has already been called on this optimizer since the last update()", 2)
  elseif st.stage == "stepped" then
    error("GradScaler:unscale_() is being called after step()", 2)
  end
  st.found_inf = core.amp_unscale_(gradients_of(optimizer), 1.0 / self._scale)
  st.stage = "unscaled"
end

--- step(optimizer, ...): unscales (unless unscale_ was called) and runs
--- optimizer:step(...) unless a gradient was inf/NaN. Returns step's result,
--- or nil for a skipped step.
function GradScaler:step(optimizer, ...)
  if not self._enabled then return optimizer:step(...) end
  local st = state_of(self, optimizer)
  if st.stage == "stepped" then error("GradScaler:step() has already been called since the last update()", 2) end
  if st.stage == "ready" then self:unscale_(optimizer) end
  local res
  if not st.found_inf then res = table.pack(optimizer:step(...)) end
  st.stage = "stepped"
  if res then return table.unpack(res, 1, res.n) end
  return nil
end

--- Whether the last unscale_/step of this optimizer found inf/NaN (the
--- step was skipped).
function GradScaler:found_inf(optimizer)
  local st = self._per_optimizer[optimizer]
  return st ~= nil and st.found_inf
end

--- update([new_scale]): after the step(s) of an iteration. Halves (backoff)
--- the scale if any optimizer saw inf/NaN, otherwise doubles (growth) it
--- after growth_interval clean iterations in a row.
function GradScaler:update(new_scale)
  if not self._enabled then return end
  if new_scale ~= nil then
    if type(new_scale) ~= "number" then new_scale = new_scale:item() end
    if not (new_scale > 0 and new_scale < math.huge) then
      error("GradScaler:update: new_scale must be a positive finite number, got " .. tostring(new_scale), 2)
    end
    self._scale = new_scale
  else
    local any, found = false, false
    for _, st in pairs(self._per_optimizer) do
      if st.stage ~= "ready" then any = true end
      if st.found_inf then found = true end
    end
    if not any then error("GradScaler:update: no inf checks were recorded (call step() or unscale_() first)", 2) end
    if found then
      self._scale = self._scale * self._backoff_factor
      self._growth_tracker = 0
    else
      self._growth_tracker = self._growth_tracker + 1
      if self._growth_tracker == self._growth_interval then
        local grown = self._scale * self._growth_factor
        if grown <= FLOAT32_MAX then self._scale = grown end -- the scale is a float32 in PyTorch
        self._growth_tracker = 0
      end
    end
  end
  self._per_optimizer = setmetatable({}, { __mode = "k" })
end

--- PyTorch's state_dict keys, so a checkpoint moves between the two.
function GradScaler:state_dict()
  if not self._enabled then return {} end
  return {
    scale = self._scale,
    growth_factor = self._growth_factor,
    backoff_factor = self._backoff_factor,
    growth_interval = self._growth_interval,
    _growth_tracker = self._growth_tracker,
  }
end

function GradScaler:load_state_dict(sd)
  if not self._enabled then return end
  if type(sd) ~= "table" or next(sd) == nil then
    error("GradScaler:load_state_dict: the state dict is empty (was it saved from a disabled scaler?)", 2)
  end
  for _, k in ipairs({ "scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker" }) do
    if type(sd[k]) ~= "number" then
      error("GradScaler:load_state_dict: key '" .. k .. "' must be a number, got " .. type(sd[k]), 2)
    end
  end
  self._scale = sd.scale
  self._growth_factor = sd.growth_factor
  self._backoff_factor = sd.backoff_factor
  self._growth_interval = math.tointeger(sd.growth_interval) or sd.growth_interval
  self._growth_tracker = math.tointeger(sd._growth_tracker) or sd._growth_tracker
end

return M
