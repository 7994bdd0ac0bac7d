-- nn.Module: the base of every layer and model.
--
-- A module holds parameters, buffers and submodules by name, in registration
-- order (PyTorch's dotted state-dict names follow from it: "fc1.weight",
-- "0.bias", "bn.running_mean"). Their values are plain fields of the module
-- (m.weight, m.fc1), so forward code reads them directly; the registry only
-- keeps the names and their order. Assigning a module to a field registers it
-- as a submodule; assigning a leaf tensor that requires grad registers it as
-- a parameter (nn.Parameter's role); buffers use register_buffer.
--
-- Classes: `local Net = nn.Module:extend("Net")`, then `function
-- Net:__init(...)` and `function Net:forward(x)`; `Net(...)` builds one and
-- `net(x)` calls forward. Parameter lists are Lua arrays; the named_*
-- methods are iterators: `for name, p in m:named_parameters() do ... end`.
local ddp = require "ddplua"
local E = require "ddplua.errors"
local core = ddp.core

local Module = {}
Module.__name = "Module"
Module.__is_module = true
Module.__index = Module

local rawget, rawset, type, getmetatable = rawget, rawset, type, getmetatable

local function is_module(v)
  local mt = getmetatable(v)
  return type(mt) == "table" and mt.__is_module == true
end
Module.is_module = is_module

-- An ordered table of name -> tensor (PyTorch's OrderedDict): pairs() walks
-- it in insertion order; indexing, assigning and deleting (sd[k] = nil) are
-- plain table operations, and a new key goes to the end.
local ordered_mt = {}
ordered_mt.__pairs = function(self)
  local order, i = getmetatable(self).__order, 0
  return function()
    while true do
      i = i + 1
      local k = order[i]
      if k == nil then return nil end
      local v = rawget(self, k)
      if v ~= nil then return k, v end
    end
  end, self, nil
end
ordered_mt.__newindex = function(self, k, v)
  if v == nil then return end
  local order = getmetatable(self).__order
  local known = false
  for _, o in ipairs(order) do known = known or o == k end
  if not known then order[#order + 1] = k end
  rawset(self, k, v)
end

local function ordered_dict()
  local mt = { __order = {} }
  for k, v in pairs(ordered_mt) do mt[k] = v end
  return setmetatable({}, mt)
end

local function ordered_set(sd, k, v)
  local order = getmetatable(sd).__order
  if rawget(sd, k) == nil then order[#order + 1] = k end
  rawset(sd, k, v)
end
Module._ordered_dict, Module._ordered_set = ordered_dict, ordered_set

-- Class machinery -----------------------------------------------------------

local function construct(cls, ...)
  local self = setmetatable({}, cls)
  rawset(self, "_param_names", {})
  rawset(self, "_buffer_names", {})
  rawset(self, "_module_names", {})
  rawset(self, "_kind", {}) -- name -> "param" | "buffer" | "module"
  rawset(self, "training", true)
  local init = cls.__init
  if init then init(self, ...) end
  return self
end

--- Module:extend(name) returns a subclass; metamethods are inherited.
function Module:extend(name)
  assert(type(name) == "string", "extend: expected a class name")
  local cls = {}
  for k, v in pairs(self) do
    if type(k) == "string" and k:sub(1, 2) == "__" and k ~= "__init" then cls[k] = v end
  end
  cls.__index = rawget(self, "__index") == self and cls or self.__index
  cls.__name = name
  cls.super = self
  return setmetatable(cls, { __index = self, __call = construct, __name = name .. " class" })
end

setmetatable(Module, { __call = construct, __name = "Module class" })

function Module.__call(self, ...) return self:forward(...) end

function Module.__newindex(self, k, v)
  if type(k) == "string" and rawget(self, "_kind") and not rawget(self, "_kind")[k] then
    if is_module(v) then return self:add_module(k, v) end
    if ddp.is_tensor(v) and v.requires_grad and v.is_leaf then return self:register_parameter(k, v) end
  end
  rawset(self, k, v)
end

function Module:forward()
  E.raise(string.format("%s: forward is not defined (define %s:forward(...))", self:_class_name(),
    self:_class_name()))
end

function Module:_class_name() return getmetatable(self).__name end

-- Registration --------------------------------------------------------------

local function register(self, kind, list, name, value)
  if type(name) ~= "string" or name == "" or name:find(".", 1, true) then
    E.raise(string.format("%s: %s name must be a non-empty string without '.', got %s", self:_class_name(), kind,
      tostring(name)))
  end
  local kinds = rawget(self, "_kind")
  if kinds[name] and kinds[name] ~= kind then
    E.raise(string.format("%s: '%s' is already registered as a %s", self:_class_name(), name, kinds[name]))
  end
  if not kinds[name] then
    kinds[name] = kind
    list[#list + 1] = name
  end
  rawset(self, name, value)
end

function Module:register_parameter(name, t)
  if t ~= nil and not ddp.is_tensor(t) then
    E.raise(string.format("%s: parameter '%s' must be a tensor or nil, got %s", self:_class_name(), tostring(name),
      type(t)))
  end
  if t ~= nil and not t.is_leaf then
    E.raise(string.format("%s: parameter '%s' must be a leaf tensor (use :detach():requires_grad_())",
      self:_class_name(), name))
  end
  register(self, "parameter", rawget(self, "_param_names"), name, t)
end

--- register_buffer(name, t [, persistent = true]): a tensor the module owns that is not a parameter (moved by :to(),
--- broadcast by DDP); a non-persistent one (false, or {persistent = false}, PyTorch's persistent=False) stays out
--- of state_dict, as a causal mask built in __init would.
function Module:register_buffer(name, t, persistent)
  if t ~= nil and not ddp.is_tensor(t) then
    E.raise(string.format("%s: buffer '%s' must be a tensor or nil, got %s", self:_class_name(), tostring(name),
      type(t)))
  end
  if type(persistent) == "table" then persistent = persistent.persistent end
  if persistent ~= nil and type(persistent) ~= "boolean" then
    E.raise(string.format("%s: register_buffer '%s': persistent must be a boolean, got %s", self:_class_name(),
      tostring(name), type(persistent)))
  end
  register(self, "buffer", rawget(self, "_buffer_names"), name, t)
  local np = rawget(self, "_nonpersistent")
  if persistent == false then
    if not np then
      np = {}
      rawset(self, "_nonpersistent", np)
    end
    np[name] = true
  elseif np then
    np[name] = nil
  end
end

function Module:add_module(name, m)
  if m ~= nil and not is_module(m) then
    E.raise(string.format("%s: submodule '%s' must be a module, got %s", self:_class_name(), tostring(name),
      ddp.is_tensor(m) and "a tensor" or type(m)))
  end
  register(self, "module", rawget(self, "_module_names"), name, m)
end
Module.register_module = Module.add_module

-- Traversal -------------------------------------------------------------------

--- Iterator over (name, submodule) of the direct children.
function Module:named_children()
  local names, i = rawget(self, "_module_names"), 0
  return function()
    while true do
      i = i + 1
      local n = names[i]
      if n == nil then return nil end
      local m = rawget(self, n)
      if m ~= nil then return n, m end
    end
  end
end

function Module:children()
  local out = {}
  for _, m in self:named_children() do out[#out + 1] = m end
  return out
end

-- Collects (prefixed name, module) depth first, each module once.
local function collect_modules(m, prefix, out, seen)
  if seen[m] then return end
  seen[m] = true
  out[#out + 1] = { prefix, m }
  for n, c in m:named_children() do collect_modules(c, prefix == "" and n or prefix .. "." .. n, out, seen) end
end

local function list_iter(list)
  local i = 0
  return function()
    i = i + 1
    local e = list[i]
    if e then return e[1], e[2] end
  end
end

function Module:named_modules()
  local out = {}
  collect_modules(self, "", out, {})
  return list_iter(out)
end

function Module:modules()
  local out = {}
  for _, m in self:named_modules() do out[#out + 1] = m end
  return out
end

-- (name, tensor) pairs of one registry over the whole tree; a tensor shared
-- by two modules appears once (PyTorch's memo).
local function collect_tensors(self, names_field, recurse)
  local out, seen = {}, {}
  local mods = {}
  if recurse == false then mods[1] = { "", self } else collect_modules(self, "", mods, {}) end
  for _, e in ipairs(mods) do
    local prefix, m = e[1], e[2]
    for _, n in ipairs(rawget(m, names_field)) do
      local t = rawget(m, n)
      if t ~= nil and not seen[t] then
        seen[t] = true
        out[#out + 1] = { prefix == "" and n or prefix .. "." .. n, t }
      end
    end
  end
  return out
end

function Module:named_parameters(recurse) return list_iter(collect_tensors(self, "_param_names", recurse)) end
function Module:named_buffers(recurse) return list_iter(collect_tensors(self, "_buffer_names", recurse)) end

-- The same walk without names, for parameters() and buffers(): they run
-- every step (zero_grad, DDP's forward), and building the dotted names was
-- most of their cost.
local function collect_module_list(m, out, seen)
  if seen[m] then return end
  seen[m] = true
  out[#out + 1] = m
  local names = rawget(m, "_module_names")
  for i = 1, #names do
    local c = rawget(m, names[i])
    if c ~= nil then collect_module_list(c, out, seen) end
  end
end

local function tensor_list(self, names_field, recurse)
  local mods = { self }
  if recurse ~= false then
    mods = {}
    collect_module_list(self, mods, {})
  end
  local out, seen = {}, {}
  for _, m in ipairs(mods) do
    local names = rawget(m, names_field)
    for i = 1, #names do
      local t = rawget(m, names[i])
      if t ~= nil and not seen[t] then
        seen[t] = true
        out[#out + 1] = t
      end
    end
  end
  return out
end

function Module:parameters(recurse) return tensor_list(self, "_param_names", recurse) end
function Module:buffers(recurse) return tensor_list(self, "_buffer_names", recurse) end

--- Module._parameters_and_buffers(m): both lists from one walk (DDP's
--- forward checks the one and broadcasts the other on every step).
function Module._parameters_and_buffers(m)
  local mods = {}
  collect_module_list(m, mods, {})
  local params, buffers, seen = {}, {}, {}
  for _, mod in ipairs(mods) do
    local names = rawget(mod, "_param_names")
    for i = 1, #names do
      local t = rawget(mod, names[i])
      if t ~= nil and not seen[t] then
        seen[t] = true
        params[#params + 1] = t
      end
    end
    names = rawget(mod, "_buffer_names")
    for i = 1, #names do
      local t = rawget(mod, names[i])
      if t ~= nil and not seen[t] then
        seen[t] = true
        buffers[#buffers + 1] = t
      end
    end
  end
  return params, buffers
end

--- fn(m) on every submodule (children first) and then self; returns self.
function Module:apply(fn)
  for _, c in self:named_children() do c:apply(fn) end
  fn(self)
  return self
end

-- Modes, devices, gradients ---------------------------------------------------

function Module:train(mode)
  if mode == nil then mode = true end
  for _, m in ipairs(self:modules()) do rawset(m, "training", mode and true or false) end
  return self
end

function Module:eval() return self:train(false) end

local dtype_names = {
  float32 = "float32", float = "float32", float64 = "float64", double = "float64", bfloat16 = "bfloat16",
  float16 = "float16", half = "float16", int64 = "int64", long = "int64", uint8 = "uint8", byte = "uint8",
}

--- m:to("cuda:0" | "float64" | {dtype=, device=} | tensor): parameters and
--- buffers change in place (the same tensor objects), so optimizers and DDP
--- keep seeing them. Only floating point tensors change dtype (integer
--- buffers such as num_batches_tracked stay int64), as in PyTorch.
function Module:to(...)
  local dtype, device
  for i = 1, select("#", ...) do
    local a = select(i, ...)
    if ddp.is_tensor(a) then
      dtype, device = a:dtype(), a:device()
    elseif type(a) == "table" then
      dtype, device = a.dtype or dtype, a.device or device
    elseif type(a) == "string" then
      if dtype_names[a] then dtype = dtype_names[a] else device = a end
    elseif a ~= nil then
      E.raise("to: expected a dtype or device string, an options table or a tensor, got " .. type(a))
    end
  end
  local function convert(t)
    local dt = t:is_floating_point() and dtype or t:dtype()
    local dev = device or t:device()
    if dt ~= t:dtype() or dev ~= t:device() then
      core._set_data(t, t:detach():to(dt, dev))
    end
  end
  ddp.no_grad(function()
    for _, p in ipairs(self:parameters()) do convert(p) end
    for _, b in ipairs(self:buffers()) do convert(b) end
  end)
  return self
end

function Module:float() return self:to("float32") end
function Module:double() return self:to("float64") end
function Module:cuda(i) return self:to("cuda:" .. (i or 0)) end
function Module:cpu() return self:to("cpu") end

--- zero_grad(set_to_none = true): drops gradients, except that a
--- parameter marked with core.keep_grad_buf(t, true) (DDP's bucket views) is zeroed in place.
function Module:zero_grad(set_to_none)
  if set_to_none == nil then set_to_none = true end
  core._zero_grads(self:parameters(), set_to_none)
end

function Module:requires_grad_(on)
  if on == nil then on = true end
  for _, p in ipairs(self:parameters()) do p:requires_grad_(on) end
  return self
end

-- State dicts -----------------------------------------------------------------

--- Ordered name -> tensor (parameters and buffers, detached, sharing memory).
function Module:state_dict(prefix)
  local sd = ordered_dict()
  prefix = prefix or ""
  local mods = {}
  collect_modules(self, "", mods, {})
  for _, e in ipairs(mods) do
    local p, m = e[1], e[2]
    local base = prefix .. (p == "" and "" or p .. ".")
    for _, n in ipairs(rawget(m, "_param_names")) do
      local t = rawget(m, n)
      if t ~= nil then ordered_set(sd, base .. n, t:detach()) end
    end
    local np = rawget(m, "_nonpersistent")
    for _, n in ipairs(rawget(m, "_buffer_names")) do
      local t = rawget(m, n)
      if t ~= nil and not (np and np[n]) then ordered_set(sd, base .. n, t:detach()) end
    end
  end
  return sd
end

local function shape_str(t) return "[" .. table.concat(t:size(), ", ") .. "]" end

--- load_state_dict(sd, strict = true): copies values into the existing
--- tensors. Returns the lists of missing and unexpected keys; with strict
--- any of those, and always a shape mismatch, is an error naming them.
function Module:load_state_dict(sd, strict)
  if strict == nil then strict = true end
  if type(sd) ~= "table" then E.raise("load_state_dict: expected a table of name -> tensor, got " .. type(sd)) end
  local own = self:state_dict()
  local missing, unexpected, mismatched = {}, {}, {}
  for k, t in pairs(own) do
    local v = sd[k]
    if v == nil then
      missing[#missing + 1] = k
    elseif not ddp.is_tensor(v) then
      mismatched[#mismatched + 1] = string.format("%s: expected a tensor, got %s", k, type(v))
    elseif shape_str(v) ~= shape_str(t) then
      mismatched[#mismatched + 1] = string.format(
        "size mismatch for %s: copying a tensor with shape %s from the state dict, the shape in the current model "
        .. "is %s",
        k, shape_str(v), shape_str(t))
    end
  end
  for k in pairs(sd) do
    if own[k] == nil then unexpected[#unexpected + 1] = type(k) == "string" and k or tostring(k) end
  end
  table.sort(unexpected)
  local problems = {}
  if strict and #missing > 0 then
    problems[#problems + 1] = 'Missing key(s) in state_dict: "' .. table.concat(missing, '", "') .. '".'
  end
  if strict and #unexpected > 0 then
    problems[#problems + 1] = 'Unexpected key(s) in state_dict: "' .. table.concat(unexpected, '", "') .. '".'
  end
  for _, m in ipairs(mismatched) do problems[#problems + 1] = m .. "." end
  if #problems > 0 then
    E.raise(string.format("Error(s) in loading state_dict for %s:\n\t%s", self:_class_name(),
      table.concat(problems, "\n\t")))
  end
  ddp.no_grad(function()
    for k, t in pairs(own) do
      local v = sd[k]
      if v ~= nil then t:copy_(v) end
    end
  end)
  return missing, unexpected
end

-- Printing ----------------------------------------------------------------------

--- One-line description of the module's own settings ("in_features=3, ...").
function Module:extra_repr() return "" end

function Module.__tostring(self)
  local lines = {}
  for n, c in self:named_children() do
    local s = tostring(c):gsub("\n", "\n  ")
    lines[#lines + 1] = "  (" .. n .. "): " .. s
  end
  local extra = self:extra_repr()
  local name = self:_class_name()
  if #lines == 0 then return name .. "(" .. extra .. ")" end
  local head = name .. "("
  if extra ~= "" then head = head .. "\n  " .. extra:gsub("\n", "\n  ") end
  return head .. "\n" .. table.concat(lines, "\n") .. "\n)"
end

return Module
