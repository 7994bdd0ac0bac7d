-- DistributedDataParallel: wraps a module so that backward all-reduces
-- (averages) gradients across the process group, bucket by bucket, while
-- backward is still running (the reducer in src/distributed/ddp_reducer.c).
--
--   local model = dist.DistributedDataParallel(model, {bucket_cap_mb=25,
--                    find_unused_parameters=false, broadcast_buffers=true})
--   local opt = optim.SGD(model:parameters(), {lr=0.05})   -- after wrapping
--   do local _ <close> = model:no_sync() ... end            -- accumulate locally
--   model.require_backward_grad_sync = false                -- or nanoGPT's way, per forward
--
-- As in PyTorch it is an nn.Module whose one child is the wrapped module,
-- `model.module`: every Module method works on it, and named_parameters(),
-- named_buffers(), named_modules() and state_dict() all name things
-- "module.0.weight". load_state_dict takes those keys (and, for a state dict
-- of the wrapped module itself, its own keys).
--
-- The reducer knows the wrapped module's trainable parameters, with their
-- dtype and device, as they were when it was built. When they change after
-- wrapping (to(), double(), cuda(), requires_grad_(), a submodule added),
-- the next forward, or the to()/requires_grad_() call itself, rebuilds it as
-- wrapping again would (same model on every rank, rank 0's values
-- broadcast, new buckets), where PyTorch would silently stop averaging those
-- gradients. Every rank must make the same change, as with any collective.
-- The wrapper itself holds nothing but `module`.
--
-- require_backward_grad_sync (default true), as PyTorch's: each forward
-- reads it, and a backward of a forward run with it false accumulates
-- locally (no all-reduce), as inside no_sync; the first backward whose
-- forward ran with it true averages everything accumulated.
local ddp = require "ddplua"
local Module = require "ddplua.nn.module"
local E = require "ddplua.errors"
local core = ddp.core

local DDP = Module:extend("DistributedDataParallel")

local IMPLEMENTED = {
  "bucket_cap_mb", "find_unused_parameters", "broadcast_buffers", "process_group", "device_ids", "output_device",
  "gradient_as_bucket_view", "static_graph",
}
local implemented = {}
for _, k in ipairs(IMPLEMENTED) do implemented[k] = true end

