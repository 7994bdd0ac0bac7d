-- nn.BatchNorm1d(num_features, ...) (input [N, C] or [N, C, L]) and
-- nn.BatchNorm2d(num_features, ...) (input [N, C, H, W]) and
-- nn.BatchNorm3d(num_features, ...) (input [N, C, D, H, W]). After
-- num_features, PyTorch's settings positionally (eps, momentum, affine,
-- track_running_stats, device, dtype) or as one table: eps=1e-5,
-- momentum=0.1 (false: cumulative average, PyTorch's momentum=None),
-- affine=true, track_running_stats=true, dtype=, device=.
-- Buffers running_mean, running_var, num_batches_tracked as in PyTorch.
local ddp = require "ddplua"
local Module = require "ddplua.nn.module"
local util = require "ddplua.nn.util"
local E = require "ddplua.errors"
local core = require "ddplua.core"

local M = {}

local BatchNorm = Module:extend("_BatchNorm")
M._BatchNorm = BatchNorm

M.SETTINGS = { "eps", "momentum", "affine", "track_running_stats", "device", "dtype" }

function BatchNorm:__init(num_features, ...)
  local who = self:_class_name()
  local opts = util.args(who, M.SETTINGS, ...)
  self.num_features = util.check_int(who, "num_features", num_features)
  self.eps = opts.eps or 1e-5
  if opts.momentum == nil then self.momentum = 0.1 else self.momentum = opts.momentum end
  if type(self.eps) ~= "number" or self.eps <= 0 then E.raise(who .. ": eps must be a positive number") end
  if self.momentum ~= false and (type(self.momentum) ~= "number" or self.momentum < 0 or self.momentum > 1) then
    E.raise(who .. ": momentum must be a number in [0, 1] or false (cumulative average), got " .. tostring(self.momentum))
  end
  self.affine = opts.affine ~= false
  self.track_running_stats = opts.track_running_stats ~= false
  local topts = util.tensor_opts(opts)
  util.norm_affine(self, num_features, self.affine, topts)
  util.norm_running_stats(self, num_features, self.track_running_stats, topts)
end

BatchNorm.reset_running_stats = util.norm_reset

--- Checks x's channel count and, in training with running statistics,
--- counts the batch; returns the running statistics' update factor
--- (momentum, or 1/batches for the cumulative average). Shared with
--- SyncBatchNorm; errors point at forward's caller.
function BatchNorm:_count_batch(x)
  if x:size(2) ~= self.num_features then
    E.raise(string.format("%s: expected input with %d channels in dimension 2, got shape %s", tostring(self),
      self.num_features, util.shape_str(x)))
  end
  local factor = self.momentum or 0
  if self.training and self.track_running_stats then
    self.num_batches_tracked:add_(1)
    if self.momentum == false then factor = 1 / self.num_batches_tracked:item() end
  end
  return factor
end

-- act: nil, or "relu" for relu(batch_norm(x)) in one pass (forward_relu)
local function forward(self, x, act)
  self:_check_input_dim(x)
  local factor = self:_count_batch(x)
  -- batch statistics when training or when no running statistics exist
  local use_batch = self.training or self.running_mean == nil
  local rm, rv
  if not self.training or self.track_running_stats then rm, rv = self.running_mean, self.running_var end
  return ddp.batch_norm(x, rm, rv, self.weight, self.bias, use_batch, factor, self.eps, act)
end

function BatchNorm:forward(x) return forward(self, x) end

--- relu(forward(x)) in one call: the same values and gradients, with the
--- ReLU applied in the normalisation's pass and its mask folded into the
--- backward's (nn.Sequential uses it for BatchNorm followed by ReLU).
function BatchNorm:forward_relu(x) return forward(self, x, "relu") end

--- pool(relu(forward(x))) for an nn.MaxPool2d `pool`, in one call: the
--- same values and gradients, without the normalised output or the pooling
--- indices in memory (nn.Sequential uses it for BatchNorm2d, ReLU,
--- MaxPool2d; inputs it cannot fuse run as the three ops).
function BatchNorm:forward_relu_max_pool2d(x, pool)
  self:_check_input_dim(x)
  local factor = self:_count_batch(x)
  local use_batch = self.training or self.running_mean == nil
  local rm, rv
  if not self.training or self.track_running_stats then rm, rv = self.running_mean, self.running_var end
  local a = pool._args
  return core.batch_norm_relu_max_pool2d(x, rm, rv, self.weight, self.bias, use_batch, factor, self.eps, a[1], a[2],
    a[3], pool.ceil_mode)
end

function BatchNorm:extra_repr()
  return string.format("%d, eps=%g, momentum=%s, affine=%s, track_running_stats=%s", self.num_features, self.eps,
    self.momentum == false and "None" or string.format("%g", self.momentum), self.affine and "True" or "False",
    self.track_running_stats and "True" or "False")
end

M.BatchNorm1d = BatchNorm:extend("BatchNorm1d")
function M.BatchNorm1d:_check_input_dim(x)
  if x:dim() ~= 2 and x:dim() ~= 3 then
    E.raise(string.format("%s: expected 2-D or 3-D input ([N, C] or [N, C, L]), got shape %s", tostring(self),
      util.shape_str(x)))
  end
end

M.BatchNorm2d = BatchNorm:extend("BatchNorm2d")
function M.BatchNorm2d:_check_input_dim(x)
  if x:dim() ~= 4 then
    E.raise(string.format("%s: expected 4-D input [N, C, H, W], got shape %s", tostring(self), util.shape_str(x)))
  end
end

M.BatchNorm3d = BatchNorm:extend("BatchNorm3d")
function M.BatchNorm3d:_check_input_dim(x)
  if x:dim() ~= 5 then
    E.raise(string.format("%s: expected 5-D input [N, C, D, H, W], got shape %s", tostring(self), util.shape_str(x)))
  end
end

return M
