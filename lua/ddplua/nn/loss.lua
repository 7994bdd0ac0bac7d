-- nn.CrossEntropyLoss{weight=, reduction="mean", label_smoothing=0, ignore_index=-100} (targets are class
-- positions 1..C, or class probabilities of the input's shape), nn.NLLLoss{weight=, reduction=, ignore_index=}
-- (of log-probabilities) and nn.MSELoss{reduction="mean"}. loss(input, target) returns ddp.cross_entropy /
-- ddp.nll_loss / ddp.mse_loss of them. weight is a [C] tensor of class weights (a buffer: state_dict has it, as
-- PyTorch's).
local ddp = require "ddplua"
local Module = require "ddplua.nn.module"
local util = require "ddplua.nn.util"
local E = require "ddplua.errors"

local M = {}

local reductions = { mean = true, sum = true, none = true }

local function check_reduction(who, r)
  if r ~= nil and not reductions[r] then
    E.raise(string.format('%s: reduction must be "mean", "sum" or "none", got %s', who, tostring(r)))
  end
end

-- the options both class-target losses share; the weight becomes a buffer
local function init_class_loss(self, who, opts, extra)
  local valid = { "weight", "reduction", "ignore_index" }
  for _, k in ipairs(extra) do valid[#valid + 1] = k end
  opts = util.check_opts(who, opts, valid)
  check_reduction(who, opts.reduction)
  if opts.ignore_index ~= nil and math.type(opts.ignore_index) ~= "integer" then
    E.raise(who .. ": ignore_index must be an integer, got " .. tostring(opts.ignore_index))
  end
  if opts.weight ~= nil and not ddp.is_tensor(opts.weight) then
    E.raise(who .. ": weight must be a tensor of class weights, got " .. type(opts.weight))
  end
  self:register_buffer("weight", opts.weight)
  self.reduction = opts.reduction or "mean"
  self.ignore_index = opts.ignore_index or -100
  return opts
end

local function class_loss_repr(self, parts)
  if self.reduction ~= "mean" then table.insert(parts, 1, "reduction=" .. self.reduction) end
  if self.ignore_index ~= -100 then parts[#parts + 1] = "ignore_index=" .. self.ignore_index end
  return table.concat(parts, ", ")
end

M.CrossEntropyLoss = Module:extend("CrossEntropyLoss")

function M.CrossEntropyLoss:__init(opts)
  opts = init_class_loss(self, "CrossEntropyLoss", opts, { "label_smoothing" })
  local ls = opts.label_smoothing
  if ls ~= nil and (type(ls) ~= "number" or not (ls >= 0 and ls <= 1)) then
    E.raise("CrossEntropyLoss: label_smoothing must be a number in [0, 1], got " .. tostring(ls))
  end
  self.label_smoothing = ls or 0
end

function M.CrossEntropyLoss:forward(input, target)
  return ddp.cross_entropy(input, target, { reduction = self.reduction, label_smoothing = self.label_smoothing,
                                            ignore_index = self.ignore_index, weight = self.weight })
end

function M.CrossEntropyLoss:extra_repr()
  local parts = {}
  if self.label_smoothing ~= 0 then parts[#parts + 1] = string.format("label_smoothing=%g", self.label_smoothing) end
  return class_loss_repr(self, parts)
end

M.NLLLoss = Module:extend("NLLLoss")

function M.NLLLoss:__init(opts) init_class_loss(self, "NLLLoss", opts, {}) end

function M.NLLLoss:forward(input, target)
  return ddp.nll_loss(input, target, { reduction = self.reduction, ignore_index = self.ignore_index,
                                       weight = self.weight })
end

function M.NLLLoss:extra_repr() return class_loss_repr(self, {}) end

M.MSELoss = Module:extend("MSELoss")

function M.MSELoss:__init(opts)
  opts = util.check_opts("MSELoss", opts, { "reduction" })
  check_reduction("MSELoss", opts.reduction)
  self.reduction = opts.reduction or "mean"
  self._opts = { reduction = self.reduction }
end

function M.MSELoss:forward(input, target) return ddp.mse_loss(input, target, self._opts) end

function M.MSELoss:extra_repr() return self.reduction ~= "mean" and "reduction=" .. self.reduction or "" end

return M
