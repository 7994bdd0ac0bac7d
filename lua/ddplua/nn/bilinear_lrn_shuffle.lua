-- Three of PyTorch's layers that older and mobile vision models use, composed from the tensor ops (autograd runs
-- through the composition):
--
--   nn.Bilinear(in1_features, in2_features, out_features, bias = true), F.bilinear(x1, x2, weight, bias):
--     y[..., o] = sum_ij x1[..., i] weight[o, i, j] x2[..., j] + bias[o]; weight [out, in1, in2] and bias drawn from
--     U(-1/sqrt(in1), 1/sqrt(in1)), as PyTorch's; x1 and x2 of the same leading shape.
--   nn.LocalResponseNorm(size, alpha = 1e-4, beta = 0.75, k = 1), F.local_response_norm(x, size, alpha, beta, k):
--     x / (k + alpha / size * (sum of x^2 over the `size` channels around each one, zeros past the ends))^beta, over
--     dim 2 of an input of 3 or more dims (AlexNet's, GoogLeNet's); PyTorch's window: size // 2 channels before,
--     (size - 1) // 2 after.
--   nn.ChannelShuffle(groups), F.channel_shuffle(x, groups): the channels of [N, C, ...] read as [groups, C/groups]
--     and transposed (ShuffleNet's).
-- Every setting also by name in an options table after the positional ones.
local ddp = require "ddplua"
local Module = require "ddplua.nn.module"
local util = require "ddplua.nn.util"
local init = require "ddplua.nn.initializers"
local E = require "ddplua.errors"
local F_pad = require("ddplua.nn.padding").F.pad

local M = { modules = {}, F = {} }
local F = M.F
local shape_str = util.shape_str

local function check_tensor(who, what, x)
  if not ddp.is_tensor(x) then E.raise(string.format("%s: %s must be a tensor, got %s", who, what, type(x))) end
end

local function check_number(who, what, v)
  if type(v) ~= "number" or v ~= v then E.raise(string.format("%s: %s must be a number, got %s", who, what, tostring(v))) end
end

-- ---- Bilinear ------------------------------------------------------------------------------------------------

local function bilinear(who, x1, x2, w, b)
  check_tensor(who, "input1", x1)
  check_tensor(who, "input2", x2)
  check_tensor(who, "weight", w)
  if w:dim() ~= 3 then E.raise(string.format("%s: weight must be [out, in1, in2], got shape %s", who, shape_str(w))) end
  local out, in1, in2 = w:size(1), w:size(2), w:size(3)
  if x1:dim() < 1 or x2:dim() < 1 or x1:size(-1) ~= in1 or x2:size(-1) ~= in2 then
    E.raise(string.format("%s: inputs of %d and %d features in their last dims expected, got shapes %s and %s", who,
      in1, in2, shape_str(x1), shape_str(x2)))
  end
  local lead1, lead2 = x1:size(), x2:size()
  lead1[#lead1], lead2[#lead2] = nil, nil
  if #lead1 ~= #lead2 then
    E.raise(string.format("%s: input1 %s and input2 %s must have the same leading dims", who, shape_str(x1),
      shape_str(x2)))
  end
  for i = 1, #lead1 do
    if lead1[i] ~= lead2[i] then
      E.raise(string.format("%s: input1 %s and input2 %s must have the same leading dims", who, shape_str(x1),
        shape_str(x2)))
    end
  end
  if b ~= nil then
    check_tensor(who, "bias", b)
    if b:dim() ~= 1 or b:size(1) ~= out then
      E.raise(string.format("%s: bias must be [%d], got shape %s", who, out, shape_str(b)))
    end
  end
  -- x1 [n, in1] @ weight as [in1, out * in2], times x2 per output, summed over in2
  local a = x1:reshape(-1, in1)
  local n = a:size(1)
  local t = a:matmul(w:permute(2, 1, 3):reshape(in1, out * in2)):view(n, out, in2)
  local y = (t * x2:reshape(n, 1, in2)):sum(3)
  if b ~= nil then y = y + b end
  lead1[#lead1 + 1] = out
  return y:view(lead1)
end

--- F.bilinear(x1, x2, weight [, bias])
function F.bilinear(x1, x2, weight, bias) return bilinear("bilinear", x1, x2, weight, bias) end

local Bilinear = Module:extend("Bilinear")
function Bilinear:__init(in1, in2, out, ...)
  local o = util.args("Bilinear", { "bias", "device", "dtype" }, ...)
  self.in1_features = util.check_int("Bilinear", "in1_features", in1)
  self.in2_features = util.check_int("Bilinear", "in2_features", in2)
  self.out_features = util.check_int("Bilinear", "out_features", out)
  if (0.0 + out) * in1 * in2 > 2 ^ 59 then
    E.raise(string.format("Bilinear: a weight of [%d, %d, %d] is too large", out, in1, in2))
  end
  local topts = util.tensor_opts(o)
  local bound = 1 / math.sqrt(in1)
  self:register_parameter("weight", util.parameter(function()
    return init.uniform_(ddp.empty(out, in1, in2, topts), -bound, bound)
  end))
  if o.bias == false then
    self:register_parameter("bias", nil)
  else
    self:register_parameter("bias", util.parameter(function()
      return init.uniform_(ddp.empty(out, topts), -bound, bound)
    end))
  end
end
function Bilinear:forward(x1, x2) return bilinear(tostring(self), x1, x2, self.weight, self.bias) end
function Bilinear:extra_repr()
  return string.format("in1_features=%d, in2_features=%d, out_features=%d, bias=%s", self.in1_features,
    self.in2_features, self.out_features, self.bias ~= nil and "True" or "False")
end
M.modules.Bilinear = Bilinear

-- ---- LocalResponseNorm ---------------------------------------------------------------------------------------

local function lrn(who, x, size, alpha, beta, k)
  check_tensor(who, "input", x)
  util.check_int(who, "size", size)
  check_number(who, "alpha", alpha)
  check_number(who, "beta", beta)
  check_number(who, "k", k)
  if x:dim() < 3 then
    E.raise(string.format("%s: expected an input of 3 or more dims [N, C, ...], got shape %s", who, shape_str(x)))
  end
  if x:numel() == 0 then return x:clone() end
  local N, C = x:size(1), x:size(2)
  -- x^2 as [N, 1, C, rest]: the channel window as a (size x 1) average over zero-padded channels
  local sq = (x * x):reshape(N, 1, C, -1)
  sq = F_pad(sq, { 0, 0, size // 2, (size - 1) // 2 })
  local div = ddp.avg_pool2d(sq, { size, 1 }, 1)
  div = (div * alpha + k):pow(beta)
  return x / div:view(x:size())
end

--- F.local_response_norm(x, size [, alpha = 1e-4, beta = 0.75, k = 1])
function F.local_response_norm(x, size, ...)
  local o = util.args("local_response_norm", { "alpha", "beta", "k" }, ...)
  return lrn("local_response_norm", x, size, o.alpha or 1e-4, o.beta or 0.75, o.k or 1.0)
end

local LocalResponseNorm = Module:extend("LocalResponseNorm")
function LocalResponseNorm:__init(size, ...)
  local o = util.args("LocalResponseNorm", { "alpha", "beta", "k" }, ...)
  self.size = util.check_int("LocalResponseNorm", "size", size)
  self.alpha, self.beta, self.k = o.alpha or 1e-4, o.beta or 0.75, o.k or 1.0
  for _, what in ipairs({ "alpha", "beta", "k" }) do check_number("LocalResponseNorm", what, self[what]) end
end
function LocalResponseNorm:forward(x) return lrn(tostring(self), x, self.size, self.alpha, self.beta, self.k) end
function LocalResponseNorm:extra_repr()
  return string.format("%d, alpha=%s, beta=%s, k=%s", self.size, util.py_num(self.alpha), util.py_num(self.beta),
    util.py_num(self.k))
end
M.modules.LocalResponseNorm = LocalResponseNorm

-- ---- ChannelShuffle ------------------------------------------------------------------------------------------

local function channel_shuffle(who, x, groups)
  check_tensor(who, "input", x)
  util.check_int(who, "groups", groups)
  if x:dim() < 3 then
    E.raise(string.format("%s: expected an input of 3 or more dims [N, C, ...], got shape %s", who, shape_str(x)))
  end
  local s = x:size()
  if s[2] % groups ~= 0 then
    E.raise(string.format("%s: the number of channels %d must be divisible by groups %d", who, s[2], groups))
  end
  local split = { s[1], groups, s[2] // groups }
  for d = 3, #s do split[#split + 1] = s[d] end
  return x:reshape(split):transpose(2, 3):contiguous():view(s)
end

--- F.channel_shuffle(x, groups)
function F.channel_shuffle(x, groups) return channel_shuffle("channel_shuffle", x, groups) end

local ChannelShuffle = Module:extend("ChannelShuffle")
function ChannelShuffle:__init(groups)
  self.groups = util.check_int("ChannelShuffle", "groups", groups)
end
function ChannelShuffle:forward(x) return channel_shuffle(tostring(self), x, self.groups) end
function ChannelShuffle:extra_repr() return string.format("groups=%d", self.groups) end
M.modules.ChannelShuffle = ChannelShuffle

return M
