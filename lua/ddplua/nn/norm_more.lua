-- Group and instance normalisation, composed from tensor ops (their gradients are autograd's):
--
--   nn.GroupNorm(num_groups, num_channels [, eps = 1e-5 [, affine = true [, device [, dtype]]]]): x [N, C, *] (any
--     number of trailing dims, none too), each sample's C channels split into num_groups groups of C / num_groups,
--     each group normalised over its channels and all trailing positions (biased variance); weight and bias [C]
--     (ones, zeros) when affine.
--   nn.InstanceNorm1d(num_features [, eps = 1e-5 [, momentum = 0.1 [, affine = false [, track_running_stats = false
--     [, device [, dtype]]]]]]) (input [N, C, L] or unbatched [C, L]) and nn.InstanceNorm2d(...) likewise (input
--     [N, C, H, W] or [C, H, W]) and nn.InstanceNorm3d(...) ([N, C, D, H, W] or [C, D, H, W]): each sample's
--     channels normalised over the spatial dims; with track_running_stats, the buffers running_mean, running_var
--     (the batch's mean of the per-instance means and unbiased variances, by momentum) and num_batches_tracked
--     (kept at 0, as PyTorch 1.13's InstanceNorm does), used in eval.
--   F.group_norm(x, num_groups [, weight [, bias [, eps = 1e-5]]])
--   F.instance_norm(x [, running_mean [, running_var [, weight [, bias [, use_input_stats = true [, momentum = 0.1
--     [, eps = 1e-5]]]]]]]): x [N, C, *].
--
-- The settings after the required arguments are positional in PyTorch's order or one options table (util.args). The
-- statistics are computed in the input's dtype.
local ddp = require "ddplua"
local Module = require "ddplua.nn.module"
local util = require "ddplua.nn.util"
local E = require "ddplua.errors"

local F = {}

local function product(shape, from)
  local n = 1
  for d = from, #shape do n = n * shape[d] end
  return n
end

local function check_eps(who, eps)
  if type(eps) ~= "number" or eps <= 0 then E.raise(who .. ": eps must be a positive number, got " .. tostring(eps)) end
  return eps
end

local function check_vector(who, what, t, C, x)
  if t == nil then return end
  if not ddp.is_tensor(t) then E.raise(string.format("%s: %s must be a tensor or nil, got %s", who, what, type(t))) end
  if t:dim() ~= 1 or t:size(1) ~= C then
    E.raise(string.format("%s: expected %s of shape [%d] (the number of channels of the input of shape %s), got " ..
      "shape %s", who, what, C, util.shape_str(x), util.shape_str(t)))
  end
end

-- y * weight[c] + bias[c] for y [N, C, *]: batch_norm's per-channel pass in evaluation mode with mean 0, variance 1
-- and eps 0 (scale w * 1, shift b: the same bits as the mul and add, in one pass over y instead of two broadcasting
-- ones, 0.9 against 2.6 ms for [64, 64, 784]; its backward gives gy * w and the channel sums); composed when the
-- dtypes differ (the ops then promote)
local function affine(y, weight, bias)
  if weight == nil and bias == nil then return y end
  local dt = y:dtype()
  if (dt == "float32" or dt == "float64") and (weight == nil or weight:dtype() == dt) and
      (bias == nil or bias:dtype() == dt) then
    local C = y:size(2)
    local opts = { dtype = dt, device = y:device() }
    local flat = y:reshape(y:size(1), C, product(y:size(), 3))
    return ddp.batch_norm(flat, ddp.zeros(C, opts), ddp.ones(C, opts), weight, bias, false, 0, 0):view(y:size())
  end
  local shape = { y:size(2) }
  for d = 3, y:dim() do shape[d - 1] = 1 end
  if weight ~= nil then y = y * weight:view(shape) end
  if bias ~= nil then y = y + bias:view(shape) end
  return y
end

-- x [N, C, *] normalised over groups of C / G channels and the trailing positions: y (x's shape), one layer_norm
-- over the groups' rows (its fused kernel and backward: composed from mean, var, sub, mul and rsqrt the forward
-- of [64, 64, 28, 28] in 8 groups took 4.9 ms, PyTorch's 1.6); with stats, also their detached statistics
-- [N, G, 1] (mean, biased variance)
local function normalize_groups(x, G, eps, stats)
  local shape = x:size()
  local N, C = shape[1], shape[2]
  local L = (C // G) * product(shape, 3)
  local x3 = x:reshape(N, G, L)
  local y = ddp.layer_norm(x3, L, nil, nil, eps):view(shape)
  if not stats then return y end
  return y, ddp.no_grad(function()
    local d = x3:detach()
    return d:mean(3, true), d:var(3, { correction = 0, keepdim = true })
  end)
end

-- group_norm(x, num_groups, weight, bias, eps) with `who` naming the caller in errors
local function group_norm(who, x, num_groups, weight, bias, eps)
  if not ddp.is_tensor(x) then E.raise(who .. ": expected a tensor input, got " .. type(x)) end
  if x:dim() < 2 then
    E.raise(string.format("%s: expected an input [N, C, *] of at least 2 dimensions, got shape %s", who,
      util.shape_str(x)))
  end
  local shape = x:size()
  local C = shape[2]
  if math.type(num_groups) ~= "integer" or num_groups < 1 then
    E.raise(string.format("%s: num_groups must be a positive integer, got %s", who, tostring(num_groups)))
  end
  if C % num_groups ~= 0 then
    E.raise(string.format("%s: expected the number of channels of the input (%d, shape %s) to be divisible by " ..
      "num_groups=%d", who, C, util.shape_str(x), num_groups))
  end
  -- PyTorch's _verify_batch_size on [N * C / G, G, *]
  if shape[1] * (C // num_groups) * product(shape, 3) == 1 then
    E.raise(string.format("%s: expected more than 1 value per channel when training, got input size %s", who,
      util.shape_str(x)))
  end
  check_vector(who, "weight", weight, C, x)
  check_vector(who, "bias", bias, C, x)
  check_eps(who, eps)
  local dt = x:dtype()
  if x:device() == "cpu" and (dt == "float32" or dt == "float64") and (weight == nil or weight:dtype() == dt) and
      (bias == nil or bias:dtype() == dt) then
    return ddp.core.group_norm(x, num_groups, weight, bias, eps) -- one kernel each way (cpu_group_norm.c)
  end
  local y = normalize_groups(x, num_groups, eps)
  return affine(y, weight, bias)
end

--- group_norm(x, num_groups [, weight [, bias [, eps = 1e-5]]]): PyTorch's F.group_norm.
function F.group_norm(x, num_groups, weight, bias, eps)
  return group_norm("group_norm", x, num_groups, weight, bias, eps or 1e-5)
end

local function instance_norm(who, x, running_mean, running_var, weight, bias, use_input_stats, momentum, eps)
  if not ddp.is_tensor(x) then E.raise(who .. ": expected a tensor input, got " .. type(x)) end
  if x:dim() < 2 then
    E.raise(string.format("%s: expected an input [N, C, *] of at least 2 dimensions, got shape %s", who,
      util.shape_str(x)))
  end
  local shape = x:size()
  local N, C = shape[1], shape[2]
  check_vector(who, "weight", weight, C, x)
  check_vector(who, "bias", bias, C, x)
  check_vector(who, "running_mean", running_mean, C, x)
  check_vector(who, "running_var", running_var, C, x)
  if (running_mean == nil) ~= (running_var == nil) then
    E.raise(who .. ": running_mean and running_var must be given together")
  end
  check_eps(who, eps)
  if type(momentum) ~= "number" then E.raise(who .. ": momentum must be a number, got " .. tostring(momentum)) end
  if not use_input_stats then
    if running_mean == nil then
      E.raise(who .. ": expected running_mean and running_var when use_input_stats is false")
    end
    local stat = { C }
    for d = 3, #shape do stat[d - 1] = 1 end
    local rm, rv = running_mean:to(x:dtype()):view(stat), running_var:to(x:dtype()):view(stat)
    return affine((x - rm) * (rv + eps):rsqrt(), weight, bias)
  end
  local M = product(shape, 3)
  -- PyTorch's _verify_spatial_size
  if M == 1 then
    E.raise(string.format("%s: expected more than 1 spatial element when training, got input size %s", who,
      util.shape_str(x)))
  end
  local y, mean, var = normalize_groups(x, C, eps, running_mean ~= nil)
  if running_mean ~= nil then
    ddp.no_grad(function()
      -- the batch's mean of the per-instance statistics (unbiased variances), as PyTorch's
      local bm = mean:detach():view(N, C):mean(1)
      local bv = (var:detach() * (M / (M - 1))):view(N, C):mean(1)
      running_mean:copy_(running_mean * (1 - momentum) + bm:to(running_mean:dtype()) * momentum)
      running_var:copy_(running_var * (1 - momentum) + bv:to(running_var:dtype()) * momentum)
    end)
  end
  return affine(y, weight, bias)
end

--- instance_norm(x [, running_mean [, running_var [, weight [, bias [, use_input_stats = true [, momentum = 0.1
--- [, eps = 1e-5]]]]]]]): PyTorch's F.instance_norm, x [N, C, *]; running statistics given with use_input_stats are
--- updated in place.
function F.instance_norm(x, running_mean, running_var, weight, bias, use_input_stats, momentum, eps)
  if use_input_stats == nil then use_input_stats = true end
  if momentum == nil then momentum = 0.1 end
  return instance_norm("instance_norm", x, running_mean, running_var, weight, bias, use_input_stats, momentum,
    eps or 1e-5)
end

-- nn.GroupNorm ---------------------------------------------------------------------------------------------------

local GroupNorm = Module:extend("GroupNorm")

function GroupNorm:__init(num_groups, num_channels, ...)
  local opts = util.args("GroupNorm", { "eps", "affine", "device", "dtype" }, ...)
  self.num_groups = util.check_int("GroupNorm", "num_groups", num_groups)
  self.num_channels = util.check_int("GroupNorm", "num_channels", num_channels)
  if num_channels % num_groups ~= 0 then
    E.raise(string.format("GroupNorm: num_channels must be divisible by num_groups, got num_channels=%d and " ..
      "num_groups=%d", num_channels, num_groups))
  end
  self.eps = check_eps("GroupNorm", opts.eps or 1e-5)
  self.affine = opts.affine ~= false
  util.norm_affine(self, num_channels, self.affine, util.tensor_opts(opts))
end

function GroupNorm:forward(x)
  if not ddp.is_tensor(x) then E.raise(tostring(self) .. ": expected a tensor input, got " .. type(x)) end
  if x:dim() < 2 or x:size(2) ~= self.num_channels then
    E.raise(string.format("%s: expected input [N, %d, *] (%d channels in dimension 2), got shape %s", tostring(self),
      self.num_channels, self.num_channels, util.shape_str(x)))
  end
  return group_norm(tostring(self), x, self.num_groups, self.weight, self.bias, self.eps)
end

function GroupNorm:extra_repr()
  return string.format("%d, %d, eps=%g, affine=%s", self.num_groups, self.num_channels, self.eps,
    self.affine and "True" or "False")
end

-- nn.InstanceNorm1d / 2d / 3d ----------------------------------------------------------------------------------

local InstanceNorm = Module:extend("_InstanceNorm")

local SETTINGS = { "eps", "momentum", "affine", "track_running_stats", "device", "dtype" }

function InstanceNorm:__init(num_features, ...)
  local who = self:_class_name()
  local opts = util.args(who, SETTINGS, ...)
  self.num_features = util.check_int(who, "num_features", num_features)
  self.eps = check_eps(who, opts.eps or 1e-5)
  if opts.momentum == nil then self.momentum = 0.1 else self.momentum = opts.momentum end
  if type(self.momentum) ~= "number" or self.momentum < 0 or self.momentum > 1 then
    E.raise(who .. ": momentum must be a number in [0, 1], got " .. tostring(self.momentum))
  end
  self.affine = opts.affine == true
  self.track_running_stats = opts.track_running_stats == true
  local topts = util.tensor_opts(opts)
  util.norm_affine(self, num_features, self.affine, topts)
  util.norm_running_stats(self, num_features, self.track_running_stats, topts)
end

InstanceNorm.reset_running_stats = util.norm_reset

local warned = {}

function InstanceNorm:forward(x)
  local who = tostring(self)
  if not ddp.is_tensor(x) then E.raise(who .. ": expected a tensor input, got " .. type(x)) end
  local nd, unbatched = x:dim(), self._spatial + 1
  if nd ~= unbatched and nd ~= unbatched + 1 then
    E.raise(string.format("%s: expected %dD (unbatched) or %dD (batched) input (%s), got shape %s", who, unbatched,
      unbatched + 1, self._shapes, util.shape_str(x)))
  end
  local cdim = nd == unbatched and 1 or 2
  if x:size(cdim) ~= self.num_features then
    if self.affine or self.track_running_stats then
      E.raise(string.format("%s: expected %d channels in dimension %d of the input, got shape %s", who,
        self.num_features, cdim, util.shape_str(x)))
    end
    -- num_features is not used then: PyTorch (since 1.12) warns, once per module class and sizes here
    local key = string.format("%s %d %d", self:_class_name(), self.num_features, x:size(cdim))
    if not warned[key] then
      warned[key] = true
      io.stderr:write(string.format("ddplua: warning: %s: the input's size in dimension %d (%d, shape %s) does not " ..
        "match num_features (%d), which is not used with affine=False and track_running_stats=False\n", who, cdim,
        x:size(cdim), util.shape_str(x), self.num_features))
    end
  end
  if nd == unbatched then x = x:unsqueeze(1) end
  local use_input_stats = self.training or not self.track_running_stats
  local y = instance_norm(who, x, self.running_mean, self.running_var, self.weight, self.bias, use_input_stats,
    self.momentum, self.eps)
  if nd == unbatched then y = y:squeeze(1) end
  return y
end

function InstanceNorm:extra_repr()
  return string.format("%d, eps=%g, momentum=%g, affine=%s, track_running_stats=%s", self.num_features, self.eps,
    self.momentum, self.affine and "True" or "False", self.track_running_stats and "True" or "False")
end

local InstanceNorm1d = InstanceNorm:extend("InstanceNorm1d")
InstanceNorm1d._spatial, InstanceNorm1d._shapes = 1, "[C, L] or [N, C, L]"

local InstanceNorm2d = InstanceNorm:extend("InstanceNorm2d")
InstanceNorm2d._spatial, InstanceNorm2d._shapes = 2, "[C, H, W] or [N, C, H, W]"

local InstanceNorm3d = InstanceNorm:extend("InstanceNorm3d")
InstanceNorm3d._spatial, InstanceNorm3d._shapes = 3, "[C, D, H, W] or [N, C, D, H, W]"

return {
  modules = { GroupNorm = GroupNorm, InstanceNorm1d = InstanceNorm1d, InstanceNorm2d = InstanceNorm2d,
    InstanceNorm3d = InstanceNorm3d },
  F = F,
}