-- Every unusable option at once: unknown keys, and PyTorch options set to a
-- mode this wrapper does not have.
local function check_options(opts)
  if type(opts) ~= "table" then
    E.raise("DistributedDataParallel: expected an options table, got " .. type(opts))
  end
  local problems = {}
  local unknown = {}
  for k in pairs(opts) do
    if not implemented[k] then unknown[#unknown + 1] = "'" .. tostring(k) .. "'" end
  end
  table.sort(unknown)
  if #unknown > 0 then
    problems[#problems + 1] = "unknown option" .. (#unknown > 1 and "s " or " ") .. table.concat(unknown, ", ") ..
      " (valid: " .. table.concat(IMPLEMENTED, ", ") .. ")"
  end
  if opts.gradient_as_bucket_view == false then
    problems[#problems + 1] = "gradient_as_bucket_view=false is not implemented (gradients are always views " ..
      "into the communication buckets; leave it out or pass true)"
  end
  if opts.static_graph ~= nil and opts.static_graph ~= false then
    problems[#problems + 1] = "static_graph=" .. tostring(opts.static_graph) .. " is not implemented (leave it out)"
  end
  local function check_type(key, want, ok)
    local v = opts[key]
    if v ~= nil and not ok(v) then
      problems[#problems + 1] = string.format("%s must be %s, got %s", key, want, tostring(v))
    end
  end
  local function is_bool(v) return type(v) == "boolean" end
  check_type("bucket_cap_mb", "a positive number", function(v) return type(v) == "number" and v > 0 end)
  check_type("find_unused_parameters", "a boolean", is_bool)
  check_type("broadcast_buffers", "a boolean", is_bool)
  check_type("gradient_as_bucket_view", "a boolean", is_bool)
  if #problems > 0 then E.raise("DistributedDataParallel: " .. table.concat(problems, "; ")) end
end

-- device_ids / output_device as PyTorch takes them: nil, or for a module on
-- one GPU that GPU ({k} or {"cuda:k"}); a CPU or multi-device module takes
-- nil only. The module stays where it is: nothing is moved.
local function check_devices(opts, module)
  if opts.device_ids == nil and opts.output_device == nil then return end
  local devices, list = {}, {}
  for _, p in ipairs(module:parameters()) do
    local d = p:device()
    if not devices[d] then devices[d] = true; list[#list + 1] = d end
  end
  table.sort(list)
  local where = #list == 0 and "no device (no parameters)" or table.concat(list, ", ")
  local function as_device(v)
    if math.type(v) == "integer" then return "cuda:" .. v end
    return v
  end
  local function fail(what)
    E.raise(string.format("DistributedDataParallel: %s, but the module's parameters are on %s (device_ids and " ..
      "output_device are for a module on one GPU: nil or that GPU)", what, where))
  end
  local ids = opts.device_ids
  if ids ~= nil then
    if type(ids) ~= "table" or #ids ~= 1 then
      fail("device_ids must be nil or a list of one device, got " .. (type(ids) == "table" and
        (#ids .. " entries") or tostring(ids)))
    end
    local d = as_device(ids[1])
    if #list ~= 1 or list[1] ~= d or not tostring(d):match("^cuda") then
      fail("device_ids is {" .. tostring(d) .. "}")
    end
  end
  if opts.output_device ~= nil then
    local d = as_device(opts.output_device)
    if #list ~= 1 or list[1] ~= d or not tostring(d):match("^cuda") then
      fail("output_device is " .. tostring(d))
    end
  end
end

-- Broadcasts rank 0's values of a list of tensors: each contiguous one of
-- BROADCAST_ALONE bytes or more in place, the rest coalesced per dtype into
-- one flat buffer (one collective per dtype for the many small biases and
-- norms). A copy of all of them cost a new block as large as the model
-- (the MLP's 7.4 MB: 15 of the 47 ms DDP took to wrap it cold on the
-- 2026-12 VM, where a fresh page's first write is dear).
local BROADCAST_ALONE = 256 * 1024
local function broadcast_tensors(dist, tensors, group)
  local by_dtype, order = {}, {}
  ddp.no_grad(function()
    for _, t in ipairs(tensors) do
      if t:numel() * t:element_size() >= BROADCAST_ALONE and t:is_contiguous() then
        dist.broadcast(t, 0, { group = group })
      else
        local dt = t:dtype() .. "@" .. t:device()
        if not by_dtype[dt] then by_dtype[dt] = {}; order[#order + 1] = dt end
        table.insert(by_dtype[dt], t)
      end
    end
    for _, key in ipairs(order) do
      local list = by_dtype[key]
      local parts = {}
      for i, t in ipairs(list) do parts[i] = t:reshape(-1) end
      local flat = ddp.cat(parts)
      dist.broadcast(flat, 0, { group = group })
      local off = 1
      for _, t in ipairs(list) do
        local n = t:numel()
        if n > 0 then t:copy_(flat:narrow(1, off, n):view(t:size())) end
        off = off + n
      end
    end
  end)
end

-- What the reducer was built for: each parameter of the wrapped module with
-- whether it requires grad, its dtype and its device.
local function param_signature(params)
  local sig = {}
  for _, p in ipairs(params) do
    sig[#sig + 1] = p
    sig[#sig + 1] = p.requires_grad
    sig[#sig + 1] = p:dtype()
    sig[#sig + 1] = p:device()
  end
  return sig
end

local function same_signature(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do
    if a[i] ~= b[i] then return false end
  end
  return true
end

-- Every rank must hold the same parameters: compare counts and shapes.
local function check_same_model(dist, params, group)
  local n_el, sig = 0, 0
  for i, p in ipairs(params) do
    n_el = n_el + p:numel()
    for d, s in ipairs(p:size()) do sig = (sig * 31 + s * 7 + d + i) % 1000000007 end
  end
  -- on the parameters' device: an nccl group takes CUDA tensors only (DDP
  -- over nccl failed here on its first GPU run), and a model on the cpu
  -- must not start CUDA on a machine that has a GPU
  local dev = params[1] and params[1]:device() or ddp.device()
  local mine = ddp.tensor({ #params, n_el, sig }, { dtype = "int64", device = dev })
  local world = dist.get_world_size(group)
  local all = ddp.zeros({ world, 3 }, { dtype = "int64", device = dev })
  dist.all_gather(all, mine, { group = group })
  local rows = all:totable()
  for r = 2, world do
    local a, b = rows[1], rows[r]
    if a[1] ~= b[1] or a[2] ~= b[2] or a[3] ~= b[3] then
      E.raise(string.format("DistributedDataParallel: ranks hold different models: rank 0 has %d parameters " ..
        "(%d elements), rank %d has %d parameters (%d elements)%s", a[1], a[2], r - 1, b[1], b[2],
        (a[1] == b[1] and a[2] == b[2]) and " with different shapes" or ""))
    end
  end
end

-- Wrapping proper (construction, and again after the parameters changed):
-- same model everywhere, rank 0's parameters and buffers broadcast, a
-- reducer over the trainable parameters (named as in the wrapped module,
-- as PyTorch's DDP names them in its errors).
local function build_reducer(self)
  local dist, module, group = ddp.distributed, rawget(self, "module"), rawget(self, "process_group")
  local names, params = {}, {}
  for name, p in module:named_parameters() do
    names[#names + 1], params[#params + 1] = name, p
  end
  check_same_model(dist, params, group)
  local state = {}
  for _, p in ipairs(params) do state[#state + 1] = p end
  for _, b in ipairs(module:buffers()) do state[#state + 1] = b end
  if #state > 0 then broadcast_tensors(dist, state, group) end
  local cap = rawget(self, "bucket_cap_mb")
  rawset(self, "reducer", core.ddp_reducer(group, params, names, {
    bucket_cap_mb = cap,
    first_bucket_mb = math.min(1, cap),
    find_unused_parameters = rawget(self, "find_unused_parameters"),
  }))
  rawset(self, "_reducer_signature", param_signature(params))
  rawset(self, "_world_size", dist.get_world_size(group))
end

-- Rebuilds the reducer when the wrapped module's parameters changed since
-- it was built (keeping a no_sync in progress); returns the module's
-- buffers.
local function sync_reducer(self)
  local params, buffers = Module._parameters_and_buffers(rawget(self, "module"))
  if same_signature(param_signature(params), rawget(self, "_reducer_signature")) then return buffers end
  local old = rawget(self, "reducer")
  local sync = old:set_sync(true)
  old:release()
  build_reducer(self)
  rawget(self, "reducer"):set_sync(sync)
  return buffers
end

function DDP:__init(module, opts)
  opts = opts or {}
  check_options(opts)
  if not Module.is_module(module) then
    E.raise("DistributedDataParallel: expected an nn.Module, got " .. (type(module) == "table" and "a table" or
      type(module)))
  end
  check_devices(opts, module)
  if not ddp.distributed.is_initialized() then
    E.raise("DistributedDataParallel: the default process group is not initialised; call " ..
      "dist.init_process_group() before wrapping the model")
  end
  self.module = module -- the one child: names become "module.<name>"
  rawset(self, "process_group", opts.process_group)
  rawset(self, "broadcast_buffers", opts.broadcast_buffers ~= false)
  rawset(self, "find_unused_parameters", opts.find_unused_parameters and true or false)
  rawset(self, "bucket_cap_mb", opts.bucket_cap_mb or 25)
  rawset(self, "training", module.training ~= false)
  rawset(self, "require_backward_grad_sync", true)
  rawset(self, "_no_sync_depth", 0)
  build_reducer(self)
end

-- Rank 0's buffers everywhere before each training forward (PyTorch's
-- broadcast_buffers; nothing to do alone).
function DDP:forward(...)
  local buffers = sync_reducer(self)
  local flag = rawget(self, "require_backward_grad_sync")
  if flag ~= true and flag ~= false then
    E.raise("DistributedDataParallel: require_backward_grad_sync must be true or false, got " .. tostring(flag))
  end
  rawget(self, "reducer"):set_sync(flag and rawget(self, "_no_sync_depth") == 0)
  local module = rawget(self, "module")
  if #buffers > 0 and self.broadcast_buffers and module.training ~= false and self._world_size > 1 then
    broadcast_tensors(ddp.distributed, buffers, self.process_group)
  end
  return module(...)
end

--- A to-be-closed guard: backward passes inside it accumulate gradients
--- locally; the next backward outside reduces the accumulated total.
function DDP:no_sync()
  local prev = self.reducer:set_sync(false)
  rawset(self, "_no_sync_depth", rawget(self, "_no_sync_depth") + 1)
  return setmetatable({}, { __close = function()
    rawset(self, "_no_sync_depth", rawget(self, "_no_sync_depth") - 1)
    self.reducer:set_sync(prev)
  end })
end

--- Module:to (and float/double/cuda/cpu, which call it), then a new
--- reducer if a parameter changed dtype or device.
function DDP:to(...)
  Module.to(self, ...)
  sync_reducer(self)
  return self
end

function DDP:requires_grad_(on)
  Module.requires_grad_(self, on)
  sync_reducer(self)
  return self
end

--- PyTorch's keys ("module.0.weight"); a state dict of the wrapped module
--- itself (no key with the prefix) loads into it.
function DDP:load_state_dict(sd, strict)
  if type(sd) == "table" and next(sd) ~= nil then
    local prefixed = false
    for k in pairs(sd) do
      if type(k) == "string" and k:sub(1, 7) == "module." then prefixed = true; break end
    end
    if not prefixed then return self.module:load_state_dict(sd, strict) end
  end
  return Module.load_state_dict(self, sd, strict)
end

-- The wrapper holds the wrapped module and nothing else: a parameter,
-- buffer or submodule added to it would be outside the reducer (PyTorch's
-- DDP never averages such a parameter either). Add them to model.module.
function DDP:add_module(name, m)
  if name == "module" and rawget(self, "module") == nil then return Module.add_module(self, name, m) end
  E.raise(string.format("DistributedDataParallel: cannot add the submodule '%s' to the wrapper; add it to " ..
    "model.module (the next forward includes its parameters)", tostring(name)))
end
DDP.register_module = DDP.add_module

function DDP:register_parameter(name)
  E.raise(string.format("DistributedDataParallel: cannot add the parameter '%s' to the wrapper; add it to " ..
    "model.module (the next forward includes it)", tostring(name)))
end

function DDP:register_buffer(name)
  E.raise(string.format("DistributedDataParallel: cannot add the buffer '%s' to the wrapper; add it to " ..
    "model.module", tostring(name)))
end

--- Reducer counters: buckets, how many all-reduces started during backward
--- (overlap), and how long before backward ended the first one started.
function DDP:reducer_stats() return self.reducer:stats() end

return DDP
