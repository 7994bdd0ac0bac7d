-- nn.Flatten(start_dim = 2, end_dim = -1): dims are 1-based, so the default
-- keeps the batch dimension (PyTorch's start_dim=1).
local Module = require "ddplua.nn.module"
local E = require "ddplua.errors"

local Flatten = Module:extend("Flatten")

function Flatten:__init(start_dim, end_dim)
  self.start_dim, self.end_dim = start_dim or 2, end_dim or -1
  for _, d in ipairs({ self.start_dim, self.end_dim }) do
    if math.type(d) ~= "integer" or d == 0 then
      E.raise("Flatten: dimensions must be non-zero integers (1-based, negative from the end), got " .. tostring(d))
    end
  end
end

function Flatten:forward(x) return x:flatten(self.start_dim, self.end_dim) end

function Flatten:extra_repr() return string.format("start_dim=%d, end_dim=%d", self.start_dim, self.end_dim) end

return Flatten
