-- Helpers for the io specs: temporary directories, files, child processes
-- (the ddplua host, /usr/bin/python3) with their output and exit status.
local core = require "ddplua.core"

local M = {}

-- The host the specs spawn: DDPLUA_BIN, else the ASan build's under
-- `make test-asan` (DDPLUA_ASAN=1), else the normal build's.
M.ddplua = os.getenv("DDPLUA_BIN")
if not M.ddplua and os.getenv("DDPLUA_ASAN") == "1" and core.file_type("./build-asan/bin/ddplua") == "file" then
  M.ddplua = "./build-asan/bin/ddplua"
end
M.ddplua = M.ddplua or "./build/bin/ddplua"
M.python = "/usr/bin/python3"

function M.quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

function M.tmpdir()
  local p = os.tmpname()
  os.remove(p)
  core.mkdir(p)
  return p
end

function M.rm_rf(p)
  assert(p:match("^/tmp/"), "refusing to remove " .. p)
  os.execute("rm -rf " .. M.quote(p))
end

function M.read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

function M.write(path, s)
  local f = assert(io.open(path, "wb"))
  f:write(s)
  f:close()
end

--- The fenced code blocks of a markdown text: each {lang=, fence= (the opening line), lines=, code=}; an unclosed
--- block is an error naming `what` and its line.
function M.code_blocks(text, what)
  local blocks, line, open = {}, 0, nil
  for l in (text .. "\n"):gmatch("([^\n]*)\n") do
    line = line + 1
    if open then
      if l:match("^```%s*$") then
        blocks[#blocks + 1] = open
        open = nil
      else
        open.lines[#open.lines + 1] = l
      end
    elseif l:match("^```") then
      open = { lang = l:match("^```(%w*)"), fence = line, lines = {} }
    end
  end
  assert(open == nil, (what or "the text") .. ": a code block opened at line " .. (open and open.fence or 0) ..
    " is not closed")
  for _, b in ipairs(blocks) do b.code = table.concat(b.lines, "\n") end
  return blocks
end

function M.exists(path) return core.file_type(path) ~= nil end

--- Runs a shell command; returns ok (exit status 0), its combined output.
--- (The ASan runtime that `make test-asan` preloads into busted is not
--- passed on to the commands: instrumented binaries carry their own.)
function M.run(cmd)
  local p = io.popen("(unset LD_PRELOAD\n" .. cmd .. "\n) 2>&1")
  local out = p:read("a")
  local ok = p:close()
  return ok == true, out
end

--- Runs a Lua chunk in a fresh lua5.4 with this process's module paths,
--- `env` ("NAME=value ..." or "") before it; returns ok, combined output.
--- (Unlike run, the ASan runtime stays preloaded: the chunk loads this
--- process's instrumented modules.)
function M.run_lua_fresh(chunk, env)
  local path = os.tmpname()
  M.write(path, string.format("package.path = %q\npackage.cpath = %q\n", package.path, package.cpath) .. chunk)
  local p = assert(io.popen(env .. " lua5.4 " .. path .. " 2>&1"))
  local out = p:read("a")
  local ok = p:close()
  os.remove(path)
  return ok == true, out
end

--- Runs `ddplua script args...` with optional environment {NAME=value}.
function M.run_ddplua(script, args, env, cwd)
  local parts = {}
  if cwd then parts[#parts + 1] = "cd " .. M.quote(cwd) .. " &&" end
  parts[#parts + 1] = "env"
  for k, v in pairs(env or {}) do parts[#parts + 1] = k .. "=" .. M.quote(v) end
  local bin = M.ddplua
  if cwd and not bin:match("^/") then bin = M.abspath(bin) end
  parts[#parts + 1] = M.quote(bin)
  parts[#parts + 1] = M.quote(script)
  for _, a in ipairs(args or {}) do parts[#parts + 1] = M.quote(a) end
  return M.run(table.concat(parts, " "))
end

--- Runs `ddplua --nproc nproc script args...` in dir (an example writing runs/ there); its output, or an error
--- with the command and the output when it fails.
function M.run_example(dir, nproc, script, args)
  local parts = { "cd", M.quote(dir), "&&", M.quote(M.abspath(M.ddplua)), "--nproc", tostring(nproc),
    M.quote(M.abspath(script)) }
  for _, a in ipairs(args) do parts[#parts + 1] = M.quote(a) end
  local cmd = table.concat(parts, " ")
  local ok, out = M.run(cmd)
  assert(ok, cmd .. "\n" .. out)
  return out
end

function M.abspath(p)
  if p:match("^/") then return p end
  local pwd = os.getenv("PWD") or io.popen("pwd"):read("l")
  return pwd .. "/" .. p:gsub("^%./", "")
end

--- True when /usr/bin/python3 can import torch.
function M.have_torch()
  if M._torch == nil then M._torch = M.run(M.python .. " -c 'import torch'") end
  return M._torch
end

--- Runs Python source with arguments; returns ok, output.
function M.run_python(dir, source, args)
  local script = dir .. "/script.py"
  M.write(script, source)
  local cmd = { M.python, M.quote(script) }
  for _, a in ipairs(args or {}) do cmd[#cmd + 1] = M.quote(a) end
  return M.run(table.concat(cmd, " "))
end

--- Flattens a nested totable() result.
function M.flat(t)
  local out = {}
  local function walk(v)
    if type(v) == "table" then for _, e in ipairs(v) do walk(e) end else out[#out + 1] = v end
  end
  walk(t)
  return out
end

--- Bytes as lowercase hex.
function M.hex(s) return (s:gsub(".", function(c) return string.format("%02x", c:byte()) end)) end

return M
