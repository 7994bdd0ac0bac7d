-- ddp.save_state(path, state [, {metadata=}]) / ddp.load_state(path [, {device=}]):
-- any nested table of tensors, numbers, strings and booleans in one
-- safetensors file, written by whichever rank calls it (no collective: the
-- tutorials' `if rank == 0: torch.save(...)`). ddp.save_checkpoint, which
-- every rank calls, is for resuming a run; this is for everything else.
--
-- Format: every tensor is a safetensors tensor named by its path in the
-- table ("model.fc1.weight", "history.3"; "#2", "#3", ... appended when two
-- paths would give one name); __metadata__ "format" = "ddplua.state/1" and
-- "tree" = the table as JSON, a tensor as {"__tensor__": name}, a table
-- whose keys are not all names (integer keys of a sparse table, booleans)
-- or that uses a reserved key as {"__map__": [[key, value], ...]}, a string
-- that is not UTF-8 as {"__bytes__": hex}. Integers stay integers, floats
-- floats (inf and nan included). The write is atomic (ddp.save: temporary
-- file, fsync, rename): a crash leaves the old file or the new one.
local core = require "ddplua.core"
local E = require "ddplua.errors"

local M = {}

local FORMAT = "ddplua.state/1"
local RESERVED = { __tensor__ = true, __map__ = true, __bytes__ = true }

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
  if ta == "boolean" then return (not a) and b end
  return a < b
end

local function hex(s) return (s:gsub(".", function(c) return string.format("%02x", c:byte()) end)) end
local function unhex(h) return (h:gsub("%x%x", function(x) return string.char(tonumber(x, 16)) end)) end

local function join(path, k) return path == "" and tostring(k) or path .. "." .. tostring(k) end
local function shown(path) return path == "" and "the state" or "state." .. path end

-- The JSON-able copy of v (at `path`, the tensor names' base).
local function encode(v, path, tensors, names, active)
  local t = type(v)
  if core.is_tensor(v) then
    local name, k = path, 1
    while names[name] do
      k = k + 1
      name = path .. "#" .. k
    end
    names[name] = true
    tensors[name] = v:detach():contiguous()
    return { __tensor__ = name }
  end
  if t == "string" then
    if utf8.len(v) == nil then return { __bytes__ = hex(v) } end
    return v
  end
  if t == "number" or t == "boolean" then return v end
  if t ~= "table" then
    E.raisef("save_state: %s is a %s; a state holds tensors, numbers, strings, booleans and tables of them",
      shown(path), t)
  end
  if getmetatable(v) ~= nil and getmetatable(v).__is_module then
    E.raisef("save_state: %s is a module; save its state_dict() instead", shown(path))
  end
  if active[v] then E.raisef("save_state: %s refers back to a table that contains it (a cycle)", shown(path)) end
  active[v] = true
  local out
  if is_sequence(v) then
    out = {}
    for i = 1, #v do out[i] = encode(v[i], join(path, i), tensors, names, active) end
  else
    local keys, plain = {}, true
    for k in pairs(v) do
      local kt = type(k)
      if kt ~= "string" and kt ~= "number" and kt ~= "boolean" then
        E.raisef("save_state: %s has a %s key; keys are strings, numbers or booleans", shown(path), kt)
      end
      if kt ~= "string" or RESERVED[k] or utf8.len(k) == nil then plain = false end
      keys[#keys + 1] = k
    end
    table.sort(keys, key_order)
    if plain then
      out = {}
      for _, k in ipairs(keys) do out[k] = encode(v[k], join(path, k), tensors, names, active) end
    else
      local entries = {}
      for i, k in ipairs(keys) do
        entries[i] = { encode(k, join(path, k), tensors, names, active),
          encode(v[k], join(path, k), tensors, names, active) }
      end
      out = { __map__ = entries }
    end
  end
  active[v] = nil
  return out
end

local function decode(v, tensors, path)
  if type(v) ~= "table" then return v end
  if v.__tensor__ ~= nil then
    local t = tensors[v.__tensor__]
    if t == nil then E.raisef("load_state: %s: the tree names tensor '%s', which the file does not hold", path,
        tostring(v.__tensor__)) end
    return t
  end
  if v.__bytes__ ~= nil then return unhex(v.__bytes__) end
  local out = {}
  if v.__map__ ~= nil then
    for _, kv in ipairs(v.__map__) do out[decode(kv[1], tensors, path)] = decode(kv[2], tensors, path) end
    return out
  end
  for k, x in pairs(v) do out[k] = decode(x, tensors, path) end
  return out
end

--- The tree codec on its own (the DataLoader's workers send batches with
--- it): encode(v) -> JSON text, {name -> tensor}; decode(text, tensors).
function M.encode(v)
  local tensors = {}
  local tree = encode(v, "", tensors, {}, {})
  return core.json_encode(tree, "batch"), tensors
end

function M.decode(text, tensors) return decode(core.json_decode(text, "batch"), tensors, "batch") end

--- save_state(path, state [, {metadata = {key = "text"}}])
function M.save(path, state, opts)
  if type(path) ~= "string" or path == "" then E.raise("save_state: expected a file name, got " .. tostring(path)) end
  if type(state) ~= "table" or core.is_tensor(state) then
    E.raise("save_state: expected a table to save, got " .. (core.is_tensor(state) and "a tensor (wrap it: {t = t})"
      or type(state)))
  end
  opts = opts or {}
  if type(opts) ~= "table" then E.raise("save_state: options must be a table, got " .. type(opts)) end
  for k in pairs(opts) do
    if k ~= "metadata" then E.raise("save_state: unknown option '" .. tostring(k) .. "' (valid options: metadata)") end
  end
  local tensors, tree = {}, nil
  tree = encode(state, "", tensors, {}, {})
  local meta = {}
  for k, v in pairs(opts.metadata or {}) do
    if type(k) ~= "string" or type(v) ~= "string" then
      E.raise("save_state: metadata must map strings to strings (safetensors' __metadata__), got " ..
        type(k) .. " -> " .. type(v))
    end
    if k == "format" or k == "tree" then E.raise("save_state: metadata key '" .. k .. "' is reserved") end
    meta[k] = v
  end
  meta.format = FORMAT
  meta.tree = core.json_encode(tree, "state")
  local ok, err = pcall(core.save, tensors, path, { metadata = meta })
  if not ok then E.raise("save_state: " .. tostring(err):gsub("^[^\n]-%.lua:%d+: ", "")) end
end

--- load_state(path [, {device = "cpu"}]) -> the table; its metadata second
function M.load(path, opts)
  if type(path) ~= "string" or path == "" then E.raise("load_state: expected a file name, got " .. tostring(path)) end
  opts = opts or {}
  if type(opts) ~= "table" then E.raise("load_state: options must be a table, got " .. type(opts)) end
  for k in pairs(opts) do
    if k ~= "device" then E.raise("load_state: unknown option '" .. tostring(k) .. "' (valid options: device)") end
  end
  local ok, tensors, meta = pcall(core.load, path, { device = opts.device or "cpu" })
  if not ok then E.raise("load_state: " .. tostring(tensors):gsub("^[^\n]-%.lua:%d+: ", "")) end
  if meta.format ~= FORMAT or type(meta.tree) ~= "string" then
    E.raisef("load_state: %s is not a file of ddp.save_state (its metadata has format=%s, expected %s); ddp.load " ..
      "reads plain safetensors files", path, tostring(meta.format), FORMAT)
  end
  local ok2, tree = pcall(core.json_decode, meta.tree, path .. " (__metadata__ \"tree\")")
  if not ok2 then E.raise("load_state: " .. tostring(tree)) end
  local extra = {}
  for k, v in pairs(meta) do
    if k ~= "format" and k ~= "tree" then extra[k] = v end
  end
  return decode(tree, tensors, path), extra
end

return M
