-- nn.CrossEntropyLoss{reduction="mean", label_smoothing=0, ignore_index=-100}
-- (targets are class positions 1..C) and nn.MSELoss{reduction="mean"}.
-- loss(input, target) returns ddp.cross_entropy / ddp.mse_loss of them.
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

M.CrossEntropyLoss = Module:extend("CrossEntropyLoss")

function M.CrossEntropyLoss:__init(opts)
  opts = util.check_opts("CrossEntropyLoss", opts, { "reduction", "label_smoothing", "ignore_index" })
  check_reduction("CrossEntropyLoss", opts.reduction)
  local ls = opts.label_smoothing
  if ls ~= nil and (type(ls) ~= "number" or ls < 0 or ls > 1) then
    E.raise("CrossEntropyLoss: label_smoothing must be a number in [0, 1], got " .. tostring(ls))
  end
  if opts.ignore_index ~= nil and math.type(opts.ignore_index) ~= "integer" then
    E.raise("CrossEntropyLoss: ignore_index must be an integer, got " .. tostring(opts.ignore_index))
  end
  self.reduction = opts.reduction or "mean"
  self.label_smoothing = ls or 0
  self.ignore_index = opts.ignore_index or -100
  self._opts = { reduction = self.reduction, label_smoothing = self.label_smoothing, ignore_index = self.ignore_index }
end

function M.CrossEntropyLoss:forward(input, target) return ddp.cross_entropy(input, target, self._opts) end

function M.CrossEntropyLoss:extra_repr()
  local parts = {}
  if self.reduction ~= "mean" then parts[#parts + 1] = "reduction=" .. self.reduction end
  if self.label_smoothing ~= 0 then parts[#parts + 1] = string.format("label_smoothing=%g", self.label_smoothing) end
  if self.ignore_index ~= -100 then parts[#parts + 1] = "ignore_index=" .. self.ignore_index end
  return table.concat(parts, ", ")
end

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
