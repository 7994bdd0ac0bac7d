-- The 1-d convolutions and pools, each the 2-d op over a unit H dim ([N, C, L] viewed [N, C, 1, L], weights
-- [.., .., k] viewed [.., .., 1, k]); nn/cells.lua brings them into nn and nn.F:
--
--   nn.Conv1d(in_channels, out_channels, kernel_size [, stride [, padding [, dilation [, groups [, bias [,
--     padding_mode [, device [, dtype]]]]]]]])
--   nn.ConvTranspose1d(in_channels, out_channels, kernel_size [, stride [, padding [, output_padding [, groups [,
--     bias [, dilation [, padding_mode [, device [, dtype]]]]]]]]])        forward(x [, output_size])
--   nn.MaxPool1d(kernel_size [, stride [, padding [, dilation [, return_indices [, ceil_mode]]]]])
--   nn.AvgPool1d(kernel_size [, stride [, padding [, ceil_mode [, count_include_pad]]]])
--   (PyTorch's positional order, then optionally one options table of the rest by name)
--   F.conv1d(x, w [, b [, stride [, padding [, dilation [, groups]]]]])
--   F.conv_transpose1d(x, w [, b [, stride [, padding [, output_padding [, groups [, dilation]]]]]])
--   F.max_pool1d(x, k [, stride [, padding [, dilation [, ceil_mode [, return_indices]]]]])
--   F.avg_pool1d(x, k [, stride [, padding [, ceil_mode [, count_include_pad]]]])
--
-- Input [N, C, L] or unbatched [C, L]. Sizes are integers or one-element tables {n} (PyTorch's 1-tuples). Weights
-- are stored 3-D as PyTorch's (Conv1d [out, in/groups, k], ConvTranspose1d [in, out/groups, k]) with PyTorch's
-- init: kaiming_uniform(a = sqrt(5)) and a bias U(-1/sqrt(fan_in), 1/sqrt(fan_in)). Conv1d's padding may be
-- "valid" or "same" (stride 1; an odd dilation * (kernel - 1) pads the extra zero on the right, as PyTorch). What
-- the 2-d ops lack (ConvTranspose1d's padding_mode other than "zeros", pool dilation, return_indices) is an
-- error saying so; Conv1d's padding_mode "reflect", "replicate" or "circular" pads
-- with F.pad first and convolves unpadded, as PyTorch.
local ddp = require "ddplua"
local Module = require "ddplua.nn.module"
local util = require "ddplua.nn.util"
local E = require "ddplua.errors"

local M = { modules = {}, F = {} }
local F = M.F

-- an integer or a one-element table {n}
local function single(who, what, v, allow_zero)
  if type(v) == "table" and getmetatable(v) == nil then
    if #v ~= 1 then
      E.raise(string.format("%s: %s must be an integer or a one-element table {n}, got %d values", who, what, #v))
    end
    v = v[1]
  end
  return util.check_int(who, what, v, allow_zero)
end

local function check_input(who, x, what)
  if not ddp.is_tensor(x) or (x:dim() ~= 2 and x:dim() ~= 3) then
    E.raise(string.format("%s: expected %s of shape [N, C, L] or [C, L], got %s", who, what or "an input",
      ddp.is_tensor(x) and util.shape_str(x) or type(x)))
  end
end

local function check_weight(who, w)
  if not ddp.is_tensor(w) or w:dim() ~= 3 then
    E.raise(string.format("%s: expected a 3-dimensional weight, got %s", who,
      ddp.is_tensor(w) and util.shape_str(w) or type(w)))
  end
end

-- padding "valid" / "same" / n -> left padding and the extra zeros on the right ("same" with an odd total)
local function padding_of(who, padding, k, stride, dilation)
  if padding == "valid" then return 0, 0 end
  if padding == "same" then
    if stride ~= 1 then
      E.raise(string.format("%s: padding=\"same\" needs stride 1 (PyTorch has no strided \"same\"), got stride %d", who,
        stride))
    end
    local total = dilation * (k - 1)
    return total // 2, total % 2
  end
  if type(padding) == "string" then
    E.raise(string.format("%s: padding must be an integer, {n}, \"valid\" or \"same\", got \"%s\"", who, padding))
  end
  return single(who, "padding", padding or 0, true), 0
end

-- [N, C, L] -> [N, C, 1, L]; an unbatched [C, L] -> [1, C, 1, L] (every 2-d op gets a batch dim); back with
-- from4d
local function to4d(x) return x:dim() == 2 and x:unsqueeze(1):unsqueeze(-2) or x:unsqueeze(-2) end
local function from4d(y, x) return x:dim() == 2 and y:squeeze(-2):squeeze(1) or y:squeeze(-2) end

local function zeros_like_len(x, n)
  local shape = x:size()
  shape[#shape] = n
  return ddp.zeros(shape, { dtype = x:dtype(), device = x:device() })
end

--- conv1d(x, w [, b [, stride [, padding [, dilation [, groups]]]]]): PyTorch's F.conv1d
function F.conv1d(x, w, b, stride, padding, dilation, groups)
  local who = "conv1d"
  check_input(who, x)
  check_weight(who, w)
  stride, dilation = single(who, "stride", stride or 1), single(who, "dilation", dilation or 1)
  groups = util.check_int(who, "groups", groups or 1)
  local k = w:size(3)
  local p, extra = padding_of(who, padding, k, stride, dilation)
  local C, L = x:size(-2), x:size(-1)
  if C ~= w:size(2) * groups or w:size(1) % groups ~= 0 then
    E.raise(string.format("%s: input has %d channels (shape %s) but weight of shape %s with groups %d expects %d " ..
      "input channels (and out channels divisible by groups)", who, C, util.shape_str(x), util.shape_str(w), groups,
      w:size(2) * groups))
  end
  if L + 2 * p + extra - dilation * (k - 1) - 1 < 0 then
    E.raise(string.format("%s: kernel size %d (dilation %d) does not fit the input length %d padded by %d (input " ..
      "shape %s)", who, k, dilation, L, p, util.shape_str(x)))
  end
  if extra > 0 then x = ddp.cat({ x, zeros_like_len(x, extra) }, -1) end
  return from4d(ddp.conv2d(to4d(x), w:unsqueeze(-2), b, { 1, stride }, { 0, p }, { 1, dilation }, groups), x)
end

--- conv_transpose1d(x, w [, b [, stride [, padding [, output_padding [, groups [, dilation]]]]]]): PyTorch's order
--- (groups before dilation)
function F.conv_transpose1d(x, w, b, stride, padding, output_padding, groups, dilation)
  local who = "conv_transpose1d"
  check_input(who, x)
  check_weight(who, w)
  stride, dilation = single(who, "stride", stride or 1), single(who, "dilation", dilation or 1)
  padding = single(who, "padding", padding or 0, true)
  output_padding = single(who, "output_padding", output_padding or 0, true)
  groups = util.check_int(who, "groups", groups or 1)
  local C, L, k = x:size(-2), x:size(-1), w:size(3)
  if C ~= w:size(1) or C % groups ~= 0 then
    E.raise(string.format("%s: input has %d channels (shape %s) but weight of shape %s with groups %d expects %d",
      who, C, util.shape_str(x), util.shape_str(w), groups, w:size(1)))
  end
  if output_padding >= stride then
    E.raise(string.format("%s: output_padding %d must be smaller than the stride %d", who, output_padding, stride))
  end
  local out = (L - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1
  if out < 1 then
    E.raise(string.format("%s: the output length would be %d (input %s, weight %s, stride %d, padding %d, dilation " ..
      "%d, output_padding %d): expected >= 1", who, out, util.shape_str(x), util.shape_str(w), stride, padding,
      dilation, output_padding))
  end
  return from4d(ddp.conv_transpose2d(to4d(x), w:unsqueeze(-2), b, { 1, stride }, { 0, padding },
    { 0, output_padding }, groups, { 1, dilation }), x)
end

-- the settings the 2-d pool ops lack, as nn/pooling.lua words them
local function pool_unsupported(who, dilation, return_indices, count_include_pad)
  if dilation ~= nil and dilation ~= 1 and not (type(dilation) == "table" and #dilation == 1 and dilation[1] == 1) then
    E.raise(who .. ": dilation=" .. util.value_str(dilation) .. " is not supported yet; leave it at 1")
  end
  util.unsupported(who, "return_indices", return_indices, false, "the op returns the values only")
  if count_include_pad ~= nil and type(count_include_pad) ~= "boolean" then
    E.raise(string.format("%s: count_include_pad must be a boolean, got %s", who, tostring(count_include_pad)))
  end
end

-- kernel, stride, padding (checked) of a 1-d pool
local function pool_geometry(who, k, stride, padding)
  k = single(who, "kernel_size", k)
  stride = single(who, "stride", stride == nil and k or stride)
  padding = single(who, "padding", padding or 0, true)
  if padding * 2 > k then
    E.raise(string.format("%s: padding %d must be at most half the kernel size %d", who, padding, k))
  end
  return k, stride, padding
end

local function check_ceil(who, ceil_mode)
  if ceil_mode ~= nil and type(ceil_mode) ~= "boolean" then
    E.raise(string.format("%s: ceil_mode must be a boolean, got %s", who, tostring(ceil_mode)))
  end
  return ceil_mode or false
end

local function pool1d(who, op, x, k, s, p, ceil_mode, count_include_pad)
  check_input(who, x)
  local L = x:size(-1)
  if L + 2 * p < k then
    E.raise(string.format("%s: kernel size %d does not fit the input length %d padded by %d (input shape %s)", who, k,
      L, p, util.shape_str(x)))
  end
  local y
  if op == "max" then
    y = ddp.max_pool2d(to4d(x), { 1, k }, { 1, s }, { 0, p }, 1, ceil_mode)
  else
    y = ddp.avg_pool2d(to4d(x), { 1, k }, { 1, s }, { 0, p }, ceil_mode, count_include_pad ~= false)
  end
  return from4d(y, x)
end

--- max_pool1d(x, k [, stride = k [, padding [, dilation = 1 [, ceil_mode [, return_indices = false]]]]])
function F.max_pool1d(x, k, stride, padding, dilation, ceil_mode, return_indices)
  pool_unsupported("max_pool1d", dilation, return_indices, nil)
  local kk, s, p = pool_geometry("max_pool1d", k, stride, padding)
  return pool1d("max_pool1d", "max", x, kk, s, p, check_ceil("max_pool1d", ceil_mode))
end

--- avg_pool1d(x, k [, stride = k [, padding [, ceil_mode [, count_include_pad = true]]]])
function F.avg_pool1d(x, k, stride, padding, ceil_mode, count_include_pad)
  pool_unsupported("avg_pool1d", nil, nil, count_include_pad)
  local kk, s, p = pool_geometry("avg_pool1d", k, stride, padding)
  return pool1d("avg_pool1d", "avg", x, kk, s, p, check_ceil("avg_pool1d", ceil_mode), count_include_pad)
end

-- ---- modules ----------------------------------------------------------------------------------------------------

local function check_module_input(self, x)
  if not ddp.is_tensor(x) or (x:dim() ~= 3 and x:dim() ~= 2) or x:size(-2) ~= self.in_channels then
    E.raise(string.format("%s: expected input of shape [N, %d, L] or [%d, L], got %s", tostring(self),
      self.in_channels, self.in_channels, ddp.is_tensor(x) and util.shape_str(x) or type(x)))
  end
end

local function tuple(v) return "(" .. v[1] .. ",)" end

-- PyTorch's _ConvNd.extra_repr
local function conv_repr(self)
  local s = string.format("%d, %d, kernel_size=%s, stride=%s", self.in_channels, self.out_channels,
    tuple(self.kernel_size), tuple(self.stride))
  if type(self.padding) == "string" then
    s = s .. ", padding=" .. self.padding
  elseif self.padding[1] ~= 0 then
    s = s .. ", padding=" .. tuple(self.padding)
  end
  if self.dilation[1] ~= 1 then s = s .. ", dilation=" .. tuple(self.dilation) end
  if self.output_padding and self.output_padding[1] ~= 0 then
    s = s .. ", output_padding=" .. tuple(self.output_padding)
  end
  if self.groups ~= 1 then s = s .. ", groups=" .. self.groups end
  if self.bias == nil then s = s .. ", bias=False" end
  if self.padding_mode and self.padding_mode ~= "zeros" then s = s .. ", padding_mode=" .. self.padding_mode end
  return s
end

local Conv1d = Module:extend("Conv1d")
M.modules.Conv1d = Conv1d
local CONV_SETTINGS = { "stride", "padding", "dilation", "groups", "bias", "padding_mode", "device", "dtype" }

function Conv1d:__init(in_channels, out_channels, kernel_size, ...)
  local who = "Conv1d"
  local o = util.args(who, CONV_SETTINGS, ...)
  self.in_channels = util.check_int(who, "in_channels", in_channels)
  self.out_channels = util.check_int(who, "out_channels", out_channels)
  self.kernel_size = { single(who, "kernel_size", kernel_size) }
  self.stride = { single(who, "stride", o.stride or 1) }
  self.dilation = { single(who, "dilation", o.dilation or 1) }
  -- "valid" / "same" stay strings, as PyTorch keeps them (checked here, resolved by F.conv1d)
  local p = padding_of(who, o.padding, self.kernel_size[1], self.stride[1], self.dilation[1])
  self.padding = (o.padding == "valid" or o.padding == "same") and o.padding or { p }
  self.groups = util.check_int(who, "groups", o.groups or 1)
  util.check_conv_groups(who, in_channels, out_channels, self.groups)
  self.padding_mode = util.check_padding_mode(who, o.padding_mode)
  self._mode_pads = { p, p + (o.padding == "same" and (self.dilation[1] * (self.kernel_size[1] - 1)) % 2 or 0) }
  util.check_conv_bias(who, o.bias)
  util.conv_parameters(self, { out_channels, in_channels // self.groups, self.kernel_size[1] }, out_channels, o.bias,
    util.tensor_opts(o))
end

function Conv1d:forward(x)
  check_module_input(self, x)
  if self.padding_mode ~= "zeros" and (self._mode_pads[1] > 0 or self._mode_pads[2] > 0) then
    -- PyTorch's order: pad in the mode ("same": the odd extra on the right), then convolve unpadded
    x = util.conv_mode_pad(x, self._mode_pads, self.padding_mode, x:dim() == 3)
    return F.conv1d(x, self.weight, self.bias, self.stride[1], 0, self.dilation[1], self.groups)
  end
  local p = type(self.padding) == "string" and self.padding or self.padding[1]
  return F.conv1d(x, self.weight, self.bias, self.stride[1], p, self.dilation[1], self.groups)
end

Conv1d.extra_repr = conv_repr

local ConvTranspose1d = Module:extend("ConvTranspose1d")
M.modules.ConvTranspose1d = ConvTranspose1d
local CT_SETTINGS = { "stride", "padding", "output_padding", "groups", "bias", "dilation", "padding_mode", "device",
  "dtype" }

function ConvTranspose1d:__init(in_channels, out_channels, kernel_size, ...)
  local who = "ConvTranspose1d"
  local o = util.args(who, CT_SETTINGS, ...)
  self.in_channels = util.check_int(who, "in_channels", in_channels)
  self.out_channels = util.check_int(who, "out_channels", out_channels)
  self.kernel_size = { single(who, "kernel_size", kernel_size) }
  self.stride = { single(who, "stride", o.stride or 1) }
  self.padding = { single(who, "padding", o.padding or 0, true) }
  self.output_padding = { single(who, "output_padding", o.output_padding or 0, true) }
  self.dilation = { single(who, "dilation", o.dilation or 1) }
  self.groups = util.check_int(who, "groups", o.groups or 1)
  util.check_conv_groups(who, in_channels, out_channels, self.groups)
  if self.output_padding[1] >= self.stride[1] then
    E.raise(string.format("%s: output_padding (%d,) must be smaller than the stride (%d,)", who,
      self.output_padding[1], self.stride[1]))
  end
  util.unsupported(who, "padding_mode", o.padding_mode, "zeros", "only zero padding is implemented")
  self.padding_mode = "zeros"
  util.check_conv_bias(who, o.bias)
  util.conv_parameters(self, { in_channels, out_channels // self.groups, self.kernel_size[1] }, out_channels, o.bias,
    util.tensor_opts(o))
end

function ConvTranspose1d:forward(x, output_size)
  check_module_input(self, x)
  return F.conv_transpose1d(x, self.weight, self.bias, self.stride[1], self.padding[1],
    util.transposed_output_padding(self, x, output_size, 1)[1], self.groups, self.dilation[1])
end

ConvTranspose1d.extra_repr = conv_repr

local MaxPool1d = Module:extend("MaxPool1d")
M.modules.MaxPool1d = MaxPool1d

function MaxPool1d:__init(kernel_size, ...)
  local who = "MaxPool1d"
  local o = util.args(who, { "stride", "padding", "dilation", "return_indices", "ceil_mode" }, ...)
  pool_unsupported(who, o.dilation, o.return_indices, nil)
  self.kernel_size, self.stride, self.padding = pool_geometry(who, kernel_size, o.stride, o.padding)
  self.dilation, self.return_indices = 1, false
  self.ceil_mode = check_ceil(who, o.ceil_mode)
end

function MaxPool1d:forward(x)
  check_input(tostring(self), x)
  return pool1d(tostring(self), "max", x, self.kernel_size, self.stride, self.padding, self.ceil_mode)
end

function MaxPool1d:extra_repr()
  return string.format("kernel_size=%d, stride=%d, padding=%d, dilation=%d, ceil_mode=%s", self.kernel_size,
    self.stride, self.padding, self.dilation, self.ceil_mode and "True" or "False")
end

local AvgPool1d = Module:extend("AvgPool1d")
M.modules.AvgPool1d = AvgPool1d

function AvgPool1d:__init(kernel_size, ...)
  local who = "AvgPool1d"
  local o = util.args(who, { "stride", "padding", "ceil_mode", "count_include_pad" }, ...)
  pool_unsupported(who, nil, nil, o.count_include_pad)
  self.kernel_size, self.stride, self.padding = pool_geometry(who, kernel_size, o.stride, o.padding)
  self.ceil_mode = check_ceil(who, o.ceil_mode)
  self.count_include_pad = o.count_include_pad ~= false
end

function AvgPool1d:forward(x)
  check_input(tostring(self), x)
  return pool1d(tostring(self), "avg", x, self.kernel_size, self.stride, self.padding, self.ceil_mode,
    self.count_include_pad)
end

-- PyTorch's AvgPool1d shows its sizes as 1-tuples, and not ceil_mode
function AvgPool1d:extra_repr()
  return string.format("kernel_size=(%d,), stride=(%d,), padding=(%d,)", self.kernel_size, self.stride, self.padding)
end

return M
