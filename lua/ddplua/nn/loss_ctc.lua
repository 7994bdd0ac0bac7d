-- Connectionist temporal classification (speech and handwriting recognition: unsegmented label sequences):
--
--   nn.CTCLoss{blank = 1, reduction = "mean", zero_infinity = false}
--   loss = ctc(log_probs, targets, input_lengths, target_lengths)
--   F.ctc_loss(log_probs, targets, input_lengths, target_lengths [, {blank =, reduction =, zero_infinity =}])
--
-- log_probs [T, N, C] (float32 or float64, usually log_softmax's output; unbatched [T, C]); targets int64, [N, S]
-- padded or the N label sequences concatenated (unbatched [S]); input_lengths and target_lengths the N lengths as
-- int64 tensors or Lua lists (unbatched: one number or a 0-dim tensor). Classes and blank count from 1, as every
-- class index in ddplua (PyTorch's blank=0 is blank=1 here). reduction "none" gives each sample's loss, "sum" their
-- sum, "mean" the mean of each loss divided by its target length (at least 1), as PyTorch's. zero_infinity turns the
-- losses of impossible alignments (a target too long for its input) and their gradients into 0.
--
-- The recursions run in C (src/ops/ctc.c, src/backends/cpu/cpu_ctc.c: double precision, one sample a task); the
-- gradient is PyTorch 1.13's formula (the log-probabilities' gradient exp(lp) - posterior / ..., which through
-- log_softmax gives the logits' exact gradient). Deliberate differences: a label equal to the blank or outside
-- 1..C, and lengths outside their ranges, are errors (PyTorch 1.13 computes on with them); an input length of 0
-- gives loss 0 for an empty target and inf otherwise (PyTorch 1.13 reads past the sample).
local ddp = require "ddplua"
local Module = require "ddplua.nn.module"
local util = require "ddplua.nn.util"
local E = require "ddplua.errors"

local M = { modules = {}, F = {} }
local REDUCTIONS = { none = true, mean = true, sum = true }
local SETTINGS = { blank = true, reduction = true, zero_infinity = true }

local function settings(who, o)
  if o ~= nil and (type(o) ~= "table" or getmetatable(o) ~= nil) then
    E.raise(string.format("%s: expected the options as a table {blank =, reduction =, zero_infinity =}, got %s", who,
      ddp.is_tensor(o) and "a tensor" or type(o)))
  end
  o = o or {}
  for k in pairs(o) do
    if not SETTINGS[k] then
      E.raise(string.format("%s: unknown option '%s' (expected blank, reduction or zero_infinity)", who, tostring(k)))
    end
  end
  local blank = o.blank == nil and 1 or o.blank
  if math.type(blank) ~= "integer" or blank < 1 then
    E.raise(string.format("%s: blank must be a class index (an integer >= 1), got %s", who, tostring(blank)))
  end
  local reduction = o.reduction == nil and "mean" or o.reduction
  if not REDUCTIONS[reduction] then
    E.raise(string.format("%s: reduction must be 'none', 'mean' or 'sum', got %s", who, tostring(reduction)))
  end
  if o.zero_infinity ~= nil and type(o.zero_infinity) ~= "boolean" then
    E.raise(string.format("%s: zero_infinity must be a boolean, got %s", who, tostring(o.zero_infinity)))
  end
  return { blank = blank, reduction = reduction, zero_infinity = o.zero_infinity == true }
end

-- lengths as an int64 tensor of n values: a tensor, a Lua list, or (unbatched) one number
local function lengths(who, what, v, batched)
  if type(v) == "number" and not batched then v = { v } end
  if type(v) == "table" and getmetatable(v) == nil then
    for i, e in ipairs(v) do
      if math.type(e) ~= "integer" then
        E.raise(string.format("%s: %s must hold integers, got %s at position %d", who, what, tostring(e), i))
      end
    end
    return ddp.tensor(v, { dtype = "int64" })
  end
  if not ddp.is_tensor(v) then
    E.raise(string.format("%s: %s must be an int64 tensor or a list of integers, got %s", who, what, type(v)))
  end
  if v:dtype() ~= "int64" then
    E.raise(string.format("%s: %s must be an int64 tensor, got %s", who, what, v:dtype()))
  end
  return v:dim() == 0 and v:view(1) or v
end

local function ctc_loss(who, o, log_probs, targets, input_lengths, target_lengths)
  util.check_tensor(who, log_probs)
  util.check_tensor(who, targets)
  local batched = log_probs:dim() == 3
  if not batched and log_probs:dim() ~= 2 then
    E.raise(string.format("%s: log_probs must be [T, N, C] or unbatched [T, C], got %s", who,
      util.shape_str(log_probs)))
  end
  local lp, tg = log_probs, targets
  if not batched then
    lp = log_probs:unsqueeze(2)
    if targets:dim() ~= 1 then
      E.raise(string.format("%s: an unbatched log_probs [T, C] takes targets [S], got %s", who,
        util.shape_str(targets)))
    end
    tg = targets:unsqueeze(1)
  end
  local il = lengths(who, "input_lengths", input_lengths, batched)
  local tl = lengths(who, "target_lengths", target_lengths, batched)
  local loss = ddp.core._ctc_loss(lp, tg, il:to(lp:device()), tl:to(lp:device()), o.blank, o.zero_infinity)
  if o.reduction == "none" then return batched and loss or loss:squeeze(1) end
  if o.reduction == "sum" then return loss:sum() end
  return (loss / tl:to(lp:device()):clamp_min(1):to(loss:dtype())):mean()
end

--- F.ctc_loss(log_probs, targets, input_lengths, target_lengths [, {blank = 1, reduction = "mean",
--- zero_infinity = false}])
function M.F.ctc_loss(log_probs, targets, input_lengths, target_lengths, opts)
  return ctc_loss("ctc_loss", settings("ctc_loss", opts), log_probs, targets, input_lengths, target_lengths)
end

local CTCLoss = Module:extend("CTCLoss")
M.modules.CTCLoss = CTCLoss

function CTCLoss:__init(opts)
  local o = settings("CTCLoss", opts)
  self.blank, self.reduction, self.zero_infinity = o.blank, o.reduction, o.zero_infinity
end

function CTCLoss:forward(log_probs, targets, input_lengths, target_lengths)
  return ctc_loss(tostring(self), self, log_probs, targets, input_lengths, target_lengths)
end

-- PyTorch prints CTCLoss() whatever its settings
function CTCLoss:extra_repr() return "" end

return M
