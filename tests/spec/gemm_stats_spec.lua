-- Per-shape GEMM statistics (backends/cpu/sgemm_stats.h): ddp.core.set_gemm_stats,
-- ddp.core.gemm_stats, ddp.core.reset_gemm_stats and DDPLUA_GEMM_STATS=1's table at exit.
local ddp = require "ddplua"
local core = ddp.core
local io_util = require "helpers.io_util"

-- the entry for one shape, or nil
local function find(rows, m, n, k, ta, tb)
  for _, r in ipairs(rows) do
    if r.m == m and r.n == n and r.k == k and r.trans_a == ta and r.trans_b == tb then return r end
  end
end

describe("GEMM stats", function()
  local impl, was_on
  before_each(function()
    impl = ddp.gemm_impl()
    ddp.set_gemm_impl("own")
    was_on = core.set_gemm_stats(true)
    core.reset_gemm_stats()
  end)
  after_each(function()
    core.set_gemm_stats(was_on)
    core.reset_gemm_stats()
    ddp.set_gemm_impl(impl)
  end)

  it("counts each shape's calls and time, with its transposes", function()
    local a, b = ddp.randn(3, 5), ddp.randn(5, 7)
    ddp.matmul(a, b)
    ddp.matmul(a, b)
    local g, x = ddp.randn(9, 6), ddp.randn(9, 4)
    ddp.matmul(g:t(), x) -- g^T x: A stored transposed
    local rows, dropped = core.gemm_stats()
    assert.equal(0, dropped)
    local r = find(rows, 3, 7, 5, false, false)
    assert(r, "no entry for 3 x 7 x 5")
    assert.equal(2, r.calls)
    assert.equal(1, r.batch)
    assert(r.seconds > 0 and r.seconds < 10, "seconds " .. r.seconds)
    local t = find(rows, 6, 4, 9, true, false)
    assert(t, "no entry for the transposed 6 x 4 x 9")
    assert.equal(1, t.calls)
    assert.equal(2, #rows)
    -- largest total first
    assert(rows[1].seconds >= rows[2].seconds)
  end)

  it("counts a batched product once per call with its batch", function()
    ddp.matmul(ddp.randn(4, 3, 8), ddp.randn(4, 8, 2))
    local r = find(core.gemm_stats(), 3, 2, 8, false, false)
    assert(r, "no entry for the batched 3 x 2 x 8")
    assert.equal(4, r.batch)
    assert.equal(1, r.calls)
  end)

  it("counts only float32 products of ddplua's own GEMM, and nothing while off", function()
    ddp.matmul(ddp.randn(3, 5):to("float64"), ddp.randn(5, 7):to("float64"))
    ddp.set_gemm_impl("blas")
    ddp.matmul(ddp.randn(3, 5), ddp.randn(5, 7))
    ddp.set_gemm_impl("own")
    assert.equal(0, #core.gemm_stats())
    assert.is_true(core.set_gemm_stats(false))
    ddp.matmul(ddp.randn(3, 5), ddp.randn(5, 7))
    assert.equal(0, #core.gemm_stats())
    assert.is_false(core.set_gemm_stats(true))
    ddp.matmul(ddp.randn(3, 5), ddp.randn(5, 7))
    assert.equal(1, #core.gemm_stats())
    core.reset_gemm_stats()
    assert.equal(0, #core.gemm_stats())
  end)

  it("refuses a non-boolean switch", function()
    for _, bad in ipairs({ { "yes" }, {} }) do
      local ok, err = pcall(core.set_gemm_stats, table.unpack(bad))
      assert.is_false(ok)
      assert.matches("set_gemm_stats.*boolean expected", err)
    end
  end)

  it("prints the table at exit under DDPLUA_GEMM_STATS=1, and nothing without it", function()
    local path = os.tmpname()
    io_util.write(path, string.format("package.path = %q\npackage.cpath = %q\n", package.path, package.cpath) .. [[
      local ddp = require "ddplua"
      ddp.set_gemm_impl("own")
      for _ = 1, 3 do ddp.matmul(ddp.randn(11, 13), ddp.randn(13, 17)) end
      print("done")
    ]])
    local function run(env)
      local p = assert(io.popen(env .. " lua5.4 " .. path .. " 2>&1"))
      local out = p:read("a")
      p:close()
      return out
    end
    local on, off = run("DDPLUA_GEMM_STATS=1"), run("DDPLUA_GEMM_STATS=0")
    os.remove(path)
    assert.matches("done", on)
    assert.matches("ddplua GEMM stats %(pid %d+", on)
    -- m n k batch tA tB calls: 11 17 13 1 0 0 3
    assert.matches("\n%s+11%s+17%s+13%s+1%s+0%s+0%s+3%s", on)
    assert.matches("all: [%d.]+ ms", on)
    assert.matches("done", off)
    assert.is_nil(off:find("GEMM stats", 1, true))
  end)
end)
