-- ddp.config(defaults [, opts]): the run configuration.
--
-- Precedence, lowest first:
--   1. `defaults`, the table the script passes;
--   2. the YAML file: `--config path`, `--config=path` or `config=path` among
--      the script's arguments, else the file named by DDPLUA_CONFIG (the host
--      sets it from its own `--config`). Its `ddplua:` and `script:` sections
--      belong to the launcher and are left out;
--   3. command-line overrides, in order: `key=value`, `--key value`,
--      `--key=value` (argparse's habit; `--batch-size` finds batch_size, and
--      a boolean key alone, `--amp`, is true), dotted paths `a.b.c=value`.
--      An unknown `--key` is an error listing the keys; `--help` (or `-h`)
--      prints every key with its type, its default and its value with where
--      that came from (defaults, the YAML file, the command line), then the
--      process exits (status 0).
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
local function merge(dst, src, defaults, prefix, source, root, origin)
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
      merge(dst[k], v, d, path .. ".", source, root, origin)
    else
      dst[k] = check_value(path, v, d, source)
    end
    if origin and not free then origin[path] = source end
  end
end

-- Applies one `a.b.c=text` override; origin[path] records where each
-- leaf's value came from.
local function apply_override(cfg, defaults, key, text, source, origin)
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
  origin[path] = source
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
    merge(c[last], v, dflt, path .. ".", source, defaults, origin)
  elseif kd == "list" or kd == "free" then
    c[last] = check_value(path, user_text(core.yaml_parse, text, source), dflt, source)
  else
    c[last] = check_value(path, core.yaml_scalar(text), dflt, source)
  end
end

-- The default a dotted key names (nil when none), for `--key`'s value.
local function default_at(defaults, key)
  local d = defaults
  for p in (key .. "."):gmatch("([^.]*)%.") do
    if type(d) ~= "table" or kind(d) == "free" then return nil end
    d = d[p]
  end
  return d
end

-- `--batch-size` is batch_size when only the latter is a key (argparse).
local function flag_key(defaults, name)
  if default_at(defaults, name) == nil and name:find("-", 1, true) then
    local u = name:gsub("%-", "_")
    if default_at(defaults, u) ~= nil then return u end
  end
  return name
end

local BOOL_TEXT = { ["true"] = true, ["false"] = true }

-- Removes the config path, the overrides and --help from args; returns the
-- path (or nil), the overrides as {key, text, source} in order, and
-- whether help was asked for.
local function consume_args(args, defaults)
  local kept, overrides, path, help = {}, {}, nil, false
  local i, n = 1, #args
  while i <= n do
    local a = args[i]
    if a == "--" then
      for j = i + 1, n do kept[#kept + 1] = args[j] end
      break
    elseif a == "--help" or a == "-h" then
      help = true
    elseif a == "--config" then
      path = args[i + 1]
      if path == nil then error("config: --config needs a file name after it", 0) end
      i = i + 1
    elseif type(a) == "string" and a:match("^%-%-config=") then
      path = a:sub(10)
    elseif type(a) == "string" and a:match("^%-%-[%a_]") then
      local name, v = a:match("^%-%-([%a_][%w_%-%.]*)=(.*)$")
      local key = flag_key(defaults, name or a:match("^%-%-([%a_][%w_%-%.]*)$") or a:sub(3))
      if not key:match("^[%a_][%w_%-%.]*$") then
        error(string.format("config: malformed option '%s' (expected --key value, --key=value or key=value)", a), 0)
      end
      local source = "command line " .. a
      if not name then
        local d, nxt = default_at(defaults, key), args[i + 1]
        if type(d) == "boolean" and (nxt == nil or not BOOL_TEXT[nxt]) then
          v = "true" -- a boolean flag alone, argparse's store_true
        elseif d == nil and (nxt == nil or nxt:match("^%-%-")) then
          v = "" -- an unknown key: apply_override says so, listing the keys
        elseif nxt == nil or nxt:match("^%-%-") then
          error(string.format("config: %s needs a value after it (--%s value or --%s=value)", a, key, key), 0)
        else
          v = nxt
          i = i + 1
          source = source .. " " .. v
        end
      end
      overrides[#overrides + 1] = { key, v, source }
    else
      local k, v = nil, nil
      if type(a) == "string" then k, v = a:match("^([%a_][%w_%-%.]*)=(.*)$") end
      if k == "config" then path = v
      elseif k then overrides[#overrides + 1] = { k, v, "command line " .. k .. "=" .. v }
      else kept[#kept + 1] = a end
    end
    i = i + 1
  end
  for j = n, 1, -1 do args[j] = nil end
  for j, a in ipairs(kept) do args[j] = a end
  if path == "" then error("config: the config file name is empty", 0) end
  return path, overrides, help
end

-- Every leaf key (dotted) with its type, default, value and origin.
local function help_rows(defaults, cfg, origin, prefix, out)
  local keys = {}
  for k in pairs(defaults) do keys[#keys + 1] = k end
  table.sort(keys)
  for _, k in ipairs(keys) do
    local d, path = defaults[k], prefix .. k
    if kind(d) == "mapping" then
      help_rows(d, cfg[k] or {}, origin, path .. ".", out)
    else
      local kd = kind(d)
      out[#out + 1] = { path .. (kd == "free" and ".*" or ""), kd == "free" and "table" or kd, describe(d),
        describe(cfg[k]), origin[path] or "default" }
    end
  end
  return out
end

local function help_text(defaults, cfg, origin, path)
  local rows = help_rows(defaults, cfg, origin, "", {})
  local script = _G.arg and _G.arg[0] or "script.lua"
  local lines = {
    string.format("usage: ddplua %s [--key value | --key=value | key=value ...] [--config run.yaml] [--help]", script),
    "",
    "keys (type, default, value and where it comes from" .. (path and ("; YAML: " .. path) or "") .. "):",
  }
  local w = { 3, 4, 7 }
  for _, r in ipairs(rows) do
    for c = 1, 3 do w[c] = math.max(w[c], #r[c]) end
  end
  local fmt = "  %-" .. w[1] .. "s  %-" .. w[2] .. "s  default %-" .. w[3] .. "s  value %s (%s)"
  for _, r in ipairs(rows) do lines[#lines + 1] = string.format(fmt, r[1], r[2], r[3], r[4], r[5]) end
  if #rows == 0 then lines[#lines + 1] = "  (none: the defaults are empty)" end
  return table.concat(lines, "\n")
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
  local path, overrides, help = consume_args(args, defaults)
  path = path or os.getenv("DDPLUA_CONFIG")
  if path == "" then path = nil end

  local cfg = deep_copy(defaults)
  local sources = { "defaults" }
  local origin = {} -- dotted leaf path -> where its value came from (--help)
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
      merge(cfg, own, defaults, "", path, defaults, origin)
    end
    sources[#sources + 1] = path
  end
  for _, o in ipairs(overrides) do apply_override(cfg, defaults, o[1], o[2], o[3], origin) end
  if #overrides > 0 then sources[#sources + 1] = "command line" end
  if help then
    rank.print(help_text(defaults, cfg, origin, path))
    io.stdout:flush()
    os.exit(0)
  end

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
  end
  return cfg, dir
end

M.describe = describe
return M
