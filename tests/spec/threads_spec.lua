-- Threads (src/backends/cpu/sgemm.c, cpu_parallel.c): by default a process
-- uses its cores shared by the ranks on its node (cores / LOCAL_WORLD_SIZE,
-- at least 1: a single process takes every core, ranks that fill the cores
-- one each), as PyTorch does; ddp.set_num_threads overrides it. Results do
-- not depend on the count: the parallel loops split work in disjoint ranges
-- and each GEMM element is computed by one thread.
local ddp = require "ddplua"
local io_util = require "helpers.io_util"

local function cores()
  local p = io.popen("nproc")
  local n = tonumber(p:read("l"))
  p:close()
  return n
end

local function fresh(chunk, env)
  local path = os.tmpname()
  io_util.write(path, string.format("package.path = %q\npackage.cpath = %q\n", package.path, package.cpath) .. chunk)
  local p = assert(io.popen((env or "") .. " lua5.4 " .. path .. " 2>&1"))
  local out = p:read("a")
  local ok = p:close()
  os.remove(path)
  return ok == true, out
end

describe("threads", function()
  local n = cores()

  it("default to the cores shared by the node's ranks", function()
    for _, ranks in ipairs({ 1, 2, 3, 64 }) do
      local ok, out = fresh('print("threads", require("ddplua").get_num_threads())',
        "env LOCAL_WORLD_SIZE=" .. ranks)
      assert(ok, out)
      local want = math.max(1, n // ranks)
      assert.equal(want, tonumber(out:match("threads%s+(%d+)")), ranks .. " ranks on " .. n .. " cores")
    end
    local ok, out = fresh('print("threads", require("ddplua").get_num_threads())', "env -u LOCAL_WORLD_SIZE")
    assert(ok, out)
    assert.equal(n, tonumber(out:match("threads%s+(%d+)")), "one process")
  end)

  it("in each rank of dist.spawn: the spawned ranks' share, not the parent's", function()
    local ok, out = fresh([[
local ddp = require "ddplua"
local parent = ddp.get_num_threads()
ddp.matmul(ddp.randn(300, 300), ddp.randn(300, 300)) -- the parent's pool started
ddp.distributed.spawn(function(rank)
  print("rank", rank, ddp.get_num_threads())
end, 2)
print("parent", parent)
]], "env -u LOCAL_WORLD_SIZE")
    assert(ok, out)
    assert.equal(n, tonumber(out:match("parent%s+(%d+)")))
    for r = 0, 1 do
      assert.equal(math.max(1, n // 2), tonumber(out:match("rank%s+" .. r .. "%s+(%d+)")), out)
    end
  end)

  it("a plain lua5.4 exits cleanly while the pool's workers still spin", function()
    -- lua_close dlcloses the module; with the workers spinning in its code (a 1 s spin) an unmapped module crashed
    -- 9 runs in 10 before it was linked -z nodelete
    for _ = 1, 5 do
      local ok, out = fresh([[
local ddp = require "ddplua"
ddp.set_num_threads(2)
ddp.matmul(ddp.randn(300, 300), ddp.randn(300, 300))
print("done")
]], "env DDPLUA_SPIN_US=1000000")
      assert(ok, "the interpreter failed at exit: " .. out)
      assert.truthy(out:find("done", 1, true), out)
    end
  end)

  it("set_num_threads overrides the default, and results do not depend on it", function()
    local prev = ddp.get_num_threads()
    ddp.manual_seed(1)
    local a, b = ddp.randn(257, 300), ddp.randn(300, 129)
    local x = ddp.randn(1 << 18)
    local function run()
      return { ddp.matmul(a, b), ddp.gelu(x), ddp.softmax(a, 2), x:sum(), ddp.layer_norm(a, 300) }
    end
    ddp.set_num_threads(1)
    assert.equal(1, ddp.get_num_threads())
    local one = run()
    ddp.set_num_threads(2)
    assert.equal(2, ddp.get_num_threads())
    local two = run()
    for i = 1, #one do
      assert.equal(one[i]:numel(), one[i]:eq(two[i]):sum():item(), "result " .. i .. " bitwise the same")
    end
    ddp.set_num_threads(prev)
    assert.is_false(pcall(ddp.set_num_threads, 0))
  end)
  it("set_num_threads loads no BLAS; the first float64 matmul starts OpenBLAS with that count", function()
    -- OpenBLAS starts its workers as it loads (one per core); loaded by set_num_threads they idled, spinning at first
    local ok, out = fresh([[
local ddp = require "ddplua"
local function status(k) return io.open("/proc/self/status"):read("a"):match(k .. ":%s*(%d+)") end
local function blas() return io.open("/proc/self/maps"):read("a"):find("openblas", 1, true) ~= nil end
local threads0 = status("Threads")
ddp.set_num_threads(1)
print("after set", blas(), os.getenv("OPENBLAS_NUM_THREADS"))
local a = ddp.ones(64, 64, { dtype = "float64" })
print("matmul", a:matmul(a):sum():item(), blas(), os.getenv("OPENBLAS_NUM_THREADS"), status("Threads") == threads0,
  ddp.get_num_threads())
]], "env -u OPENBLAS_NUM_THREADS -u LOCAL_WORLD_SIZE")
    assert(ok, out)
    assert.truthy(out:find("after set\tfalse\tnil\n", 1, true), out)
    assert.truthy(out:find("matmul\t262144.0\ttrue\tnil\ttrue\t1\n", 1, true), out)
  end)
end)
