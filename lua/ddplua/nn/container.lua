-- nn.Sequential{m1, m2, ...} (or nn.Sequential(m1, m2, ...)): runs its
-- modules in order. seq[i] is the i-th module (1-based, negative from the
-- end), #seq their count; state-dict names are PyTorch's ("0.weight", ...).
-- A Linear directly followed by a ReLU runs as one fused call.
local Module = require "ddplua.nn.module"
local Linear = require "ddplua.nn.linear"
local ReLU = require("ddplua.nn.activation").ReLU

local Sequential = Module:extend("Sequential")

local rawget, getmetatable, math_type = rawget, getmetatable, math.type

local function position(self, i)
  local n = #rawget(self, "_module_names")
  if i < 0 then i = n + i + 1 end
  if i < 1 or i > n then
    error(string.format("Sequential: index %d out of range (it holds %d modules; positions are 1..%d)", i, n, n), 3)
  end
  return i
end

function Sequential.__index(self, k)
  if math_type(k) == "integer" then return rawget(self, rawget(self, "_module_names")[position(self, k)]) end
  return getmetatable(self)[k]
end

function Sequential.__newindex(self, k, v)
  if math_type(k) == "integer" then
    local names = rawget(self, "_module_names")
    if k == #names + 1 then return self:append(v) end
    if not Module.is_module(v) then
      error(string.format("Sequential: element %d must be a module, got %s", k, type(v)), 2)
    end
    return rawset(self, names[position(self, k)], v)
  end
  return Module.__newindex(self, k, v)
end

function Sequential.__len(self) return #rawget(self, "_module_names") end

function Sequential:__init(...)
  local mods, n = { ... }, select("#", ...)
  if n == 1 and type(mods[1]) == "table" and not Module.is_module(mods[1]) then
    mods = mods[1]
    n = 0
    for k in pairs(mods) do
      if math_type(k) ~= "integer" or k < 1 then
        error("Sequential: expected a list of modules, got a table with key " .. tostring(k), 3)
      end
      if k > n then n = k end
    end
  end
  for i = 1, n do
    local m = mods[i]
    if not Module.is_module(m) then
      error(string.format("Sequential: element %d is %s, expected a module", i,
        m == nil and "nil" or (require("ddplua").is_tensor(m) and "a tensor" or "a " .. type(m))), 3)
    end
    self:append(m)
  end
end

function Sequential:append(m)
  if not Module.is_module(m) then error("Sequential:append: expected a module, got " .. type(m), 2) end
  self:add_module(tostring(#rawget(self, "_module_names")), m)
  return self
end

function Sequential:forward(x)
  local names = rawget(self, "_module_names")
  local n, i = #names, 1
  while i <= n do
    local m = rawget(self, names[i])
    if getmetatable(m) == Linear and i < n and getmetatable(rawget(self, names[i + 1])) == ReLU then
      x = m:forward_relu(x)
      i = i + 2
    else
      x = m(x)
      i = i + 1
    end
  end
  return x
end

return Sequential
