-- The 3-d convolutions, composed from the 2-d ones over the depth dim (nn/volumetric.lua brings them into nn and
-- nn.F with the 3-d pools and norms):
--
--   nn.Conv3d(in_channels, out_channels, kernel_size [, stride [, padding [, dilation [, groups [, bias [,
--     padding_mode [, device [, dtype]]]]]]]])
--   nn.ConvTranspose3d(in_channels, out_channels, kernel_size [, stride [, padding [, output_padding [, groups [,
--     bias [, dilation [, padding_mode [, device [, dtype]]]]]]]]])        forward(x [, output_size])
--   (PyTorch's positional order, then optionally one options table of the rest by name)
--   F.conv3d(x, w [, b [, stride [, padding [, dilation [, groups]]]]])
--   F.conv_transpose3d(x, w [, b [, stride [, padding [, output_padding [, groups [, dilation]]]]]])
--
-- Input [N, C, D, H, W] or unbatched [C, D, H, W]; sizes are integers or {d, h, w}; Conv3d's padding may be
-- "valid" or "same" (stride 1; an odd dilation * (kernel - 1) pads the extra zero at the end, as PyTorch).
-- Weights as PyTorch's (Conv3d [out, in/groups, kd, kh, kw], ConvTranspose3d [in, out/groups, kd, kh, kw]) with
-- PyTorch's init, so state_dicts load.
--
-- How: where the backend has a direct 3-d convolution (the CPU's oneDNN, float32 without autocast:
-- core.conv3d_direct, src/ops/conv3d.c), that; elsewhere (CUDA, bfloat16 under autocast, float64, an empty batch)
-- composed from 2-d convolutions: a 3-d convolution is a sum over the kernel's depth taps of 2-d ones, so each
-- output depth's kd input frames (depth d * stride + kd * dilation of the depth-padded input) are gathered side by
-- side as kd * C channels, and one conv2d with the weight's taps laid out alike ([O, kd * C / groups, kh, kw]) sums
-- them all. The transposed convolution, likewise direct where it can be (core.conv_transpose3d_direct: the
-- convolution's input-gradient kernel), else conv_transpose2d per tap on all N * D_in frames, tap kd's frames
-- placed at depth d * stride + kd * dilation - padding (F.pad, which crops where its pads are negative). Autograd
-- runs through the composed ops, so their gradients, autocast and the CUDA backend are the 2-d ops' own.
-- bench/conv3d.lua measures both ways beside PyTorch 1.13's conv3d (oneDNN's direct 3-d convolution on its CPU).
local ddp = require "ddplua"
local Module = require "ddplua.nn.module"
local util = require "ddplua.nn.util"
local E = require "ddplua.errors"
local core = require "ddplua.core"

-- direct: try the backend's own 3-d convolution first (tests set it false to check the composition everywhere)
local M = { modules = {}, F = {}, direct = true }
local F = M.F

--- An integer or three integers {d, h, w} -> a list of 3.
local function triple(who, what, v, allow_zero)
  if type(v) == "table" and getmetatable(v) == nil then
    if #v ~= 3 then
      E.raise(string.format("%s: %s must be an integer or three integers {d, h, w}, got %d values", who, what, #v))
    end
    return { util.check_int(who, what, v[1], allow_zero), util.check_int(who, what, v[2], allow_zero),
      util.check_int(who, what, v[3], allow_zero) }
  end
  util.check_int(who, what, v, allow_zero)
  return { v, v, v }
end
M.triple = triple

local function check_input(who, x)
  if not ddp.is_tensor(x) or (x:dim() ~= 4 and x:dim() ~= 5) then
    E.raise(string.format("%s: expected an input of shape [N, C, D, H, W] or [C, D, H, W], got %s", who,
      ddp.is_tensor(x) and util.shape_str(x) or type(x)))
  end
end

local function check_weight(who, w, x)
  if not ddp.is_tensor(w) or w:dim() ~= 5 then
    E.raise(string.format("%s: expected a 5-dimensional weight, got %s", who,
      ddp.is_tensor(w) and util.shape_str(w) or type(w)))
  end
  if w:dtype() ~= x:dtype() then
    E.raise(string.format("%s: the input is %s but the weight is %s", who, x:dtype(), w:dtype()))
  end
end

-- padding "valid" / "same" / n / {d, h, w} -> the padding at the start of each dim and the extra zeros at the end
-- of each ("same" with an odd total)
local function padding_of(who, padding, k, stride, dilation)
  if padding == "valid" then return { 0, 0, 0 }, { 0, 0, 0 } end
  if padding == "same" then
    if stride[1] ~= 1 or stride[2] ~= 1 or stride[3] ~= 1 then
      E.raise(string.format("%s: padding=\"same\" needs stride 1 (PyTorch has no strided \"same\"), got stride %s",
        who, util.py_tuple(stride)))
    end
    local p, extra = {}, {}
    for i = 1, 3 do
      local total = dilation[i] * (k[i] - 1)
      p[i], extra[i] = total // 2, total % 2
    end
    return p, extra
  end
  if type(padding) == "string" then
    E.raise(string.format("%s: padding must be an integer, {d, h, w}, \"valid\" or \"same\", got \"%s\"", who,
      padding))
  end
  return triple(who, "padding", padding or 0, true), { 0, 0, 0 }
end

-- an unbatched [C, D, H, W] gets a batch dim; back with unbatch
local function batch5(x) return x:dim() == 4 and x:unsqueeze(1) or x end
local function unbatch(y, x) return x:dim() == 4 and y:squeeze(1) or y end

--- conv3d(x, w [, b [, stride [, padding [, dilation [, groups]]]]]): PyTorch's F.conv3d
function F.conv3d(x, w, b, stride, padding, dilation, groups)
  local who = "conv3d"
  check_input(who, x)
  check_weight(who, w, x)
  stride, dilation = triple(who, "stride", stride or 1), triple(who, "dilation", dilation or 1)
  groups = util.check_int(who, "groups", groups or 1)
  local k = { w:size(3), w:size(4), w:size(5) }
  local p, extra = padding_of(who, padding, k, stride, dilation)
  local xb = batch5(x)
  local N, C, O = xb:size(1), xb:size(2), w:size(1)
  if C ~= w:size(2) * groups or O % groups ~= 0 then
    E.raise(string.format("%s: input has %d channels (shape %s) but weight of shape %s with groups %d expects %d " ..
      "input channels (and out channels divisible by groups)", who, C, util.shape_str(x), util.shape_str(w), groups,
      w:size(2) * groups))
  end
  if b ~= nil and (not ddp.is_tensor(b) or b:dim() ~= 1 or b:size(1) ~= O) then
    E.raise(string.format("%s: expected a bias of shape [%d], got %s", who, O,
      ddp.is_tensor(b) and util.shape_str(b) or type(b)))
  end
  local names = { "depth", "height", "width" }
  for i = 1, 3 do
    local size = xb:size(i + 2)
    if size + 2 * p[i] + extra[i] - dilation[i] * (k[i] - 1) - 1 < 0 then
      E.raise(string.format("%s: kernel size %d (dilation %d) does not fit the input %s %d padded by %d (input " ..
        "shape %s)", who, k[i], dilation[i], names[i], size, p[i], util.shape_str(x)))
    end
  end
  -- the backend's direct 3-d convolution where it has one (oneDNN on the CPU, float32), the odd "same" zeros
  -- padded first
  if M.direct then
    local xd = xb
    if extra[1] + extra[2] + extra[3] > 0 then xd = ddp.nn.F.pad(xb, { 0, extra[3], 0, extra[2], 0, extra[1] }) end
    local y = core.conv3d_direct(xd, w, b, stride, p, dilation, groups)
    if y then return unbatch(y, x) end
  end
  -- else composed: the odd "same" zeros at the end of height and width (the 2-d op pads them by p[2], p[3] on
  -- each side)
  if extra[2] + extra[3] > 0 then xb = ddp.nn.F.pad(xb, { 0, extra[3], 0, extra[2] }) end
  -- the frames [N, D, C, H, W] with the depth padding's zero frames, in one pass (cat writes the transposed copy)
  local frames = xb:transpose(2, 3)
  if p[1] + extra[1] > 0 then
    local zshape = { N, p[1], C, xb:size(4), xb:size(5) }
    local parts = { frames }
    if p[1] > 0 then table.insert(parts, 1, ddp.zeros(zshape, { dtype = x:dtype(), device = x:device() })) end
    zshape[2] = p[1] + extra[1]
    parts[#parts + 1] = ddp.zeros(zshape, { dtype = x:dtype(), device = x:device() })
    frames = ddp.cat(parts, 2)
  else
    frames = frames:contiguous()
  end
  local D, H, W = frames:size(2), frames:size(4), frames:size(5)
  local kD, Dout = k[1], (D - dilation[1] * (k[1] - 1) - 1) // stride[1] + 1
  -- every output depth's kD input frames side by side as channels: frame (d, kd) is input depth d * stride +
  -- kd * dilation, so [N, Dout * kD, C, H, W] reads as Dout * N images of kD * C channels
  local pos = ddp.arange(0, Dout):mul(stride[1]):view(Dout, 1) + ddp.arange(0, kD):mul(dilation[1]):view(1, kD)
  pos = pos:reshape(-1):add(1)
  if x:device() ~= "cpu" then pos = pos:to(x:device()) end
  local taps = frames:index_select(2, pos)
  local wt = w:transpose(2, 3) -- [O, kD, C / groups, kh, kw]: each output channel's kD taps of its group
  if groups > 1 then -- a group's channels stay together: [.., groups, kD, C / groups, ..]
    taps = taps:view(N * Dout, kD, groups, C // groups, H, W):transpose(2, 3)
  end
  taps = taps:reshape(N * Dout, kD * C, H, W)
  local out = ddp.conv2d(taps, wt:reshape(O, kD * (C // groups), k[2], k[3]), b, { stride[2], stride[3] },
    { p[2], p[3] }, { dilation[2], dilation[3] }, groups)
  local Ho, Wo = out:size(3), out:size(4)
  return unbatch(out:view(N, Dout, O, Ho, Wo):transpose(2, 3):contiguous(), x)
end

--- conv_transpose3d(x, w [, b [, stride [, padding [, output_padding [, groups [, dilation]]]]]]): PyTorch's order
--- (groups before dilation)
function F.conv_transpose3d(x, w, b, stride, padding, output_padding, groups, dilation)
  local who = "conv_transpose3d"
  check_input(who, x)
  check_weight(who, w, x)
  stride, dilation = triple(who, "stride", stride or 1), triple(who, "dilation", dilation or 1)
  padding = triple(who, "padding", padding or 0, true)
  output_padding = triple(who, "output_padding", output_padding or 0, true)
  groups = util.check_int(who, "groups", groups or 1)
  local xb = batch5(x)
  local N, C, Din, H, W = xb:size(1), xb:size(2), xb:size(3), xb:size(4), xb:size(5)
  local k = { w:size(3), w:size(4), w:size(5) }
  local O = w:size(2) * groups
  if C ~= w:size(1) or C % groups ~= 0 then
    E.raise(string.format("%s: input has %d channels (shape %s) but weight of shape %s with groups %d expects %d",
      who, C, util.shape_str(x), util.shape_str(w), groups, w:size(1)))
  end
  if b ~= nil and (not ddp.is_tensor(b) or b:dim() ~= 1 or b:size(1) ~= O) then
    E.raise(string.format("%s: expected a bias of shape [%d], got %s", who, O,
      ddp.is_tensor(b) and util.shape_str(b) or type(b)))
  end
  local sizes = {}
  for i = 1, 3 do
    if output_padding[i] >= stride[i] and output_padding[i] >= dilation[i] then
      E.raise(string.format("%s: output_padding %s must be smaller than the stride %s or the dilation %s", who,
        util.py_tuple(output_padding), util.py_tuple(stride), util.py_tuple(dilation)))
    end
    sizes[i] = (xb:size(i + 2) - 1) * stride[i] - 2 * padding[i] + dilation[i] * (k[i] - 1) + output_padding[i] + 1
    if sizes[i] < 1 then
      E.raise(string.format("%s: the output size would be %d in dim %d (input %s, weight %s, stride %s, padding %s, " ..
        "dilation %s, output_padding %s): expected >= 1", who, sizes[i], i + 2, util.shape_str(x), util.shape_str(w),
        util.py_tuple(stride), util.py_tuple(padding), util.py_tuple(dilation), util.py_tuple(output_padding)))
    end
  end
  util.check_output_alloc(who, x, { N, O, sizes[1], sizes[2], sizes[3] })
  if M.direct then -- the backend's direct kernel where it has one (its convolutions' input gradient)
    local y = core.conv_transpose3d_direct(xb, w, b, stride, padding, output_padding, dilation, groups)
    if y then return unbatch(y, x) end
  end
  local Dout, sd = sizes[1], stride[1]
  local frames = xb:transpose(2, 3):reshape(N * Din, C, H, W)
  local out
  for kd = 1, k[1] do
    local y = ddp.conv_transpose2d(frames, w:select(3, kd), nil, { stride[2], stride[3] }, { padding[2], padding[3] },
      { output_padding[2], output_padding[3] }, groups, { dilation[2], dilation[3] })
    local Ho, Wo = y:size(3), y:size(4)
    y = y:view(N, Din, O, Ho, Wo)
    if sd > 1 then -- input frame d lands at depth d * stride: stride - 1 zero frames after each
      y = ddp.nn.F.pad(y:unsqueeze(3), { 0, 0, 0, 0, 0, 0, 0, sd - 1 }):view(N, Din * sd, O, Ho, Wo)
    end
    -- tap kd's frames start at depth (kd - 1) * dilation - padding of the output; pads below zero crop
    local lead = (kd - 1) * dilation[1] - padding[1]
    y = ddp.nn.F.pad(y, { 0, 0, 0, 0, 0, 0, lead, Dout - lead - Din * sd })
    out = out and out:add(y) or y
  end
  if b ~= nil then out = out + b:view(1, 1, O, 1, 1) end
  return unbatch(out:transpose(2, 3):contiguous(), x)
end

-- ---- modules ----------------------------------------------------------------------------------------------------

local function check_module_input(self, x)
  if not ddp.is_tensor(x) or (x:dim() ~= 5 and x:dim() ~= 4) or x:size(-4) ~= self.in_channels then
    E.raise(string.format("%s: expected input of shape [N, %d, D, H, W] or [%d, D, H, W], got %s", tostring(self),
      self.in_channels, self.in_channels, ddp.is_tensor(x) and util.shape_str(x) or type(x)))
  end
end

local function nonzero(v) return v[1] ~= 0 or v[2] ~= 0 or v[3] ~= 0 end
local function not_one(v) return v[1] ~= 1 or v[2] ~= 1 or v[3] ~= 1 end

-- PyTorch's _ConvNd.extra_repr
local function conv_repr(self)
  local t = util.py_tuple
  local s = string.format("%d, %d, kernel_size=%s, stride=%s", self.in_channels, self.out_channels,
    t(self.kernel_size), t(self.stride))
  if type(self.padding) == "string" then
    s = s .. ", padding=" .. self.padding
  elseif nonzero(self.padding) then
    s = s .. ", padding=" .. t(self.padding)
  end
  if not_one(self.dilation) then s = s .. ", dilation=" .. t(self.dilation) end
  if self.output_padding and nonzero(self.output_padding) then
    s = s .. ", output_padding=" .. t(self.output_padding)
  end
  if self.groups ~= 1 then s = s .. ", groups=" .. self.groups end
  if self.bias == nil then s = s .. ", bias=False" end
  if self.padding_mode and self.padding_mode ~= "zeros" then s = s .. ", padding_mode=" .. self.padding_mode end
  return s
end

local Conv3d = Module:extend("Conv3d")
M.modules.Conv3d = Conv3d
local CONV_SETTINGS = { "stride", "padding", "dilation", "groups", "bias", "padding_mode", "device", "dtype" }

function Conv3d:__init(in_channels, out_channels, kernel_size, ...)
  local who = "Conv3d"
  local o = util.args(who, CONV_SETTINGS, ...)
  self.in_channels = util.check_int(who, "in_channels", in_channels)
  self.out_channels = util.check_int(who, "out_channels", out_channels)
  self.kernel_size = triple(who, "kernel_size", kernel_size)
  self.stride = triple(who, "stride", o.stride or 1)
  self.dilation = triple(who, "dilation", o.dilation or 1)
  -- "valid" / "same" stay strings, as PyTorch keeps them (checked here, resolved by F.conv3d)
  local p, extra = padding_of(who, o.padding, self.kernel_size, self.stride, self.dilation)
  self.padding = (o.padding == "valid" or o.padding == "same") and o.padding or p
  self.groups = util.check_int(who, "groups", o.groups or 1)
  util.check_conv_groups(who, in_channels, out_channels, self.groups)
  self.padding_mode = util.check_padding_mode(who, o.padding_mode)
  -- F.pad's order (last dim first) for the padding modes; "same" puts its odd extra at the end
  self._mode_pads = { p[3], p[3] + extra[3], p[2], p[2] + extra[2], p[1], p[1] + extra[1] }
  util.check_conv_bias(who, o.bias)
  local k = self.kernel_size
  util.conv_parameters(self, { out_channels, in_channels // self.groups, k[1], k[2], k[3] }, out_channels, o.bias,
    util.tensor_opts(o))
end

function Conv3d:forward(x)
  check_module_input(self, x)
  if self.padding_mode ~= "zeros" and nonzero({ self._mode_pads[2], self._mode_pads[4], self._mode_pads[6] }) then
    -- PyTorch's order: pad in the mode, then convolve unpadded
    x = util.conv_mode_pad(x, self._mode_pads, self.padding_mode, x:dim() == 5)
    return F.conv3d(x, self.weight, self.bias, self.stride, 0, self.dilation, self.groups)
  end
  return F.conv3d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)
end

Conv3d.extra_repr = conv_repr

local ConvTranspose3d = Module:extend("ConvTranspose3d")
M.modules.ConvTranspose3d = ConvTranspose3d
local CT_SETTINGS = { "stride", "padding", "output_padding", "groups", "bias", "dilation", "padding_mode", "device",
  "dtype" }

function ConvTranspose3d:__init(in_channels, out_channels, kernel_size, ...)
  local who = "ConvTranspose3d"
  local o = util.args(who, CT_SETTINGS, ...)
  self.in_channels = util.check_int(who, "in_channels", in_channels)
  self.out_channels = util.check_int(who, "out_channels", out_channels)
  self.kernel_size = triple(who, "kernel_size", kernel_size)
  self.stride = triple(who, "stride", o.stride or 1)
  self.padding = triple(who, "padding", o.padding or 0, true)
  self.output_padding = triple(who, "output_padding", o.output_padding or 0, true)
  self.dilation = triple(who, "dilation", o.dilation or 1)
  self.groups = util.check_int(who, "groups", o.groups or 1)
  util.check_conv_groups(who, in_channels, out_channels, self.groups)
  for i = 1, 3 do
    if self.output_padding[i] >= self.stride[i] and self.output_padding[i] >= self.dilation[i] then
      E.raise(string.format("%s: output_padding %s must be smaller than the stride %s or the dilation %s", who,
        util.py_tuple(self.output_padding), util.py_tuple(self.stride), util.py_tuple(self.dilation)))
    end
  end
  util.unsupported(who, "padding_mode", o.padding_mode, "zeros", "only zero padding is implemented (as PyTorch)")
  self.padding_mode = "zeros"
  util.check_conv_bias(who, o.bias)
  local k = self.kernel_size
  util.conv_parameters(self, { in_channels, out_channels // self.groups, k[1], k[2], k[3] }, out_channels, o.bias,
    util.tensor_opts(o))
end

function ConvTranspose3d:forward(x, output_size)
  check_module_input(self, x)
  return F.conv_transpose3d(x, self.weight, self.bias, self.stride, self.padding,
    util.transposed_output_padding(self, x, output_size, 3), self.groups, self.dilation)
end

ConvTranspose3d.extra_repr = conv_repr

return M
