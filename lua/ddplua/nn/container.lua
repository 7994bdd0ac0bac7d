-- Containers: nn.ModuleList, nn.Sequential (a ModuleList that runs its
-- modules in order) and nn.ModuleDict.
--
-- ModuleList(list) / Sequential{m1, m2, ...} (or Sequential(m1, m2, ...)):
-- l[i] is the i-th module (1-based, negative from the end), #l their count,
-- ipairs(l) walks them (l[#l + 1] is nil, so ipairs stops; any other
-- position out of range is an error). State-dict names are PyTorch's
-- 0-based positions ("0.weight", "blocks.3.attn.bias"), so PyTorch's
-- checkpoints load. l[i] = m replaces, l[#l + 1] = m appends; append,
-- extend and insert(i, m) (before position i, renumbering the rest).
-- A Linear or a BatchNorm1d/2d/SyncBatchNorm directly followed by a ReLU
-- in a Sequential runs as one fused call (forward_relu): the same values
-- and gradients in fewer passes over memory; a BatchNorm2d, ReLU and
-- MaxPool2d in a row likewise (forward_relu_max_pool2d).
--
-- ModuleDict(tbl): modules by name. md[key] (or md.key), md[key] = m,
-- md[key] = nil (removes), pairs(md), md:keys(), md:values(), md:items()
-- (an iterator), #md, md:contains(key), md:update(tbl), md:pop(key),
-- md:clear(). Order: PyTorch's ModuleDict keeps insertion order, which a
-- Lua table constructor does not have: ModuleDict{{"enc", m1}, {"dec", m2}}
-- (a list of {key, module} pairs) keeps the order given, ModuleDict{enc =
-- m1, dec = m2} sorts the keys; assignments append. A key that names a
-- method (keys, train, forward, ...) or an internal field is an error: in
-- Lua md.keys and md["keys"] are the same field.
local Module = require "ddplua.nn.module"
local Linear = require "ddplua.nn.linear"
local ReLU = require("ddplua.nn.activation").ReLU
local batchnorm = require "ddplua.nn.batchnorm"
local SyncBatchNorm = require "ddplua.nn.syncbatchnorm"
local MaxPool2d = require("ddplua.nn.pooling").MaxPool2d
local E = require "ddplua.errors"
local core = require "ddplua.core"

local M = {}

local rawget, rawset, getmetatable, math_type, type = rawget, rawset, getmetatable, math.type, type
local is_module = Module.is_module

local function what(v)
  if v == nil then return "nil" end
  if require("ddplua").is_tensor(v) then return "a tensor" end
  return "a " .. type(v)
end

-- ModuleList -----------------------------------------------------------------

local ModuleList = Module:extend("ModuleList")
M.ModuleList = ModuleList

local function count(self) return #rawget(self, "_module_names") end

-- 1-based (negative from the end) position -> 1..n; n + 1 with allow_end.
local function position(self, i, allow_end)
  local n = count(self)
  local p = i < 0 and n + i + 1 or i
  if p < 1 or p > n + (allow_end and 1 or 0) then
    E.raisef("%s: index %d out of range (it holds %d modules; positions are 1..%d, or -%d..-1)",
      self:_class_name(), i, n, n, n)
  end
  return p
end

function ModuleList.__index(self, k)
  if math_type(k) == "integer" then
    local names = rawget(self, "_module_names")
    if k == #names + 1 then return nil end -- ipairs' end
    return rawget(self, names[position(self, k)])
  end
  return getmetatable(self)[k]
end

function ModuleList.__newindex(self, k, v)
  if math_type(k) == "integer" then
    local names = rawget(self, "_module_names")
    if k == #names + 1 then return self:append(v) end
    if not is_module(v) then E.raisef("%s: element %d must be a module, got %s", self:_class_name(), k, what(v)) end
    return rawset(self, names[position(self, k)], v)
  end
  return Module.__newindex(self, k, v)
end

function ModuleList.__len(self) return count(self) end

-- The modules of a list argument: a plain list, a ModuleList/Sequential.
local function module_list(who, list)
  if list == nil then return {} end
  if is_module(list) then
    if getmetatable(list).__len == ModuleList.__len then
      local out = {}
      for i = 1, #list do out[i] = list[i] end
      return out
    end
    E.raisef("%s: expected a list of modules, got a single %s (wrap it in { })", who, list:_class_name())
  end
  if type(list) ~= "table" then E.raisef("%s: expected a list of modules, got %s", who, what(list)) end
  local n = 0
  for k in pairs(list) do
    if math_type(k) ~= "integer" or k < 1 then
      E.raisef("%s: expected a list of modules, got a table with key %s", who, tostring(k))
    end
    if k > n then n = k end
  end
  local out = {}
  for i = 1, n do
    local m = list[i]
    if not is_module(m) then E.raisef("%s: element %d is %s, expected a module", who, i, what(m)) end
    out[i] = m
  end
  return out
end

function ModuleList:__init(list)
  for _, m in ipairs(module_list(self:_class_name(), list)) do self:append(m) end
end

function ModuleList:append(m)
  if not is_module(m) then E.raisef("%s:append: expected a module, got %s", self:_class_name(), what(m)) end
  self:add_module(tostring(count(self)), m)
  return self
end

--- blocks:extend(list) appends the modules of a list (PyTorch's); on the
--- class itself, ModuleList:extend("Name") is Module:extend, a subclass.
function ModuleList:extend(list)
  if rawget(self, "_module_names") == nil then return Module.extend(self, list) end
  for _, m in ipairs(module_list(self:_class_name() .. ":extend", list)) do self:append(m) end
  return self
end

--- insert(i, m): m becomes position i (1-based; negative from the end, as
--- PyTorch's insert(-1, m) goes before the last); the rest move up and are
--- renamed, as their positions are their names.
function ModuleList:insert(i, m)
  local who = self:_class_name() .. ":insert"
  if math_type(i) ~= "integer" then E.raisef("%s: position must be an integer, got %s", who, tostring(i)) end
  if not is_module(m) then E.raisef("%s: expected a module, got %s", who, what(m)) end
  local n = count(self)
  local p = i < 0 and n + i + 1 or i
  if p < 1 or p > n + 1 then E.raisef("%s: position %d out of range (1..%d)", who, i, n + 1) end
  local mods = {}
  for k = 1, n do mods[k] = self[k] end
  table.insert(mods, p, m)
  local names, kinds = rawget(self, "_module_names"), rawget(self, "_kind")
  for k = #names, 1, -1 do
    kinds[names[k]] = nil
    rawset(self, names[k], nil)
    names[k] = nil
  end
  for _, mod in ipairs(mods) do self:append(mod) end
  return self
end

function ModuleList:forward()
  E.raisef("%s has no forward: iterate over it (for i, block in ipairs(blocks) do x = block(x) end)",
    self:_class_name())
end

-- Sequential ------------------------------------------------------------------

local Sequential = ModuleList:extend("Sequential")
M.Sequential = Sequential

function Sequential:__init(...)
  local n = select("#", ...)
  local first = ...
  if n == 1 and type(first) == "table" and not is_module(first) then
    ModuleList.__init(self, first)
    return
  end
  local list = {}
  for i = 1, n do list[i] = select(i, ...) end
  if n > 0 and list[n] == nil then E.raisef("Sequential: element %d is nil, expected a module", n) end
  ModuleList.__init(self, list)
end

-- Under no_grad the output of one module is garbage once the next has
-- run, but Lua's collector runs after an allocation (ddplua paces it by
-- tensor bytes, l_util.c), and by then a big output has aged past what a
-- young collection frees; so the dead output of module i-1 is still held
-- while module i+1 allocates: a batch-1000 evaluation of the Fashion-MNIST
-- CNN held conv, BatchNorm and ReLU outputs at once (HWM 205 -> 302 -> 398
-- MiB over those layers). A full collection before a module whose
-- predecessor's output was big (>= 16 MiB of float32: the collection's cost
-- is small beside the ops on it) frees it first, as PyTorch's refcounts do.
-- Between two of the library's own modules the output is freed outright,
-- in either mode (below); the collection serves the user's modules.
local BIG_OUTPUT = 1 << 22 -- elements
local is_tensor, grad_enabled = core.is_tensor, core.is_grad_enabled
local is_library = require("ddplua.nn.util").is_library

-- the classes whose forward_relu(x) is relu(forward(x)); exact classes
-- only (a subclass may have a forward of its own)
local FUSES_RELU = { [Linear] = true, [batchnorm.BatchNorm1d] = true, [batchnorm.BatchNorm2d] = true,
  [SyncBatchNorm] = true }
local function fuses_relu(m, nxt) return FUSES_RELU[getmetatable(m)] and getmetatable(nxt) == ReLU end
-- BatchNorm2d (or SyncBatchNorm), ReLU, MaxPool2d: one call
-- (forward_relu_max_pool2d), unless the instance has a forward_relu of its
-- own (it would not be called)
local FUSES_RELU_POOL = { [batchnorm.BatchNorm2d] = true, [SyncBatchNorm] = true }
local function fuses_relu_pool(m, nxt, pool)
  return FUSES_RELU_POOL[getmetatable(m)] and getmetatable(nxt) == ReLU and getmetatable(pool) == MaxPool2d and
    rawget(m, "forward_relu") == nil
end

function Sequential:forward(x)
  local names = rawget(self, "_module_names")
  local n, i = #names, 1
  local free_between, dead_big = not grad_enabled(), false
  local made_by_library = false -- x was made by a library module of this Sequential (not the caller's input)
  while i <= n do
    if dead_big then collectgarbage() end
    local m = rawget(self, names[i])
    -- x is the input of module i; once it has run, x is dead (it was
    -- module i-1's output, not the caller's input)
    dead_big = free_between and i > 1 and is_tensor(x) and x:numel() >= BIG_OUTPUT
    local y, last
    if i + 1 < n and fuses_relu_pool(m, rawget(self, names[i + 1]), rawget(self, names[i + 2])) then
      last = rawget(self, names[i + 2])
      y = m:forward_relu_max_pool2d(x, last)
      i = i + 3
    elseif i < n and fuses_relu(m, rawget(self, names[i + 1])) then
      y, last = m:forward_relu(x), rawget(self, names[i + 1])
      i = i + 2
    else
      y, last = m(x), m
      i = i + 1
    end
    local lib = is_library(m)
    if made_by_library and lib and is_tensor(x) and not rawequal(x, y) then
      -- nothing else refers to x: free it now, as PyTorch's reference count would. Its storage goes at once
      -- under no_grad, and with grad enabled as soon as backward has used what autograd saved of it, where
      -- the collector would hold it (a young collection no longer frees an output that aged through the
      -- step) until a full collection (the Fashion-MNIST CNN example's peak RSS 178 -> 160 MB)
      x:free()
      dead_big = false
    end
    x, made_by_library = y, (rawequal(last, m) and lib) or (not rawequal(last, m) and is_library(last))
  end
  return x
end

-- ModuleDict --------------------------------------------------------------------

local ModuleDict = Module:extend("ModuleDict")
M.ModuleDict = ModuleDict

-- A key can be neither a method of the class (md.keys would shadow it) nor
-- a field the module keeps for itself.
local function check_key(self, key)
  local who = self:_class_name()
  if type(key) ~= "string" then E.raisef("%s: keys must be strings, got %s", who, what(key)) end
  if key == "" or key:find(".", 1, true) then
    E.raisef("%s: key %q must be a non-empty name without '.'", who, key)
  end
  local kinds = rawget(self, "_kind")
  if kinds[key] == "module" then return end
  if getmetatable(self)[key] ~= nil or rawget(self, key) ~= nil or kinds[key] ~= nil then
    E.raisef("%s: key %q is the name of a %s method or field (md.%s and md[%q] are the same in Lua); choose " ..
      "another key", who, key, who, key, key)
  end
end

local function remove(self, key)
  local names, kinds = rawget(self, "_module_names"), rawget(self, "_kind")
  local m = rawget(self, key)
  for k, n in ipairs(names) do
    if n == key then
      table.remove(names, k)
      break
    end
  end
  kinds[key] = nil
  rawset(self, key, nil)
  return m
end

-- Called for new keys and for keys whose module was removed with md[k] =
-- nil (a field that holds a module is assigned directly: Lua has no hook
-- for that, so md[k] = nil leaves a hole every listing skips).
function ModuleDict.__newindex(self, k, v)
  if type(k) == "string" and rawget(self, "_kind") and (is_module(v) or rawget(self, "_kind")[k] == "module") then
    check_key(self, k)
    if rawget(self, "_kind")[k] == "module" then remove(self, k) end -- a hole: the key goes to the end again
    if v == nil then return end
    if not is_module(v) then E.raisef("%s: [%q] must be a module, got %s", self:_class_name(), k, what(v)) end
    return self:add_module(k, v)
  end
  if math_type(k) == "integer" then
    E.raisef("%s: keys are strings, got the integer %d (nn.ModuleList is indexed by position)", self:_class_name(), k)
  end
  return Module.__newindex(self, k, v)
end

function ModuleDict.__len(self)
  local n = 0
  for _ in self:items() do n = n + 1 end
  return n
end

--- pairs(md): (key, module) in order.
function ModuleDict.__pairs(self) return self:items() end

-- (key, module) pairs of a constructor or update() argument, in order.
local function entries(who, tbl)
  if tbl == nil then return {} end
  if is_module(tbl) then
    if getmetatable(tbl).__pairs == ModuleDict.__pairs then
      local out = {}
      for k, m in tbl:items() do out[#out + 1] = { k, m } end
      return out
    end
    E.raisef("%s: expected a table of modules, got a single %s", who, tbl:_class_name())
  end
  if type(tbl) ~= "table" then E.raisef("%s: expected a table of modules, got %s", who, what(tbl)) end
  local out = {}
  if tbl[1] ~= nil then -- a list of {key, module} pairs
    for k in pairs(tbl) do
      if math_type(k) ~= "integer" then
        E.raisef("%s: a list of {key, module} pairs cannot also have the key %s", who, tostring(k))
      end
    end
    for i = 1, #tbl do
      local e = tbl[i]
      if type(e) ~= "table" or is_module(e) or e[1] == nil or e[2] == nil or e[3] ~= nil then
        E.raisef("%s: entry %d must be a {key, module} pair, got %s", who, i, is_module(e) and "a module" or what(e))
      end
      out[i] = { e[1], e[2] }
    end
    return out
  end
  local keys = {}
  for k in pairs(tbl) do
    if type(k) ~= "string" then E.raisef("%s: keys must be strings, got %s", who, what(k)) end
    keys[#keys + 1] = k
  end
  table.sort(keys)
  for i, k in ipairs(keys) do out[i] = { k, tbl[k] } end
  return out
end

function ModuleDict:__init(tbl) self:update(tbl) end

--- update(tbl): adds or replaces, in tbl's order (see the top of the file).
function ModuleDict:update(tbl)
  local who = self:_class_name()
  for _, e in ipairs(entries(who, tbl)) do
    local k, m = e[1], e[2]
    check_key(self, k)
    if not is_module(m) then E.raisef("%s: [%q] must be a module, got %s", who, tostring(k), what(m)) end
    if rawget(self, k) == nil and rawget(self, "_kind")[k] == "module" then remove(self, k) end -- a hole
    self:add_module(k, m)
  end
  return self
end

-- (name, module) in insertion order, holes skipped: a dict's items are its children
ModuleDict.items = Module.named_children

function ModuleDict:keys()
  local out = {}
  for k in self:items() do out[#out + 1] = k end
  return out
end

function ModuleDict:values()
  local out = {}
  for _, m in self:items() do out[#out + 1] = m end
  return out
end

function ModuleDict:contains(key)
  return type(key) == "string" and rawget(self, "_kind")[key] == "module" and rawget(self, key) ~= nil
end

--- pop(key): removes the module and returns it (an error if absent).
function ModuleDict:pop(key)
  if not self:contains(key) then
    E.raisef("%s: no key %s (keys: %s)", self:_class_name(), tostring(key), table.concat(self:keys(), ", "))
  end
  return remove(self, key)
end

function ModuleDict:clear()
  local names = rawget(self, "_module_names")
  for k = #names, 1, -1 do remove(self, names[k]) end
  return self
end

function ModuleDict:forward()
  E.raisef("%s has no forward: call its modules (md[key](x))", self:_class_name())
end

return M
