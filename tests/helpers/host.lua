-- Helpers for specs that run the ddplua host as a program: shell commands
-- with their output and exit code, temporary files, free ports.
local H = {}

local function abspath(p)
  if p:sub(1, 1) == "/" then return p end
  local cwd = io.popen("pwd"):read("l")
  return cwd .. "/" .. p:gsub("^%./", "")
end

H.bin = abspath(os.getenv("DDPLUA_BIN") or "./build/bin/ddplua")
H.abspath = abspath

--- Quotes s for /bin/sh.
function H.q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

--- Escapes s for use inside a Lua pattern.
function H.pat(s) return (s:gsub("[%^%$%(%)%%%.%[%]%*%+%-%?]", "%%%0")) end

function H.read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

function H.write(path, text)
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
end

--- Runs cmd with /bin/sh; returns {out=, err=, code=} (code 128+N when a
--- signal N ended the shell).
function H.sh(cmd)
  local out, err = os.tmpname(), os.tmpname()
  local _, how, code = os.execute("(" .. cmd .. ") >" .. out .. " 2>" .. err)
  local r = { out = H.read(out) or "", err = H.read(err) or "", code = how == "exit" and code or 128 + code }
  os.remove(out)
  os.remove(err)
  return r
end

function H.tmpdir()
  return (io.popen("mktemp -d /tmp/ddplua-host-spec.XXXXXX"):read("l"))
end

math.randomseed(os.time(), tonumber(tostring({}):match("0x(%x+)"), 16) or 0)

--- A unique number that also works as `sleep`'s argument (seconds), so a
--- child process of a script can be found with pgrep -f.
function H.marker() return ("37.%09d"):format(math.random(0, 999999999)) end

--- A TCP port nothing listens on now (20000-32767: below the ephemeral range).
function H.free_port()
  for _ = 1, 50 do
    local p = math.random(20000, 32767)
    local busy = io.popen("ss -Htln 'sport = :" .. p .. "' 2>/dev/null"):read("a")
    if busy == "" then return p end
  end
  error("no free port found")
end

return H
