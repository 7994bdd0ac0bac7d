-- ddp.config(defaults [, opts]): the run configuration.
--
-- Precedence, lowest first:
--   1. `defaults`, the table the script passes;
--   2. the YAML file: `--config path`, `--config=path` or `config=path` among
--      the script's arguments, else the file named by DDPLUA_CONFIG (the host
--      sets it from its own `--config`). Its `ddplua:` and `script:` sections
--      belong to the launcher and are left out;
--   3. `key=value` / `a.b.c=value` arguments, in command-line order.
-- Every value must have its default's type: an integer default takes
-- integers only, a float default takes any number (stored as a float), a
-- string default takes any text (command-line values are taken verbatim), a
-- boolean default takes true/false, a list default takes a list (its items
-- checked against the default's first item) and a mapping default is merged
-- key by key. An empty table as a default is a free-form section: anything
-- goes below it. Unknown keys are errors listing the valid ones.
--
-- Consumed arguments (the config path and the overrides) are removed from
-- `arg`, so the positional arguments that remain are the script's own; an
-- argument "--" ends option processing (and is removed).
--
-- The resolved configuration is printed by rank 0 and saved by rank 0 as
-- <run dir>/config.yaml (see metrics.lua for the run directory). Returns the
-- configuration table and the run directory (nil with {save = false}).
local core = require "ddplua.core"
local rank = require "ddplua.rank"

local M = {}

local LAUNCHER_KEYS = { ddplua = true, script = true }

local function kind(v)
  local t = type(v)
  if t == "number" then return math.type(v) end
  if t ~= "table" then return t end
  if next(v) == nil then return "free" end
  local n, strings = 0, 0
  for k in pairs(v) do
    n = n + 1
    if type(k) == "string" then strings = strings + 1 end
  end
  if strings == n then return "mapping" end
  if strings == 0 and #v == n then return "list" end
  return "mixed"
end

local EXPECTED = {
  integer = "an integer",
  float = "a number",
  string = "a string",
  boolean = "true or false",
  list = "a list",
  mapping = "a mapping (key: value)",
  free = "a table",
}

local function describe(v)
  local k = kind(v)
  if k == "string" then return (string.format("%q", v):gsub("\\\n", "\\n")) end
  if k == "nil" then return "nothing" end
  if k == "list" or k == "mapping" or k == "free" or k == "mixed" then
    local ok, text = pcall(core.json_encode, v)
    return ok and text or ("a " .. k)
  end
  return tostring(v)
end

-- Calls a core function that reads user text; its error (which names the
-- file or argument, line and column) is re-raised without this file's
-- position in front of it.
local function user_text(fn, ...)
  local res = table.pack(pcall(fn, ...))
  if not res[1] then error("config: " .. tostring(res[2]):gsub("^[^\n]-config%.lua:%d+: ", ""), 0) end
  return table.unpack(res, 2, res.n)
end

local function deep_copy(v)
  if type(v) ~= "table" then return v end
  local out = {}
  for k, x in pairs(v) do out[k] = deep_copy(x) end
  return out
end

-- Dotted paths of every leaf the defaults declare (a free-form section is
-- listed as "name.*").
local function valid_keys(defaults, prefix, out)
  for k, v in pairs(defaults) do
    local path = prefix .. k
    local kd = kind(v)
    if kd == "mapping" then valid_keys(v, path .. ".", out)
    elseif kd == "free" then out[#out + 1] = path .. ".*"
    else out[#out + 1] = path end
  end
  return out
end

local function unknown_key(root_defaults, path, source)
  local keys = valid_keys(root_defaults, "", {})
  table.sort(keys)
  error(string.format("config: unknown key '%s' (%s); valid keys: %s", path, source,
    #keys > 0 and table.concat(keys, ", ") or "(none: the defaults are empty)"), 0)
end

local function mismatch(path, value, default, source, expected)
  error(string.format("config: %s = %s (%s) must be %s, like its default %s", path, describe(value), source,
    expected or EXPECTED[kind(default)] or "of the default's type", describe(default)), 0)
end

-- Returns value converted to the default's type, or raises.
local check_value

local function check_list(path, value, default, source)
  local kv = kind(value)
  if kv ~= "list" and kv ~= "free" then mismatch(path, value, default, source) end
  local item_default = default[1]
  local out = {}
  for i, x in ipairs(value) do
    if item_default ~= nil and kind(item_default) ~= "free" then
      out[i] = check_value(string.format("%s[%d]", path, i), x, item_default, source)
    else
      out[i] = deep_copy(x)
    end
  end
  return out
end

function check_value(path, value, default, source)
  local kd, kv = kind(default), kind(value)
  if kd == "float" then
    if kv == "float" then return value end
    if kv == "integer" then return value + 0.0 end
  elseif kd == "list" then
    return check_list(path, value, default, source)
  elseif kd == "free" then
    if type(value) == "table" then return deep_copy(value) end
  elseif kd == kv then
    return value
  end
  mismatch(path, value, default, source)
end

-- Merges the mapping `src` into `dst` (same shape as `defaults`).
local function merge(dst, src, defaults, prefix, source, root)
  local free = kind(defaults) == "free"
  for k, v in pairs(src) do
    local path = prefix .. tostring(k)
    if type(k) ~= "string" then
      error(string.format("config: key %s (%s) must be a name, not a %s", path, source, type(k)), 0)
    end
    local d = defaults[k]
    if free then
      dst[k] = deep_copy(v)
    elseif d == nil then
      unknown_key(root, path, source)
    elseif kind(d) == "mapping" then
      if kind(v) ~= "mapping" and kind(v) ~= "free" then mismatch(path, v, d, source) end
      merge(dst[k], v, d, path .. ".", source, root)
    else
      dst[k] = check_value(path, v, d, source)
    end
  end
end

-- Applies one `a.b.c=text` override.
local function apply_override(cfg, defaults, key, text)
  local source = "command line " .. key .. "=" .. text
  local parts = {}
  for p in (key .. "."):gmatch("([^.]*)%.") do
    if p == "" then error(string.format("config: malformed key '%s' (%s)", key, source), 0) end
    parts[#parts + 1] = p
  end
  local c, d, path = cfg, defaults, ""
  for i = 1, #parts - 1 do
    local p = parts[i]
    path = path .. p
    if kind(d) == "free" then
      if type(c[p]) ~= "table" then c[p] = {} end
      c, d = c[p], {}
    else
      local sub = d[p]
      if sub == nil then unknown_key(defaults, key, source) end
      if kind(sub) ~= "mapping" and kind(sub) ~= "free" then
        error(string.format("config: '%s' is %s, not a section with keys (%s)", path, EXPECTED[kind(sub)], source), 0)
      end
      c, d = c[p], sub
    end
    path = path .. "."
  end
  local last = parts[#parts]
  path = path .. last
  if kind(d) == "free" then
    c[last] = user_text(core.yaml_parse, text, source)
    return
  end
  local dflt = d[last]
  if dflt == nil then unknown_key(defaults, key, source) end
  local kd = kind(dflt)
  if kd == "string" then
    c[last] = text
  elseif kd == "mapping" then
    local v = user_text(core.yaml_parse, text, source)
    if kind(v) ~= "mapping" then mismatch(path, v, dflt, source) end
    merge(c[last], v, dflt, path .. ".", source, defaults)
  elseif kd == "list" or kd == "free" then
    c[last] = check_value(path, user_text(core.yaml_parse, text, source), dflt, source)
  else
    c[last] = check_value(path, core.yaml_scalar(text), dflt, source)
  end
end

-- Removes the config path and the overrides from args; returns the path
-- (or nil) and the overrides as {key, text} pairs in order.
local function consume_args(args)
  local kept, overrides, path = {}, {}, nil
  local i, n = 1, #args
  while i <= n do
    local a = args[i]
    if a == "--" then
      for j = i + 1, n do kept[#kept + 1] = args[j] end
      break
    elseif a == "--config" then
      path = args[i + 1]
      if path == nil then error("config: --config needs a file name after it", 0) end
      i = i + 1
    elseif type(a) == "string" and a:match("^%-%-config=") then
      path = a:sub(10)
    else
      local k, v = nil, nil
      if type(a) == "string" then k, v = a:match("^([%a_][%w_%-%.]*)=(.*)$") end
      if k == "config" then path = v
      elseif k then overrides[#overrides + 1] = { k, v }
      else kept[#kept + 1] = a end
    end
    i = i + 1
  end
  for j = n, 1, -1 do args[j] = nil end
  for j, a in ipairs(kept) do args[j] = a end
  if path == "" then error("config: the config file name is empty", 0) end
  return path, overrides
end

local function check_defaults(defaults, prefix)
  for k, v in pairs(defaults) do
    local path = prefix .. tostring(k)
    if type(k) ~= "string" then
      error(string.format("config: default key %s must be a name, not a %s", path, type(k)), 3)
    end
    local kd = kind(v)
    if kd == "mixed" then error("config: default " .. path .. " mixes list items and named keys", 3) end
    if kd == "function" or kd == "userdata" or kd == "thread" then
      error(string.format("config: default %s is a %s; a configuration holds plain values", path, kd), 3)
    end
    if kd == "mapping" then check_defaults(v, path .. ".") end
  end
end

local OPTS = { arg = true, print = true, save = true, run_dir = true, run_name = true, runs_root = true }

--- Resolves the configuration; see the top of this file.
function M.resolve(defaults, opts)
  if type(defaults) ~= "table" then error("config: expected a table of defaults, got " .. type(defaults), 2) end
  opts = opts or {}
  for k in pairs(opts) do
    if not OPTS[k] then
      error("config: unknown option '" .. tostring(k) .. "' (valid: arg, print, save, run_dir, run_name, runs_root)", 2)
    end
  end
  check_defaults(defaults, "")
  local args = opts.arg or _G.arg or {}
  local path, overrides = consume_args(args)
  path = path or os.getenv("DDPLUA_CONFIG")
  if path == "" then path = nil end

  local cfg = deep_copy(defaults)
  local sources = { "defaults" }
  if path then
    local doc = user_text(core.yaml_load, path)
    if doc ~= nil then
      if kind(doc) ~= "mapping" and kind(doc) ~= "free" then
        error(string.format("config: %s must hold a mapping of keys, got %s", path, describe(doc)), 0)
      end
      local own = {}
      for k, v in pairs(doc) do
        if not LAUNCHER_KEYS[k] then own[k] = v end
      end
      merge(cfg, own, defaults, "", path, defaults)
    end
    sources[#sources + 1] = path
  end
  for _, o in ipairs(overrides) do apply_override(cfg, defaults, o[1], o[2]) end
  if #overrides > 0 then sources[#sources + 1] = "command line" end

  local text = core.yaml_dump(cfg, "config")
  if opts.print ~= false then
    rank.print("config (" .. table.concat(sources, " < ") .. "):\n  " .. text:gsub("\n$", ""):gsub("\n", "\n  "))
  end
  local dir
  if opts.save ~= false then
    local metrics = require "ddplua.metrics"
    local name = opts.run_name
    if name == nil and type(cfg.run_name) == "string" and cfg.run_name ~= "" then name = cfg.run_name end
    local where = opts.run_dir
    if where == nil and type(cfg.run_dir) == "string" and cfg.run_dir ~= "" then where = cfg.run_dir end
    dir = metrics.run_dir { dir = where, name = name, root = opts.runs_root }
    if rank.is_main() then metrics.write_file(dir .. "/config.yaml", text) end
    require("ddplua.resume").note_run_dir(dir) -- the ddplua host logs restarts there
  end
  return cfg, dir
end

M.describe = describe
return M
