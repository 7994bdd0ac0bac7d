-- Who is the main process, for the run helpers (config printing, run
-- directory, metrics, progress, checkpoints). With a process group
-- initialised the group decides; otherwise the launcher's RANK environment
-- variable does; a script run alone is rank 0 of 1.
local M = {}

--- The initialised distributed module, or nil (never loads it: a script
--- that has a process group has already required it).
function M.dist()
  local d = package.loaded["ddplua.distributed"]
  if type(d) == "table" and d.is_initialized and d.is_initialized() then return d end
  return nil
end

local function env_int(name, default)
  local v = os.getenv(name)
  if v == nil or v == "" then return default end
  local n = math.tointeger(tonumber(v))
  if n == nil or n < 0 then
    error(string.format("environment variable %s=%q is not a non-negative integer", name, v), 3)
  end
  return n
end

function M.rank()
  local d = M.dist()
  if d then return d.get_rank() end
  return env_int("RANK", 0)
end

function M.world_size()
  local d = M.dist()
  if d then return d.get_world_size() end
  return env_int("WORLD_SIZE", 1)
end

function M.is_main() return M.rank() == 0 end

--- print on rank 0 only.
function M.print(...)
  if M.is_main() then print(...) end
end

return M
