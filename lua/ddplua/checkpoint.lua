-- ddp.save_checkpoint / ddp.load_checkpoint: everything a run needs to
-- resume, in one safetensors file (readable by PyTorch and Hugging Face
-- tools).
--
-- Tensors: the model's state dict under "model.<name>", optimizer state
-- tensors under "optimizer.<i>.<name>" (PyTorch's state[i][name]; any other
-- tensor in the optimizer's state dict under "optimizer.<path>"), tensors in
-- scheduler/extra under "scheduler.<path>" / "extra.<path>".
-- __metadata__ (strings, as the format requires): "format" =
-- "ddplua.checkpoint/1", and JSON texts for "epoch", "step", "world_size",
-- "optimizer", "scheduler", "sampler", "config", "extra", "rng". In those
-- JSON trees a tensor is {"__tensor__": "<name in the file>"} and a table
-- whose keys are not all names (an optimizer's state keyed by parameter
-- position) is {"__map__": [[key, value], ...]}.
--
-- Saving: every rank calls save_checkpoint (collectives inside: the RNG
-- states are gathered, and rank 0's success or failure is broadcast so that
-- all ranks return or raise together); rank 0 writes the file atomically
-- (ddp.save: temporary file, fsync, rename), so a crash or kill at any moment
-- leaves the previous checkpoint or the new one at `path`.
-- Loading: every rank reads the file and restores the objects it is given.
-- Everything the file holds is checked before any object is touched (the
-- tree markers, the optimizer's PyTorch layout, RNG states, epoch, step,
-- world_size); a problem, or an object's own load_state_dict refusing its
-- state, is an error naming the file and the field ("optimizer.param_groups[1]
-- .lr", "sampler.epoch") instead of an internal error at load or at the
-- first step.
local core = require "ddplua.core"
local rank = require "ddplua.rank"

local FORMAT = "ddplua.checkpoint/1"
local M = { FORMAT = FORMAT }

local SAVE_OPTS = { "model", "optimizer", "scheduler", "sampler", "epoch", "step", "rng", "config", "extra" }
local LOAD_OPTS = { "model", "optimizer", "scheduler", "sampler", "map_location", "rng", "strict" }

-- An error raised in this file, without this file's position in front of it
-- (the message names the file and the problem; the caller's position is
-- what the user needs).
local function own_message(err) return (tostring(err):gsub("^[^\n]-checkpoint%.lua:%d+: ", "")) end

local function check_opts(opts, valid, what)
  local set = {}
  for _, k in ipairs(valid) do set[k] = true end
  for k in pairs(opts) do
    if not set[k] then
      error(string.format("%s: unknown option '%s' (valid: %s)", what, tostring(k), table.concat(valid, ", ")), 3)
    end
  end
end

local function state_of(obj, what)
  if type(obj) == "table" and type(obj.state_dict) == "function" then return obj:state_dict() end
  if type(obj) == "table" then return obj end
  error(string.format("save_checkpoint: %s must have a state_dict() method or be a table, got a %s", what,
    type(obj)), 4)
end

-- Tree encoding -------------------------------------------------------------

local function is_sequence(t)
  local n = 0
  for k in pairs(t) do
    if math.type(k) ~= "integer" or k < 1 then return false end
    n = n + 1
  end
  return n > 0 and #t == n
end

local function key_order(a, b)
  local ta, tb = type(a), type(b)
  if ta ~= tb then return ta < tb end
  if ta == "number" or ta == "string" then return a < b end
  return tostring(a) < tostring(b)
end

-- Plain JSON-able copy of v; tensors are appended to `tensors` as {name,
-- tensor} and replaced by {__tensor__ = name}.
local function encode_tree(v, name, tensors, seen)
  if core.is_tensor(v) then
    if seen[name] then error("save_checkpoint: two tensors would be stored as '" .. name .. "'", 0) end
    seen[name] = true
    tensors[#tensors + 1] = { name, v:detach() }
    return { __tensor__ = name }
  end
  local t = type(v)
  if t == "function" or t == "userdata" or t == "thread" then
    error(string.format("save_checkpoint: %s is a %s, which a checkpoint cannot hold", name, t), 0)
  end
  if t ~= "table" then return v end
  local out = {}
  if is_sequence(v) then
    for i = 1, #v do out[i] = encode_tree(v[i], name .. "." .. i, tensors, seen) end
    return out
  end
  local all_strings, keys = true, {}
  for k in pairs(v) do
    keys[#keys + 1] = k
    if type(k) ~= "string" then all_strings = false end
    if k == "__tensor__" or k == "__map__" then
      error("save_checkpoint: " .. name .. " uses the reserved key " .. k, 0)
    end
  end
  table.sort(keys, key_order)
  if all_strings then
    for _, k in ipairs(keys) do out[k] = encode_tree(v[k], name .. "." .. k, tensors, seen) end
    return out
  end
  local entries = {}
  for _, k in ipairs(keys) do
    local kt = type(k)
    if kt ~= "string" and kt ~= "number" and kt ~= "boolean" then
      error(string.format("save_checkpoint: %s has a %s key, which a checkpoint cannot hold", name, kt), 0)
    end
    entries[#entries + 1] = { k, encode_tree(v[k], name .. "." .. tostring(k), tensors, seen) }
  end
  return { __map__ = entries }
end

-- Validation of what a file holds ---------------------------------------------

local function bad(path, field, msg) error(string.format("load_checkpoint: %s: %s %s", path, field, msg), 0) end

local function describe(v)
  if core.is_tensor(v) then return "a tensor" end
  if type(v) == "string" then return string.format("the string %q", #v > 40 and v:sub(1, 40) .. "..." or v) end
  if type(v) == "table" then return "a table" end
  return type(v) == "nil" and "nothing" or tostring(v)
end

local function is_list(t)
  if type(t) ~= "table" or core.is_tensor(t) then return false end
  local n = 0
  for k in pairs(t) do
    if math.type(k) ~= "integer" or k < 1 then return false end
    n = n + 1
  end
  return #t == n
end

local function only_key(v, key)
  for k in pairs(v) do if k ~= key then return false end end
  return true
end

local function sub(field, k)
  if type(k) == "string" and k:match("^[%a_][%w_]*$") then return field .. "." .. k end
  return field .. "[" .. (type(k) == "string" and string.format("%q", k) or tostring(k)) .. "]"
end

-- A decoded JSON tree -> the state it encodes (tensors from the file, maps
-- with their own keys back), checking the markers save_checkpoint writes.
local function decode_tree(v, tensors, path, field)
  if type(v) ~= "table" then return v end
  if v.__tensor__ ~= nil then
    local name = v.__tensor__
    if type(name) ~= "string" or not only_key(v, "__tensor__") then
      bad(path, field, "is a malformed tensor reference (expected {\"__tensor__\": \"<name in the file>\"})")
    end
    local t = tensors[name]
    if t == nil then bad(path, field, "refers to tensor '" .. name .. "', which the file does not hold") end
    return t
  end
  local out = {}
  if v.__map__ ~= nil then
    if not only_key(v, "__map__") or not is_list(v.__map__) then
      bad(path, field, "is a malformed map (expected {\"__map__\": [[key, value], ...]})")
    end
    for i, kv in ipairs(v.__map__) do
      local k = type(kv) == "table" and kv[1]
      local kt = math.type(k) or type(k)
      if not is_list(kv) or #kv > 2 or (kt ~= "string" and kt ~= "integer" and kt ~= "boolean" and
            not (kt == "float" and k == k and math.abs(k) ~= math.huge)) then
        bad(path, field, string.format("entry %d of its map is not a [key, value] pair with a string, number or " ..
          "boolean key", i))
      end
      if out[k] ~= nil then bad(path, field, "names key " .. describe(k) .. " twice") end
      out[k] = decode_tree(kv[2], tensors, path, sub(field, k))
    end
    return out
  end
  for k, x in pairs(v) do out[k] = decode_tree(x, tensors, path, sub(field, k)) end
  return out
end

-- The optimizer part is PyTorch's layout: {state = {[position] = {name =
-- tensor or number}}, param_groups = {{params = {positions}, lr = ..., ...}}}.
local function check_optimizer_layout(sd, path)
  if type(sd) ~= "table" or core.is_tensor(sd) then bad(path, "optimizer", "is " .. describe(sd) .. ", expected " ..
    "a table {state=, param_groups=}") end
  if type(sd.state) ~= "table" or core.is_tensor(sd.state) then
    bad(path, "optimizer.state", "is " .. describe(sd.state) .. ", expected a table keyed by parameter position")
  end
  for pos, st in pairs(sd.state) do
    local f = sub("optimizer.state", pos)
    if math.type(pos) ~= "integer" or pos < 1 then bad(path, f, "is keyed by " .. describe(pos) ..
      ", expected a parameter position 1, 2, ...") end
    if type(st) ~= "table" or core.is_tensor(st) or is_list(st) and next(st) ~= nil then
      bad(path, f, "is " .. describe(st) .. ", expected a table of named state values")
    end
    for k, x in pairs(st) do
      if type(k) ~= "string" or not (core.is_tensor(x) or type(x) == "number" or type(x) == "boolean") then
        bad(path, sub(f, k), "is " .. describe(x) .. ", expected a tensor or a number")
      end
    end
  end
  if not is_list(sd.param_groups) or #sd.param_groups == 0 then
    bad(path, "optimizer.param_groups", "is " .. describe(sd.param_groups) .. ", expected a list of parameter groups")
  end
  for gi, g in ipairs(sd.param_groups) do
    local f = string.format("optimizer.param_groups[%d]", gi)
    if type(g) ~= "table" or core.is_tensor(g) or not is_list(g.params) then
      bad(path, f, "is not a parameter group {params = {positions}, lr = ...}")
    end
    for i, p in ipairs(g.params) do
      if math.type(p) ~= "integer" or p < 1 then
        bad(path, string.format("%s.params[%d]", f, i), "is " .. describe(p) .. ", expected a parameter position")
      end
    end
    for k, x in pairs(g) do
      local ok = type(k) == "string" and (type(x) == "number" or type(x) == "boolean" or type(x) == "string")
      if type(x) == "table" and is_list(x) then
        ok = true
        for _, e in ipairs(x) do ok = ok and type(e) == "number" end
      end
      if not ok and k ~= "params" then bad(path, sub(f, k), "is " .. describe(x) .. ", expected a hyperparameter") end
    end
  end
end

local function check_count(v, path, field)
  if v ~= nil and (math.type(v) ~= "integer" or v < 0) then
    bad(path, field, "is " .. describe(v) .. ", expected a non-negative integer")
  end
end

-- RNG states: one per rank, {philox = {seed=, offset=}, lua = nil or 4 integers}.
local function check_rng(states, path)
  if not is_list(states) or #states == 0 then bad(path, "rng", "is " .. describe(states) .. ", expected a list " ..
    "of per-rank generator states") end
  for r, s in ipairs(states) do
    local f = string.format("rng[%d]", r)
    if type(s) ~= "table" or type(s.philox) ~= "table" then bad(path, f, "has no philox {seed=, offset=} state") end
    if math.type(s.philox.seed) ~= "integer" then bad(path, f .. ".philox.seed", "is " .. describe(s.philox.seed) ..
      ", expected an integer") end
    check_count(s.philox.offset, path, f .. ".philox.offset")
    if s.philox.offset == nil then bad(path, f .. ".philox.offset", "is missing") end
    if s.lua ~= nil then
      local ok = is_list(s.lua) and #s.lua == 4
      local any = false
      for i = 1, 4 do
        ok = ok and math.type(s.lua[i]) == "integer"
        any = any or (ok and s.lua[i] ~= 0)
      end
      if not ok or not any then bad(path, f .. ".lua", "is not 4 integers, not all zero (Lua's generator state)") end
    end
  end
end

-- RNG states ----------------------------------------------------------------

local function local_rng()
  local s = core.get_rng_state()
  return { philox = { seed = s.seed, offset = s.offset }, lua = core.lua_rng_state() }
end

local function device_for_collectives()
  local ddp = package.loaded["ddplua"]
  if ddp and type(ddp.device) == "function" then return ddp.device() end
  return "cpu"
end

-- Every rank's state, rank 0 first (a collective when a group is running).
local function gather_rng(dist)
  local mine = local_rng()
  if not dist or dist.get_world_size() == 1 then return { mine } end
  local l = mine.lua or { 0, 0, 0, 0 }
  local packed = { mine.philox.seed, mine.philox.offset, mine.lua and 1 or 0, l[1], l[2], l[3], l[4] }
  local dev = device_for_collectives()
  local t = core.tensor(packed, { dtype = "int64", device = dev })
  local list = {}
  for r = 1, dist.get_world_size() do list[r] = core.zeros(7, { dtype = "int64", device = dev }) end
  dist.all_gather(list, t)
  local out = {}
  for r, x in ipairs(list) do
    local v = x:totable()
    out[r] = { philox = { seed = v[1], offset = v[2] }, lua = v[3] == 1 and { v[4], v[5], v[6], v[7] } or nil }
  end
  return out
end

-- Saving --------------------------------------------------------------------

local function json(v, what) return core.json_encode(v, what) end

local function write(path, s, rng_states)
  local tensors, seen, meta = {}, {}, { format = FORMAT }
  if s.model ~= nil then
    for name, t in pairs(state_of(s.model, "model")) do
      if not core.is_tensor(t) then
        error(string.format("save_checkpoint: model state '%s' is a %s, expected a tensor", tostring(name), type(t)), 0)
      end
      encode_tree(t, "model." .. name, tensors, seen)
    end
  end
  if s.optimizer ~= nil then
    local sd, enc, keys = state_of(s.optimizer, "optimizer"), {}, {}
    for k in pairs(sd) do keys[#keys + 1] = k end
    table.sort(keys, key_order)
    for _, k in ipairs(keys) do
      -- PyTorch's layout: state[i][name] tensors are stored as optimizer.<i>.<name>
      enc[k] = encode_tree(sd[k], k == "state" and "optimizer" or "optimizer." .. tostring(k), tensors, seen)
    end
    meta.optimizer = json(enc, "optimizer")
  end
  for _, part in ipairs { "scheduler", "sampler" } do
    if s[part] ~= nil then meta[part] = json(encode_tree(state_of(s[part], part), part, tensors, seen), part) end
  end
  if s.extra ~= nil then meta.extra = json(encode_tree(s.extra, "extra", tensors, seen), "extra") end
  if s.config ~= nil then meta.config = json(s.config, "config") end
  for _, k in ipairs { "epoch", "step" } do
    if s[k] ~= nil and (math.type(s[k]) ~= "integer" or s[k] < 0) then
      error(string.format("save_checkpoint: %s must be a non-negative integer, got %s", k, describe(s[k])), 0)
    end
  end
  if s.epoch ~= nil then meta.epoch = json(s.epoch, "epoch") end
  if s.step ~= nil then meta.step = json(s.step, "step") end
  if rng_states then meta.rng = json(rng_states, "rng") end
  meta.world_size = json(rank.world_size(), "world_size")
  core.save(tensors, path, { metadata = meta })
end

--- save_checkpoint(path, {model=, optimizer=, scheduler=, sampler=, epoch=,
--- step=, rng=true, config=, extra=}); call it on every rank.
function M.save(path, s)
  if type(path) ~= "string" or path == "" then
    error("save_checkpoint: expected a file name, got " .. tostring(path), 2)
  end
  if type(s) ~= "table" then error("save_checkpoint: expected a table of what to save, got " .. type(s), 2) end
  check_opts(s, SAVE_OPTS, "save_checkpoint")
  local dist = rank.dist()
  local rng_states = s.rng and gather_rng(dist) or nil
  local ok, err = true, nil
  if rank.is_main() then ok, err = pcall(write, path, s, rng_states) end
  if dist then
    -- rank 0's outcome reaches every rank; it also holds them until the file is in place
    local flag = core.tensor({ ok and 1 or 0 }, { dtype = "int64", device = device_for_collectives() })
    dist.broadcast(flag, 0)
    if not rank.is_main() and flag:item() ~= 1 then
      error("save_checkpoint: rank 0 failed to write " .. path .. " (its error is in rank 0's output)", 2)
    end
  end
  if not ok then
    local msg = own_message(err)
    error(msg:match("^save_checkpoint: ") and msg or "save_checkpoint: " .. msg, 2)
  end
end

-- Loading -------------------------------------------------------------------

local function default_device(model)
  if type(model) ~= "table" then return "cpu" end
  if type(model.parameters) == "function" then
    local ok, params = pcall(model.parameters, model)
    if ok and type(params) == "table" and core.is_tensor(params[1]) then return params[1]:device() end
    return "cpu"
  end
  for _, t in pairs(model) do
    if core.is_tensor(t) then return t:device() end
  end
  return "cpu"
end

local function decode_meta(meta, key, path)
  local text = meta[key]
  if text == nil then return nil end
  local ok, v = pcall(core.json_decode, text, path .. " (__metadata__ \"" .. key .. "\")")
  if not ok then error("load_checkpoint: " .. own_message(v), 0) end
  return v
end

-- Every metadata entry this load uses, decoded and checked.
local function read_metadata(meta, tensors, path, opts)
  local m = {}
  for _, k in ipairs { "epoch", "step", "world_size", "config", "rng" } do m[k] = decode_meta(meta, k, path) end
  check_count(m.epoch, path, "epoch")
  check_count(m.step, path, "step")
  check_count(m.world_size, path, "world_size")
  if m.world_size == 0 then bad(path, "world_size", "is 0, expected a positive integer") end
  if m.rng ~= nil then check_rng(m.rng, path) end
  if meta.extra ~= nil then m.extra = decode_tree(decode_meta(meta, "extra", path), tensors, path, "extra") end
  for _, what in ipairs { "optimizer", "scheduler", "sampler" } do
    if opts[what] ~= nil then
      local v = decode_meta(meta, what, path)
      if v == nil then error(string.format("load_checkpoint: %s holds no %s state", path, what), 0) end
      m[what] = decode_tree(v, tensors, path, what)
      if what == "optimizer" then check_optimizer_layout(m[what], path) end
    end
  end
  return m
end

-- An object's own load_state_dict refusing what the file holds: the error
-- names the file and the part (its message names the field).
local function restore(obj, state, path, what, ...)
  local ok, err = pcall(obj.load_state_dict, obj, state, ...)
  if not ok then
    error(string.format("load_checkpoint: %s: %s: %s", path, what, tostring(err):gsub("^[^\n]-%.lua:%d+: ", "")), 0)
  end
end

-- Copies sd into a plain table of tensors (a model without load_state_dict).
local function load_into_table(target, sd, path)
  local missing, unexpected = {}, {}
  for k in pairs(target) do if sd[k] == nil then missing[#missing + 1] = tostring(k) end end
  for k in pairs(sd) do if target[k] == nil then unexpected[#unexpected + 1] = k end end
  table.sort(missing)
  table.sort(unexpected)
  if #missing > 0 or #unexpected > 0 then
    error(string.format("load_checkpoint: %s: model keys differ: missing %s; unexpected %s", path,
      #missing > 0 and table.concat(missing, ", ") or "none",
      #unexpected > 0 and table.concat(unexpected, ", ") or "none"), 0)
  end
  for k, t in pairs(target) do
    if not core.is_tensor(t) then error("load_checkpoint: model entry '" .. tostring(k) .. "' is not a tensor", 0) end
    local a, b = table.concat(t:size(), "x"), table.concat(sd[k]:size(), "x")
    if a ~= b then
      error(string.format("load_checkpoint: %s: model.%s has shape [%s] in the file, [%s] in the model", path, k,
        b:gsub("x", ", "), a:gsub("x", ", ")), 0)
    end
    t:detach():copy_(sd[k]) -- the same storage; a parameter that requires grad refuses an in-place copy itself
  end
end

-- A checkpoint saved from the DDP wrapper ("module." keys) loads into the
-- bare model, as in PyTorch's common consume_prefix_in_state_dict_if_present.
local function strip_module_prefix(model, sd)
  if type(model.state_dict) ~= "function" then return sd end
  local all_prefixed, any = true, false
  for k in pairs(sd) do
    any = true
    if k:sub(1, 7) ~= "module." then all_prefixed = false end
  end
  if not any or not all_prefixed then return sd end
  for k in pairs(model:state_dict()) do
    if k:sub(1, 7) == "module." then return sd end
  end
  local out = {}
  for k, t in pairs(sd) do out[k:sub(8)] = t end
  return out
end

local function restore_rng(states, path)
  local r, n = rank.rank(), rank.world_size()
  if #states ~= n then
    rank.print(string.format(
      "load_checkpoint: %s holds RNG states of %d rank(s), this run has %d: RNG states not restored", path, #states, n))
    return false
  end
  local s = states[r + 1]
  core.set_rng_state(s.philox)
  if s.lua then
    if core.lua_rng_state() == nil then return false end
    core.set_lua_rng_state(s.lua)
  end
  return true
end

--- load_checkpoint(path, {model=, optimizer=, scheduler=, sampler=,
--- map_location=, rng=true, strict=true}) -> info {epoch, step, config,
--- extra, world_size, rng_restored}; call it on every rank.
function M.load(path, opts)
  if type(path) ~= "string" or path == "" then
    error("load_checkpoint: expected a file name, got " .. tostring(path), 2)
  end
  opts = opts or {}
  if type(opts) ~= "table" then error("load_checkpoint: expected a table of options, got " .. type(opts), 2) end
  check_opts(opts, LOAD_OPTS, "load_checkpoint")
  local device = opts.map_location or default_device(opts.model)
  local loaded, tensors, meta = pcall(core.load, path, { device = device })
  if not loaded then error("load_checkpoint: " .. own_message(tensors), 2) end
  if meta.format ~= FORMAT then
    error(string.format("load_checkpoint: %s is not a ddplua checkpoint (its metadata has format=%s, expected %s); " ..
      "ddp.load reads plain safetensors files", path, tostring(meta.format), FORMAT), 2)
  end
  for _, what in ipairs { "optimizer", "scheduler", "sampler" } do
    local obj = opts[what]
    if obj ~= nil and (type(obj) ~= "table" or type(obj.load_state_dict) ~= "function") then
      error(string.format("load_checkpoint: %s must have a load_state_dict() method, got %s", what,
        type(obj) == "table" and "a table without one" or "a " .. type(obj)), 2)
    end
  end
  local ok, m = pcall(read_metadata, meta, tensors, path, opts)
  if not ok then error(m, 2) end
  if opts.model ~= nil then
    local sd = {}
    for name, t in pairs(tensors) do
      if name:sub(1, 6) == "model." then sd[name:sub(7)] = t end
    end
    if next(sd) == nil then error("load_checkpoint: " .. path .. " holds no model tensors", 2) end
    if type(opts.model) == "table" and type(opts.model.load_state_dict) == "function" then
      sd = strip_module_prefix(opts.model, sd)
      restore(opts.model, sd, path, "model", opts.strict)
    elseif type(opts.model) == "table" then
      load_into_table(opts.model, sd, path)
    else
      error("load_checkpoint: model must have a load_state_dict() method or be a table of tensors", 2)
    end
  end
  for _, what in ipairs { "optimizer", "scheduler", "sampler" } do
    if opts[what] ~= nil then restore(opts[what], m[what], path, what) end
  end
  local rng_restored = false
  if opts.rng ~= false and m.rng then rng_restored = restore_rng(m.rng, path) end
  return {
    epoch = m.epoch,
    step = m.step,
    config = m.config,
    extra = m.extra,
    world_size = m.world_size,
    rng_restored = rng_restored,
    metadata = meta,
  }
end

return M
