-- nn.SyncBatchNorm(num_features [, opts]): batch norm whose statistics are
-- computed over the whole global batch (every rank of the process group),
-- as the seed tutorial asks for under DDP. Same parameters and buffers as
-- BatchNorm1d/2d; opts as BatchNorm plus process_group=. Outside training,
-- or without an initialised process group, it is plain batch norm.
--
-- nn.SyncBatchNorm.convert_sync_batchnorm(model [, process_group]) replaces
-- every BatchNorm1d/2d in a model with a SyncBatchNorm sharing its
-- parameters and buffers, and returns the model (or the new module when the
-- model itself is a batch norm).
local ddp = require "ddplua"
local core = ddp.core
local batchnorm = require "ddplua.nn.batchnorm"
local util = require "ddplua.nn.util"
local E = require "ddplua.errors"

local SyncBatchNorm = batchnorm._BatchNorm:extend("SyncBatchNorm")

-- PyTorch's positional order: eps, momentum, affine, track_running_stats,
-- process_group, device, dtype
local SETTINGS = { "eps", "momentum", "affine", "track_running_stats", "process_group", "device", "dtype" }

function SyncBatchNorm:__init(num_features, ...)
  local opts = util.args("SyncBatchNorm", SETTINGS, ...)
  local group = opts.process_group
  opts.process_group = nil
  batchnorm._BatchNorm.__init(self, num_features, opts)
  rawset(self, "process_group", group)
end

function SyncBatchNorm:_check_input_dim(x)
  if x:dim() < 2 then
    E.raise(string.format("%s: expected at least 2-D input [N, C, ...], got shape %s", tostring(self),
      util.shape_str(x)))
  end
end

function SyncBatchNorm:forward(x)
  local dist = ddp.distributed
  if not (self.training and dist.is_initialized()) then return batchnorm._BatchNorm.forward(self, x) end
  self:_check_input_dim(x)
  local factor = self:_count_batch(x) -- training here
  local rm, rv
  if self.track_running_stats then rm, rv = self.running_mean, self.running_var end
  return core.sync_batch_norm(x, rm, rv, self.weight, self.bias, true, factor, self.eps, self.process_group)
end

--- relu(forward(x)): fused where it is plain batch norm (outside training
--- or without a process group); the synchronised path applies the ReLU
--- after it.
function SyncBatchNorm:forward_relu(x)
  if not (self.training and ddp.distributed.is_initialized()) then
    return batchnorm._BatchNorm.forward_relu(self, x)
  end
  return self:forward(x):relu()
end

--- pool(relu(forward(x))) for an nn.MaxPool2d `pool` (nn.Sequential's
--- SyncBatchNorm, ReLU, MaxPool2d): the same values and gradients, through
--- batch norm's fused kernels with the statistics and the backward's sums
--- taken over the group.
function SyncBatchNorm:forward_relu_max_pool2d(x, pool)
  if not (self.training and ddp.distributed.is_initialized()) then
    return batchnorm._BatchNorm.forward_relu_max_pool2d(self, x, pool)
  end
  self:_check_input_dim(x)
  local factor = self:_count_batch(x)
  local rm, rv
  if self.track_running_stats then rm, rv = self.running_mean, self.running_var end
  local a = pool._args
  return core.sync_batch_norm_relu_max_pool2d(x, rm, rv, self.weight, self.bias, true, factor, self.eps,
    self.process_group, a[1], a[2], a[3], pool.ceil_mode)
end

local function is_batchnorm(m)
  local name = getmetatable(m).__name
  return name == "BatchNorm1d" or name == "BatchNorm2d" or name == "BatchNorm3d"
end

local function convert_one(bn, group)
  local opts = { eps = bn.eps, momentum = bn.momentum, affine = bn.affine,
    track_running_stats = bn.track_running_stats, process_group = group }
  local s = SyncBatchNorm(bn.num_features, opts)
  -- share the very tensors (an optimizer built before stays valid)
  for _, name in ipairs({ "weight", "bias" }) do
    if bn[name] ~= nil then s:register_parameter(name, bn[name]) end
  end
  for _, name in ipairs({ "running_mean", "running_var", "num_batches_tracked" }) do
    if bn[name] ~= nil then s:register_buffer(name, bn[name]) end
  end
  s.training = bn.training
  return s
end

function SyncBatchNorm.convert_sync_batchnorm(model, process_group)
  if type(model) ~= "table" or type(model.named_children) ~= "function" then
    E.raise("convert_sync_batchnorm: expected an nn.Module, got " .. type(model))
  end
  if is_batchnorm(model) then return convert_one(model, process_group) end
  local function walk(m)
    local replace = {}
    for name, child in m:named_children() do
      if is_batchnorm(child) then replace[#replace + 1] = { name, convert_one(child, process_group) }
      else walk(child) end
    end
    for _, r in ipairs(replace) do m:add_module(r[1], r[2]) end
  end
  walk(model)
  return model
end

return SyncBatchNorm
