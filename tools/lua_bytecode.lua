-- Compiles the ddplua Lua library to bytecode for the host to load instead
-- of parsing it at every start (src/host/chunk_cache.c reads the file):
--
--   ddplua tools/lua_bytecode.lua OUT [DIR]
--
-- DIR (default: the library directory on this host's package.path) is
-- searched for *.lua files; each is keyed by DIR/<its path under DIR>, the
-- string package.searchpath gives for it, and stored with the FNV-1a hash
-- of its bytes and its bytecode (string.dump with debug information, so
-- errors keep the source's lines). The host uses an entry only while the
-- file still has those bytes. The build runs this after linking the host
-- (CMakeLists.txt: build/bin/lua_bytecode.bin); OUT is written to a
-- temporary file and renamed, never left half-written.
--
-- Format (little-endian): "DDPLUABC" | u64 FNV-1a of everything after this
-- field | u32 entries | per entry: u32 path length, path, u64 source hash,
-- u32 bytecode length, bytecode.
local out, dir = arg[1], arg[2]
if not out then error("usage: ddplua tools/lua_bytecode.lua OUT [DIR]", 0) end
if not dir then
  dir = package.path:match("^([^;]*)/%?%.lua;")
  if not dir then error("lua_bytecode.lua: no library directory at the start of package.path " .. package.path, 0) end
end

local function fnv1a(s)
  local h = -3750763034362895579 -- 14695981039346656037 as a signed 64-bit integer
  for i = 1, #s do h = (h ~ s:byte(i)) * 1099511628211 end -- wraps mod 2^64, as C's uint64_t
  return h
end

local function q(s) return "'" .. s:gsub("'", "'\\''") .. "'" end
local files = {}
local list = assert(io.popen("cd " .. q(dir) .. " && find . -name '*.lua' -type f | LC_ALL=C sort"))
for rel in list:lines() do files[#files + 1] = rel:gsub("^%./", "") end
list:close()

local parts = {}
for _, rel in ipairs(files) do
  local path = dir .. "/" .. rel
  local f = assert(io.open(path, "rb"))
  local src = f:read("a")
  f:close()
  local fn = load(src, "@" .. path, "t") -- a file load() refuses (a '#' first line) is parsed at run time
  if fn then
    local code = string.dump(fn)
    parts[#parts + 1] = string.pack("<s4i8s4", path, fnv1a(src), code)
  end
end
local body = string.pack("<I4", #parts) .. table.concat(parts)
local tmp = out .. ".tmp"
local f = assert(io.open(tmp, "wb"))
assert(f:write("DDPLUABC", string.pack("<i8", fnv1a(body)), body))
assert(f:close())
assert(os.rename(tmp, out))
