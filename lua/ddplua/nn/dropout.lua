-- nn.Dropout(p = 0.5 [, inplace]) or nn.Dropout{p=, inplace=}: zeroes
-- elements with probability p while training and scales the rest by
-- 1 / (1 - p); the identity in eval mode. inplace is accepted for PyTorch's
-- sake; the result is the same, computed out of place.
local ddp = require "ddplua"
local Module = require "ddplua.nn.module"
local util = require "ddplua.nn.util"
local E = require "ddplua.errors"

local Dropout = Module:extend("Dropout")

function Dropout:__init(...)
  local opts = util.args("Dropout", { "p", "inplace" }, ...)
  local p = opts.p
  if p == nil then p = 0.5 end
  if type(p) ~= "number" or not (p >= 0 and p <= 1) then -- (NaN is in no range)
    E.raise("Dropout: probability p must be a number in [0, 1], got " .. tostring(p))
  end
  self.p = p
end

function Dropout:forward(x) return ddp.dropout(x, self.p, self.training) end

function Dropout:extra_repr() return string.format("p=%g", self.p) end

return Dropout
