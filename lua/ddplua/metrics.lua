-- The run directory and its metrics log.
--
--   runs/<name or timestamp>/      one directory per run (configurable)
--     config.yaml                  the resolved configuration (ddp.config)
--     metrics.jsonl                one JSON object per line, flushed as written:
--                                    {"kind":"step","step":120,"epoch":1,"time":3.2,"loss":0.41,...}
--                                    {"kind":"epoch","epoch":1,"time":30.5,"val_acc":0.87,...}
--     curves.png                   `ddplua plot runs/<name>` draws it
--
-- The directory is chosen once per process: the first call of run_dir (by
-- ddp.config, or ddp.metrics.open) decides, later calls without options get
-- the same one. Choice, first that applies: {dir=}, the DDPLUA_RUN_DIR
-- environment variable, <root or "runs">/<name>, <root or "runs">/<date-time>
-- (with -2, -3, ... appended if that exists). Only rank 0 creates it and
-- writes into it; with a date-time name the other ranks cannot know rank 0's
-- exact choice, so name the run (or set DDPLUA_RUN_DIR) when every rank
-- needs the path, for instance to load a checkpoint from it.
local core = require "ddplua.core"
local rank = require "ddplua.rank"

local M = {}

local current_dir

local RUN_OPTS = { dir = true, name = true, root = true }

local function check_opts(opts, valid, what)
  for k in pairs(opts) do
    if not valid[k] then
      local names = {}
      for n in pairs(valid) do names[#names + 1] = n end
      table.sort(names)
      error(string.format("%s: unknown option '%s' (valid: %s)", what, tostring(k), table.concat(names, ", ")), 3)
    end
  end
end

--- The run directory (see above); creates it on rank 0.
function M.run_dir(opts)
  opts = opts or {}
  check_opts(opts, RUN_OPTS, "run_dir")
  if current_dir and opts.dir == nil and opts.name == nil and opts.root == nil then return current_dir end
  local dir = opts.dir
  if dir == nil then
    local env = os.getenv("DDPLUA_RUN_DIR")
    if env and env ~= "" then dir = env end
  end
  if dir == nil then
    local root = opts.root or "runs"
    if opts.name ~= nil then
      if type(opts.name) ~= "string" or opts.name == "" or opts.name:find("/") then
        error("run_dir: the run name must be a non-empty string without '/', got " .. tostring(opts.name), 2)
      end
      dir = root .. "/" .. opts.name
    else
      local base = root .. "/" .. os.date("%Y%m%d-%H%M%S")
      dir = base
      local k = 2
      while rank.is_main() and core.file_type(dir) ~= nil do
        dir = base .. "-" .. k
        k = k + 1
      end
    end
  end
  if rank.is_main() then core.mkdir(dir) end
  current_dir = dir
  return dir
end

--- Forgets the chosen run directory (tests; a script that starts a second run).
function M.reset_run_dir() current_dir = nil end

--- Writes text to path through a temporary file and a rename, so readers
--- never see half a file.
function M.write_file(path, text)
  local tmp = path .. ".tmp." .. core.getpid()
  local f, err = io.open(tmp, "wb")
  if not f then error("cannot write " .. path .. ": " .. tostring(err), 2) end
  local ok, werr = f:write(text)
  f:close()
  if not ok then
    os.remove(tmp)
    error("cannot write " .. path .. ": " .. tostring(werr), 2)
  end
  local renamed, rerr = os.rename(tmp, path)
  if not renamed then
    os.remove(tmp)
    error("cannot write " .. path .. ": " .. tostring(rerr), 2)
  end
end

-- The logger ---------------------------------------------------------------

local Logger = {}
Logger.__index = Logger

local OPEN_OPTS = { dir = true, name = true, root = true, config = true, file = true }

--- ddp.metrics.open{dir=, name=, root=, config=, file="metrics.jsonl"}:
--- a logger appending to <run dir>/metrics.jsonl on rank 0 (a no-op on the
--- other ranks). With config= it also writes config.yaml.
function M.open(opts)
  opts = opts or {}
  check_opts(opts, OPEN_OPTS, "metrics.open")
  local dir = M.run_dir { dir = opts.dir, name = opts.name, root = opts.root }
  local self = setmetatable({ dir = dir, main = rank.is_main(), t0 = core.clock(), step = 0, epoch = 0 }, Logger)
  if self.main then
    self.path = dir .. "/" .. (opts.file or "metrics.jsonl")
    local f, err = io.open(self.path, "a")
    if not f then error("metrics.open: cannot open " .. self.path .. ": " .. tostring(err), 2) end
    self.file = f
    if opts.config ~= nil then M.write_file(dir .. "/config.yaml", core.yaml_dump(opts.config, "config")) end
  end
  return self
end

local function plain_value(key, v)
  if core.is_tensor(v) then
    if v:numel() ~= 1 then
      error(string.format("metrics: '%s' is a tensor of %d elements; log one number per key", key, v:numel()), 4)
    end
    return v:item()
  end
  local t = type(v)
  if t == "number" or t == "string" or t == "boolean" then return v end
  error(string.format("metrics: '%s' is a %s; log numbers, strings or booleans", key, t), 4)
end

local function write_record(self, kind, rec, counter)
  if type(rec) ~= "table" then error("metrics: expected a table of values, got " .. type(rec), 3) end
  if not self.main then return end
  if not self.file then error("metrics: the logger of " .. self.path .. " is closed", 3) end
  local out = { kind = kind, time = math.floor((core.clock() - self.t0) * 1e6 + 0.5) / 1e6 }
  for k, v in pairs(rec) do
    if type(k) ~= "string" then error("metrics: record keys must be names, got a " .. type(k), 3) end
    if k == "kind" or k == "time" then error("metrics: '" .. k .. "' is written by the logger itself", 3) end
    out[k] = plain_value(k, v)
  end
  if out[counter] == nil then out[counter] = self[counter] + 1 end
  if math.type(out[counter]) ~= "integer" then error("metrics: '" .. counter .. "' must be an integer", 3) end
  self[counter] = out[counter]
  self.file:write(core.json_encode(out, "metrics"), "\n")
  self.file:flush()
end

--- log{step=, epoch=, loss=, acc=, ...}: a per-step record (step counts up
--- by itself when left out).
function Logger:log(rec) write_record(self, "step", rec, "step") end

--- log_epoch{epoch=, loss=, acc=, val_loss=, ...}: a per-epoch record
--- (epoch counts up by itself when left out).
function Logger:log_epoch(rec) write_record(self, "epoch", rec, "epoch") end

function Logger:close()
  if self.file then
    self.file:close()
    self.file = nil
  end
end
Logger.__close = Logger.close
Logger.__gc = Logger.close

return M
