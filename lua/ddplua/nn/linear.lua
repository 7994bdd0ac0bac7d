-- nn.Linear(in_features, out_features [, bias [, device [, dtype]]]) or
-- nn.Linear(in_features, out_features, {bias=true, device=, dtype=})
-- y = x W^T + b with W out x in (PyTorch's layout) and PyTorch's default
-- init: U(-1/sqrt(in), 1/sqrt(in)) for both, from ddplua's generator.
local ddp = require "ddplua"
local Module = require "ddplua.nn.module"
local util = require "ddplua.nn.util"
local init = require "ddplua.nn.initializers"
local E = require "ddplua.errors"

local Linear = Module:extend("Linear")

function Linear:__init(in_features, out_features, ...)
  local opts
  if select("#", ...) == 1 and type((...)) == "table" then
    opts = util.check_opts("Linear", ..., { "bias", "dtype", "device" })
  else
    opts = util.args("Linear", { "bias", "device", "dtype" }, ...) -- PyTorch's positional order
  end
  if opts.bias ~= nil and type(opts.bias) ~= "boolean" then
    E.raise("Linear: bias must be true or false, got " .. tostring(opts.bias))
  end
  self.in_features = util.check_int("Linear", "in_features", in_features)
  self.out_features = util.check_int("Linear", "out_features", out_features)
  local topts = util.tensor_opts(opts)
  local bound = 1 / math.sqrt(in_features)
  self:register_parameter("weight", util.parameter(function()
    return init.kaiming_uniform_(ddp.empty(out_features, in_features, topts), math.sqrt(5))
  end))
  if opts.bias == false then
    self:register_parameter("bias", nil)
  else
    self:register_parameter("bias", util.parameter(function()
      return init.uniform_(ddp.empty(out_features, topts), -bound, bound)
    end))
  end
end

function Linear:_check_input(x)
  if x:dim() < 1 or x:size(-1) ~= self.in_features then
    E.raise(string.format("%s: expected input with %d features in its last dimension, got shape %s", tostring(self),
      self.in_features, util.shape_str(x)))
  end
end

function Linear:forward(x)
  self:_check_input(x)
  return ddp.linear(x, self.weight, self.bias)
end

--- relu(forward(x)) in one call: bias and activation fused into the GEMM's
--- epilogue (Sequential uses it for Linear followed by ReLU).
function Linear:forward_relu(x)
  self:_check_input(x)
  return ddp.linear(x, self.weight, self.bias, "relu")
end

function Linear:extra_repr()
  return string.format("in_features=%d, out_features=%d, bias=%s", self.in_features, self.out_features,
    self.bias ~= nil and "True" or "False")
end

return Linear
