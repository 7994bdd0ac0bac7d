-- Samplers: any object with sampler:indices() (the epoch's 1-based dataset
-- positions, a Lua array) and #sampler. DistributedSampler follows the same
-- protocol.
local ddp = require "ddplua"
local E = require "ddplua.errors"

local M = {}

local function sampler_class(name)
  local cls = { __name = name }
  cls.__index = cls
  cls.__len = function(self) return self.n end
  return setmetatable(cls, { __call = function(c, ...) return c.new(...) end })
end

local function size_of(who, ds)
  if math.type(ds) == "integer" then
    if ds < 0 then E.raise(who .. ": the number of items must be >= 0, got " .. ds) end
    return ds
  end
  local ok, n = pcall(function() return #ds end)
  if (type(ds) ~= "table" and type(ds) ~= "userdata") or not ok or math.type(n) ~= "integer" then
    E.raise(who .. ": expected a dataset (anything with #) or a number of items, got " .. type(ds))
  end
  return n
end

--- 1, 2, ..., n every epoch.
M.SequentialSampler = sampler_class("SequentialSampler")
function M.SequentialSampler.new(ds)
  return setmetatable({ n = size_of("SequentialSampler", ds) }, M.SequentialSampler)
end
function M.SequentialSampler:indices()
  local out = {}
  for i = 1, self.n do out[i] = i end
  return out
end

--- A fresh permutation of 1..n each epoch, from ddplua's generator
--- (ddp.manual_seed makes the epochs reproducible).
M.RandomSampler = sampler_class("RandomSampler")
function M.RandomSampler.new(ds) return setmetatable({ n = size_of("RandomSampler", ds) }, M.RandomSampler) end
function M.RandomSampler:indices()
  if self.n == 0 then return {} end
  return ddp.randperm(self.n):totable()
end

return M
