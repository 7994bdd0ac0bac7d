-- The losses composed in Lua from the tensor ops (autograd runs through the composition), each a module and a
-- functional form (nn.F.NAME(input, target [, opts]); opts keys other than the listed ones are an error):
--   nn.BCELoss{weight=, reduction=}            F.binary_cross_entropy(p, y, {weight=, reduction=})
--   nn.BCEWithLogitsLoss{weight=, reduction=, pos_weight=}
--                                              F.binary_cross_entropy_with_logits(x, y, {weight=, reduction=,
--                                                                                        pos_weight=})
--   nn.L1Loss{reduction=}                      F.l1_loss(x, y, {reduction=})
--   nn.SmoothL1Loss{reduction=, beta=1}        F.smooth_l1_loss(x, y, {reduction=, beta=})
--   nn.HuberLoss{reduction=, delta=1}          F.huber_loss(x, y, {reduction=, delta=})
--   nn.KLDivLoss{reduction=, log_target=false} F.kl_div(logq, p, {reduction=, log_target=})
-- reduction is "mean" (the default), "sum" or "none", and for kl_div also "batchmean" (the sum over the input's first
-- dim's size; a 0-dim input's sum); the mean of an empty loss is NaN, as PyTorch's. The input must be a floating
-- point tensor. binary_cross_entropy's and ..._with_logits' targets are floating tensors of the input's shape; the
-- other losses broadcast input and target, as PyTorch's (l1, smooth_l1 and huber warn on stderr, once per loss, when
-- the shapes differ, as mse_loss does). weight (a rescaling of each element) and pos_weight (the weight of the
-- positive term, a [C] tensor for the classes along the last dim) must broadcast to the input's shape; they are cast
-- to the input's dtype, and the modules keep them as buffers (state_dict has them, as PyTorch's).
--
-- binary_cross_entropy: -w (y max(log p, -100) + (1 - y) max(log(1 - p), -100)), so p = 0 or 1 gives a finite loss;
-- an input outside [0, 1] (or NaN) is an error, as in PyTorch (one reduction over the input finds it). p's gradient
-- is PyTorch's, w (p - y) / max(p (1 - p), 1e-12) (1e-12 as a float32), also where a log is clamped.
-- binary_cross_entropy_with_logits: (1 - y) x + (1 + (pw - 1) y) (log1p(exp(-|x|)) + max(-x, 0)), finite for any
-- finite x; its gradient is sigmoid(x) (1 + (pw - 1) y) - pw y everywhere, x = 0 included. With d = input - target,
-- smooth_l1_loss: 0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (beta = 0: l1_loss); huber_loss: 0.5 d^2
-- where |d| < delta, else delta (|d| - 0.5 delta). kl_div: target (log(target) - input), 0 where the target is 0
-- (log_target: exp(target) (target - input)).
--
-- Deliberate differences from PyTorch: errors for bad arguments are ddplua's (naming the loss) and kl_div's "mean"
-- prints no warning; a float32 input with a float64 target gives a float64 loss (PyTorch's binary_cross_entropy
-- refuses mixed dtypes), and an integer input is refused by every loss (PyTorch's l1_loss takes one with
-- reduction="none"); weight and pos_weight have gradients (PyTorch refuses weights that require them); a
-- binary_cross_entropy target's gradient is that of the clamped logs (100 where p = 0, PyTorch's -logit(p) is inf);
-- smooth_l1_loss with beta = 0 has L1's gradient, 0 where input = target or NaN (PyTorch 1.13's is -1 there, NaN
-- at a NaN).
local ddp = require "ddplua"
local Module = require "ddplua.nn.module"
local util = require "ddplua.nn.util"
local E = require "ddplua.errors"
local core = ddp.core

local M = {}

local REDUCTIONS = { "mean", "sum", "none" }
local KL_REDUCTIONS = { "mean", "batchmean", "sum", "none" }
-- PyTorch's EPSILON in binary_cross_entropy's gradient: 1e-12 as a float32
local EPS = string.unpack("<f", string.pack("<f", 1e-12))

local function shape_str(t) return "[" .. table.concat(t:size(), ", ") .. "]" end

