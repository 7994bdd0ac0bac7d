-- The CPU allocator asks for transparent huge pages only with
-- DDPLUA_HUGEPAGES=1 (src/tensor/alloc_cpu.c: on a VM that reports free
-- memory to its host, a huge page populated after a pause costs the host's
-- fault, and a first step after 6 s idle took 0.66 s instead of 0.08 s).
-- Each case runs in a fresh process, which reads the variable once, and
-- counts the AnonHugePages of the process (/proc/self/smaps_rollup) before
-- and after a 64 MiB tensor, whose block comes from mmap.
local io_util = require "helpers.io_util"

local function thp_mode()
  local f = io.open("/sys/kernel/mm/transparent_hugepage/enabled")
  if not f then return "absent" end
  local s = f:read("a")
  f:close()
  return s:match("%[(%w+)%]") or "absent"
end

-- ASan's runtime (make test-asan preloads it) turns the mmap path off: blocks come from the heap it checks
local under_asan = os.getenv("DDPLUA_ASAN") == "1" or
  (os.getenv("LD_PRELOAD") or ""):find("asan", 1, true) ~= nil

local CHILD = [[
local ddp = require "ddplua"
local function huge_kib()
  local f = assert(io.open("/proc/self/smaps_rollup"))
  local s = f:read("a")
  f:close()
  return tonumber(s:match("AnonHugePages:%s*(%d+)")) or 0
end
local before = huge_kib()
local t = ddp.ones(16 << 20) -- 64 MiB of float32, written everywhere
local after = huge_kib()
assert(t:sum():item() == 16 << 20)
print(string.format("huge_kib_added=%d", after - before))
]]

-- the AnonHugePages (KiB) a 64 MiB tensor added in a fresh process run with `env`
local function huge_added(env)
  local ok, out = io_util.run_lua_fresh(CHILD, env)
  assert(ok, "the child failed:\n" .. out)
  return assert(tonumber(out:match("huge_kib_added=(%-?%d+)")), "no figure in the child's output:\n" .. out)
end

describe("the CPU allocator's huge pages", function()
  local mode = thp_mode()

  it("are not asked for by default", function()
    local added = huge_added("env -u DDPLUA_HUGEPAGES")
    if mode == "always" then -- the kernel's own choice for every mapping; the allocator asked for nothing
      assert.is_true(added >= 0)
    else
      assert.are.equal(0, added)
    end
  end)

  it("are asked for with DDPLUA_HUGEPAGES=1 (where the kernel has them and the mmap path runs)", function()
    local added = huge_added("DDPLUA_HUGEPAGES=1")
    if under_asan or mode == "never" or mode == "absent" then
      assert.are.equal(0, added)
    else
      -- most of the 64 MiB in 2 MiB pages (the kernel may fall back to small pages for a few)
      assert.is_true(added >= 32 * 1024, string.format("only %d KiB of huge pages for a 64 MiB tensor", added))
    end
  end)

  it("stay off for any other value", function()
    local added = huge_added("DDPLUA_HUGEPAGES=yes")
    if mode ~= "always" then assert.are.equal(0, added) end
    assert.is_true(added >= 0)
  end)
end)
