-- Errors that point at the user's line.
--
-- A bad argument found deep inside the library (nn.Linear -> Module
-- construction -> an argument check) should be reported at the line of the
-- user's script that made the call, not at the library line that noticed.
-- Lua's error(msg, level) needs the caller's depth, which differs per call
-- path; raise(msg) finds it instead: the first Lua frame above it whose file
-- is not under the directory this file lives in (lua/ddplua/, wherever the
-- library is installed). C frames (pcall, metamethods) are skipped, so
-- `pcall(nn.Linear, 3, "x")` reports the line holding the pcall.
--
--   local E = require "ddplua.errors"
--   E.raise("Linear: out_features must be a positive integer, got x")
--   E.raisef("%s: expected %d, got %s", who, n, v)
--
-- Messages raised with error(msg, 0) (already complete, or rethrown) are
-- not this module's business.
local M = {}

local getinfo, error, format, sub = debug.getinfo, error, string.format, string.sub

-- "@/abs/path/lua/ddplua/" (or "@./lua/ddplua/" for a relative package.path)
local LIB = debug.getinfo(1, "S").source:match("^(@.*/ddplua/)[^/]*$") or "@\0"
local LIB_LEN = #LIB

local function in_library(source) return sub(source, 1, LIB_LEN) == LIB end
M.in_library = in_library

--- The level to pass to error() from the calling function so that the
--- message names the first frame outside the library: 1 is the caller
--- itself, 2 its caller, ...
function M.user_level()
  local level = 1
  while true do
    local info = getinfo(level + 1, "S")
    if info == nil then return 1 end -- only library frames (a tool): the caller's line
    if info.what ~= "C" and not in_library(info.source) then return level end
    level = level + 1
  end
end

--- error(msg) at the user's line.
function M.raise(msg) error(msg, M.user_level()) end

--- raise(string.format(fmt, ...))
function M.raisef(fmt, ...) error(format(fmt, ...), M.user_level()) end

--- "file:line" of the first frame outside the library ("?" when none).
function M.user_site()
  local level = 2
  while true do
    local info = getinfo(level, "Sl")
    if info == nil then return "?" end
    if info.what ~= "C" and not in_library(info.source) then
      return (info.short_src or "?") .. ":" .. tostring(info.currentline)
    end
    level = level + 1
  end
end

return M
