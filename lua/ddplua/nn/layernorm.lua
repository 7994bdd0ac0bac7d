-- nn.LayerNorm(normalized_shape [, eps [, elementwise_affine [, bias [,
-- device [, dtype]]]]]) or nn.LayerNorm(normalized_shape, {eps=1e-5,
-- elementwise_affine=true, bias=true, device=, dtype=}): normalises over the
-- trailing dimensions given by normalized_shape (an integer or a list).
local ddp = require "ddplua"
local Module = require "ddplua.nn.module"
local util = require "ddplua.nn.util"
local E = require "ddplua.errors"

local LayerNorm = Module:extend("LayerNorm")

function LayerNorm:__init(normalized_shape, ...)
  local opts = util.args("LayerNorm", { "eps", "elementwise_affine", "bias", "device", "dtype" }, ...)
  local shape = type(normalized_shape) == "table" and normalized_shape or { normalized_shape }
  if #shape == 0 then E.raise("LayerNorm: normalized_shape must not be empty") end
  for i, d in ipairs(shape) do shape[i] = util.check_int("LayerNorm", "normalized_shape", d) end
  self.normalized_shape = shape
  self.eps = opts.eps or 1e-5
  if type(self.eps) ~= "number" or self.eps <= 0 then E.raise("LayerNorm: eps must be a positive number") end
  self.elementwise_affine = opts.elementwise_affine ~= false
  local topts = util.tensor_opts(opts)
  if self.elementwise_affine then
    self:register_parameter("weight", util.parameter(function() return ddp.ones(shape, topts) end))
    if opts.bias ~= false then
      self:register_parameter("bias", util.parameter(function() return ddp.zeros(shape, topts) end))
    else
      self:register_parameter("bias", nil)
    end
  else
    self:register_parameter("weight", nil)
    self:register_parameter("bias", nil)
  end
end

function LayerNorm:forward(x)
  local shape, nd = self.normalized_shape, x:dim()
  local ok = nd >= #shape
  for i = 1, #shape do ok = ok and x:size(nd - #shape + i) == shape[i] end
  if not ok then
    E.raise(string.format("%s: expected input whose last dimensions are [%s], got shape %s", tostring(self),
      table.concat(shape, ", "), util.shape_str(x)))
  end
  return ddp.layer_norm(x, shape, self.weight, self.bias, self.eps)
end

function LayerNorm:extra_repr()
  return string.format("(%s,), eps=%g, elementwise_affine=%s", table.concat(self.normalized_shape, ", "), self.eps,
    self.elementwise_affine and "True" or "False")
end

return LayerNorm
