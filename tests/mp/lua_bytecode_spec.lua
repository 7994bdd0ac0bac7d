-- The Lua library loaded as bytecode (src/host/chunk_cache.c, tools/lua_bytecode.lua): the build's
-- build/bin/lua_bytecode.bin serves every module of the library; a file edited since (same size included) is
-- parsed, never its stale bytecode loaded; errors in bytecode keep the source's file and line; a damaged,
-- truncated, foreign or empty bytecode file is ignored whole and the library parsed; DDPLUA_LUA_BYTECODE=off
-- reads none.
-- Run: DDPLUA_BIN=./build/bin/ddplua busted --cpath="./build/lib/?.so" tests/mp/lua_bytecode_spec.lua
local H = require "helpers.host"

local BIN, q, sh, write = H.bin, H.q, H.sh, H.write
local BUNDLE = BIN:gsub("[^/]*$", "") .. "lua_bytecode.bin"
local TOOL = H.abspath("tools/lua_bytecode.lua")

-- Runs a script under the host; returns its stdout (failing on a non-zero exit).
local function run(dir, script, env)
  write(dir .. "/s.lua", script)
  local r = sh(("cd %s && %s %s s.lua"):format(q(dir), env or "", q(BIN)))
  assert.are.equal(0, r.code, r.err)
  return r.out
end

local STATS = 'local s = require("ddplua.host").chunk_stats()\n' ..
  'print(("STATS %d %d %d"):format(s.bundled, s.from_bytecode, s.parsed))\n'
local function stats(out)
  local b, f, p = out:match("STATS (%d+) (%d+) (%d+)")
  assert.is_not_nil(b, out)
  return tonumber(b), tonumber(f), tonumber(p)
end

describe("the Lua library as bytecode", function()
  local dir
  before_each(function() dir = H.tmpdir() end)
  after_each(function() sh("rm -rf " .. q(dir)) end)

  it("serves the whole library from the build's file, and nothing with DDPLUA_LUA_BYTECODE=off", function()
    local script = 'local ddp = require "ddplua"\nlocal _ = ddp.nn.Linear, ddp.optim.SGD, ddp.data.DataLoader\n' ..
      'print("SUM", ddp.tensor({1, 2, 3}):sum():item())\n' .. STATS
    local out = run(dir, script)
    local bundled, from_bytecode, parsed = stats(out)
    assert.is_true(bundled >= 60, "bundled " .. bundled)
    assert.is_true(from_bytecode >= 40, "from bytecode " .. from_bytecode)
    assert.are.equal(0, parsed)
    assert.matches("SUM\t6", out)
    local off = run(dir, script, "DDPLUA_LUA_BYTECODE=off")
    bundled, from_bytecode, parsed = stats(off)
    assert.are.same({ 0, 0 }, { bundled, from_bytecode })
    assert.is_true(parsed >= 40)
    assert.matches("SUM\t6", off)
  end)

  it("parses a file edited since (same size too), and keeps the source's lines in errors", function()
    sh("mkdir -p " .. q(dir .. "/lib"))
    write(dir .. "/lib/mymod.lua", "return { v = 1,\n  boom = function() error('boom') end }\n")
    write(dir .. "/lib/other.lua", "return { w = 7 }\n")
    local r = sh(("%s %s %s %s"):format(q(BIN), q(TOOL), q(dir .. "/b.bin"), q(dir .. "/lib")))
    assert.are.equal(0, r.code, r.err)
    local script = ('package.path = %q .. "/lib/?.lua;" .. package.path\n'):format(dir) ..
      'local m, o = require "mymod", require "other"\n' ..
      'print("V", m.v, o.w)\nprint("ERR", select(2, pcall(m.boom)))\n' .. STATS
    local env = "DDPLUA_LUA_BYTECODE=" .. q(dir .. "/b.bin")
    local out = run(dir, script, env)
    local bundled, from_bytecode, parsed = stats(out)
    assert.are.equal(2, bundled)
    assert.are.equal(2, from_bytecode) -- the test's two modules (the script loads nothing else)
    assert.are.equal(0, parsed)
    assert.matches("V\t1\t7", out)
    assert.matches("ERR\t" .. H.pat(dir) .. "/lib/mymod%.lua:2: boom", out)
    write(dir .. "/lib/mymod.lua", "return { v = 2,\n  boom = function() error('boom') end }\n") -- same size
    out = run(dir, script, env)
    bundled, from_bytecode, parsed = stats(out)
    assert.are.same({ 1, 1 }, { from_bytecode, parsed }) -- other.lua from bytecode, the edited mymod.lua parsed
    assert.matches("V\t2\t7", out)
    assert.matches("ERR\t" .. H.pat(dir) .. "/lib/mymod%.lua:2: boom", out)
  end)

  it("ignores a damaged, truncated, foreign or empty bytecode file whole", function()
    local good = assert(H.read(BUNDLE), "no " .. BUNDLE .. ": the build makes it")
    local mid = #good // 2
    local flipped = good:sub(1, mid - 1) .. string.char((good:byte(mid) + 1) % 256) .. good:sub(mid + 1)
    -- a valid checksum over entries whose lengths run past the end
    local junk = string.pack("<I4s4i8I4", 1, "/x.lua", 0, 1000000)
    local function fnv(s)
      local h = -3750763034362895579
      for i = 1, #s do h = (h ~ s:byte(i)) * 1099511628211 end
      return h
    end
    local cases = {
      flipped = flipped,
      truncated = good:sub(1, #good - 100),
      header = good:sub(1, 10),
      empty = "",
      foreign = string.rep("\27Lua", 1000),
      overrun = "DDPLUABC" .. string.pack("<i8", fnv(junk)) .. junk,
    }
    local script = 'local ddp = require "ddplua"\nprint("SUM", ddp.tensor({1, 2}):sum():item())\n' .. STATS
    for name, bytes in pairs(cases) do
      write(dir .. "/bad.bin", bytes)
      local out = run(dir, script, "DDPLUA_LUA_BYTECODE=" .. q(dir .. "/bad.bin"))
      local bundled, from_bytecode, parsed = stats(out)
      assert.are.same({ 0, 0 }, { bundled, from_bytecode }, name)
      assert.is_true(parsed > 0, name)
      assert.matches("SUM\t3", out, nil, nil, name)
    end
  end)
end)