local function check_reduction(who, r, valid)
  if r == nil then return "mean" end
  for _, v in ipairs(valid) do if r == v then return r end end
  local quoted = {}
  for i, v in ipairs(valid) do quoted[i] = '"' .. v .. '"' end
  E.raise(string.format("%s: reduction must be %s or %s, got %s", who, table.concat(quoted, ", ", 1, #quoted - 1),
    quoted[#quoted], tostring(r)))
end

local function check_tensor(who, what, x)
  if not ddp.is_tensor(x) then E.raise(string.format("%s: %s must be a tensor, got %s", who, what, type(x))) end
  return x
end

local function check_float(who, what, x)
  check_tensor(who, what, x)
  if not x:is_floating_point() then
    E.raise(string.format("%s: %s must be a floating point tensor, got %s (convert with :float())", who, what,
      x:dtype()))
  end
  return x
end

-- a weight option: nil or a floating tensor
local function check_weight(who, what, w)
  if w == nil then return nil end
  return check_float(who, what, w)
end

-- w broadcasts to x's shape (without growing it); cast to x's dtype
local function fit_weight(who, what, w, x)
  if w == nil then return nil end
  check_weight(who, what, w)
  local sw, sx = w:size(), x:size()
  local ok = #sw <= #sx
  for i = 0, #sw - 1 do
    local d = sw[#sw - i]
    if ok and d ~= 1 and d ~= sx[#sx - i] then ok = false end
  end
  if not ok then
    E.raise(string.format("%s: %s of shape %s does not broadcast to the input's shape %s", who, what, shape_str(w),
      shape_str(x)))
  end
  if w:dtype() ~= x:dtype() then w = w:to(x:dtype()) end
  return w
end

local function same_shape(who, x, y)
  local sx, sy = x:size(), y:size()
  local same = #sx == #sy
  for i = 1, #sx do same = same and sx[i] == sy[i] end
  if not same then
    E.raise(string.format("%s: target shape %s differs from input shape %s (they must be the same)", who,
      shape_str(y), shape_str(x)))
  end
end

local warned = {}

-- input and target broadcast; warn: a warning (once per loss) when their shapes differ, as mse_loss's and PyTorch's
local function broadcastable(who, x, y, warn)
  local sx, sy = x:size(), y:size()
  local n = math.max(#sx, #sy)
  local same = #sx == #sy
  for i = 1, n do
    local a, b = sx[i - n + #sx] or 1, sy[i - n + #sy] or 1
    if a ~= b and a ~= 1 and b ~= 1 then
      E.raise(string.format("%s: input %s and target %s do not broadcast", who, shape_str(x), shape_str(y)))
    end
    same = same and a == b
  end
  if warn and not same and not warned[who] then
    warned[who] = true
    io.stderr:write(string.format("ddplua: warning: %s: using a target size (%s) that is different to the input " ..
      "size (%s). This will likely lead to incorrect results due to broadcasting. Please ensure they have the same " ..
      "size.\n", who, shape_str(y), shape_str(x)))
  end
end

-- input and target tensors, the input floating (and the target too, when both must be)
local function check_pair(who, x, y, float_target)
  check_float(who, "input", x)
  if float_target then check_float(who, "target", y) else check_tensor(who, "target", y) end
end

local function reduce(loss, reduction, input)
  if reduction == "none" then return loss end
  if reduction == "sum" then return loss:sum() end
  if reduction == "batchmean" then
    local s = loss:sum()
    if input:dim() == 0 then return s end
    return s / input:size(1)
  end
  return loss:mean()
end

-- a functional form's options table (nil: none), its keys checked
local function options(who, opts, valid)
  if ddp.is_tensor(opts) then
    E.raise(string.format("%s: the options come as a table (%s), got a tensor; a weight goes as {weight = w}", who,
      table.concat(valid, ", ")))
  end
  return util.check_opts(who, opts, valid)
end

local function check_number(who, what, v, positive)
  if type(v) ~= "number" or v ~= v or v < 0 or (positive and v == 0) then
    E.raise(string.format("%s: %s must be a %s number, got %s", who, what, positive and "positive" or "non-negative",
      tostring(v)))
  end
  return v
end

-- ---- the losses (who: the name errors give) -----------------------------------------------------------------------

local function bce(who, x, y, w, reduction)
  check_pair(who, x, y, true)
  same_shape(who, x, y)
  w = fit_weight(who, "weight", w, x)
  local xd = x:detach()
  if xd:clamp(0, 1):ne(xd):any():item() ~= 0 then
    E.raise(who .. ": all elements of input should be between 0 and 1 (probabilities, such as a sigmoid's output); " ..
      "the input holds a value outside [0, 1] or a NaN")
  end
  local loss = (y - 1) * (-xd):log1p():clamp_min(-100) - y * xd:log():clamp_min(-100)
  if x.requires_grad and ddp.is_grad_enabled() then
    -- the logs are of the detached input; its gradient is PyTorch's, added as (x - x) * g (0 going forward)
    local g = (xd - y:detach()) / (xd * (1 - xd)):clamp_min(EPS)
    loss = loss + (x - xd) * g
  end
  if w then loss = loss * w end
  return reduce(loss, reduction, x)
end

local function bce_logits(who, x, y, w, pw, reduction)
  check_pair(who, x, y, true)
  same_shape(who, x, y)
  w, pw = fit_weight(who, "weight", w, x), fit_weight(who, "pos_weight", pw, x)
  local loss
  if pw then
    -- log(1 + exp(-x)) = log1p(exp(-|x|)) + max(-x, 0), with -|x| = -x - 2 max(-x, 0): the gradient is right at 0
    local nx = x:neg()
    local m = nx:relu()
    local sp = (nx - m * 2):exp():log1p() + m
    loss = (1 - y) * x + ((pw - 1) * y + 1) * sp
  else -- the same formula as one op of the table (six passes composed, 0.7-0.8x PyTorch's speed)
    loss = core._bce_logits(x, y)
  end
  if w then loss = loss * w end
  return reduce(loss, reduction, x)
end

local function l1(who, x, y, reduction)
  check_pair(who, x, y)
  broadcastable(who, x, y, true)
  return reduce((x - y):abs(), reduction, x)
end

-- smooth_l1 and huber: the difference, then the loss's elementwise form in one op of the table (core._smooth_l1,
-- core._huber: PyTorch's formulas and gradients; a composition of abs, lt, square and where took eight passes
-- forward and more back, 0.09x PyTorch's speed)
local function smooth_l1(who, x, y, beta, reduction)
  if beta == 0 then return l1(who, x, y, reduction) end
  check_pair(who, x, y)
  broadcastable(who, x, y, true)
  return reduce(core._smooth_l1(x - y, beta), reduction, x)
end

local function huber(who, x, y, delta, reduction)
  check_pair(who, x, y)
  broadcastable(who, x, y, true)
  return reduce(core._huber(x - y, delta), reduction, x)
end

local function kl_div(who, x, t, reduction, log_target)
  check_pair(who, x, t, true)
  broadcastable(who, x, t)
  local loss
  if log_target then
    loss = t:exp() * (t - x)
  else
    loss = ddp.where(t:eq(0), 0, t * t:log()) - t * x -- xlogy(t, t) - t x
  end
  return reduce(loss, reduction, x)
end

local function check_log_target(who, v)
  if v ~= nil and type(v) ~= "boolean" then E.raise(who .. ": log_target must be a boolean, got " .. tostring(v)) end
  return v or false
end

-- ---- functional forms ---------------------------------------------------------------------------------------------

function M.binary_cross_entropy(input, target, opts)
  local who = "binary_cross_entropy"
  opts = options(who, opts, { "weight", "reduction" })
  return bce(who, input, target, check_weight(who, "weight", opts.weight), check_reduction(who, opts.reduction,
    REDUCTIONS))
end

function M.binary_cross_entropy_with_logits(input, target, opts)
  local who = "binary_cross_entropy_with_logits"
  opts = options(who, opts, { "weight", "reduction", "pos_weight" })
  return bce_logits(who, input, target, check_weight(who, "weight", opts.weight),
    check_weight(who, "pos_weight", opts.pos_weight), check_reduction(who, opts.reduction, REDUCTIONS))
end

function M.l1_loss(input, target, opts)
  opts = options("l1_loss", opts, { "reduction" })
  return l1("l1_loss", input, target, check_reduction("l1_loss", opts.reduction, REDUCTIONS))
end

function M.smooth_l1_loss(input, target, opts)
  local who = "smooth_l1_loss"
  opts = options(who, opts, { "reduction", "beta" })
  local beta = opts.beta == nil and 1.0 or check_number(who, "beta", opts.beta)
  return smooth_l1(who, input, target, beta, check_reduction(who, opts.reduction, REDUCTIONS))
end

function M.huber_loss(input, target, opts)
  local who = "huber_loss"
  opts = options(who, opts, { "reduction", "delta" })
  local delta = opts.delta == nil and 1.0 or check_number(who, "delta", opts.delta, true)
  return huber(who, input, target, delta, check_reduction(who, opts.reduction, REDUCTIONS))
end

function M.kl_div(input, target, opts)
  local who = "kl_div"
  opts = options(who, opts, { "reduction", "log_target" })
  return kl_div(who, input, target, check_reduction(who, opts.reduction, KL_REDUCTIONS),
    check_log_target(who, opts.log_target))
end

-- ---- modules ------------------------------------------------------------------------------------------------------

-- a loss module class: init(self, opts) reads its own settings after reduction; repr_parts(self) lists them
local function loss_class(name, valid, reductions, init, repr_parts)
  local C = Module:extend(name)
  function C:__init(opts)
    opts = util.check_opts(name, opts, valid)
    self.reduction = check_reduction(name, opts.reduction, reductions)
    if init then init(self, opts) end
  end
  function C:extra_repr()
    local parts = repr_parts and repr_parts(self) or {}
    if self.reduction ~= "mean" then table.insert(parts, 1, "reduction=" .. self.reduction) end
    return table.concat(parts, ", ")
  end
  return C
end

M.BCELoss = loss_class("BCELoss", { "weight", "reduction" }, REDUCTIONS, function(self, opts)
  self:register_buffer("weight", check_weight("BCELoss", "weight", opts.weight))
end)
function M.BCELoss:forward(input, target) return bce("BCELoss", input, target, self.weight, self.reduction) end

M.BCEWithLogitsLoss = loss_class("BCEWithLogitsLoss", { "weight", "reduction", "pos_weight" }, REDUCTIONS,
  function(self, opts)
    self:register_buffer("weight", check_weight("BCEWithLogitsLoss", "weight", opts.weight))
    self:register_buffer("pos_weight", check_weight("BCEWithLogitsLoss", "pos_weight", opts.pos_weight))
  end)
function M.BCEWithLogitsLoss:forward(input, target)
  return bce_logits("BCEWithLogitsLoss", input, target, self.weight, self.pos_weight, self.reduction)
end

M.L1Loss = loss_class("L1Loss", { "reduction" }, REDUCTIONS)
function M.L1Loss:forward(input, target) return l1("L1Loss", input, target, self.reduction) end

M.SmoothL1Loss = loss_class("SmoothL1Loss", { "reduction", "beta" }, REDUCTIONS, function(self, opts)
  self.beta = opts.beta == nil and 1.0 or check_number("SmoothL1Loss", "beta", opts.beta)
end, function(self) return self.beta ~= 1 and { string.format("beta=%g", self.beta) } or {} end)
function M.SmoothL1Loss:forward(input, target)
  return smooth_l1("SmoothL1Loss", input, target, self.beta, self.reduction)
end

M.HuberLoss = loss_class("HuberLoss", { "reduction", "delta" }, REDUCTIONS, function(self, opts)
  self.delta = opts.delta == nil and 1.0 or check_number("HuberLoss", "delta", opts.delta, true)
end, function(self) return self.delta ~= 1 and { string.format("delta=%g", self.delta) } or {} end)
function M.HuberLoss:forward(input, target) return huber("HuberLoss", input, target, self.delta, self.reduction) end

M.KLDivLoss = loss_class("KLDivLoss", { "reduction", "log_target" }, KL_REDUCTIONS, function(self, opts)
  self.log_target = check_log_target("KLDivLoss", opts.log_target)
end, function(self) return self.log_target and { "log_target=true" } or {} end)
function M.KLDivLoss:forward(input, target)
  return kl_div("KLDivLoss", input, target, self.reduction, self.log_target)
end

return M
