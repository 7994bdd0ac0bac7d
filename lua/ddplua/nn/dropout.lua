-- nn.Dropout(p = 0.5): zeroes elements with probability p while training
-- and scales the rest by 1 / (1 - p); the identity in eval mode.
local ddp = require "ddplua"
local Module = require "ddplua.nn.module"

local Dropout = Module:extend("Dropout")

function Dropout:__init(p)
  if p == nil then p = 0.5 end
  if type(p) ~= "number" or p < 0 or p > 1 then
    error("Dropout: probability p must be a number in [0, 1], got " .. tostring(p), 3)
  end
  self.p = p
end

function Dropout:forward(x) return ddp.dropout(x, self.p, self.training) end

function Dropout:extra_repr() return string.format("p=%g", self.p) end

return Dropout
