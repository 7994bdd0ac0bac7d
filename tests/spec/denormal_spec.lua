-- Denormal floats are flushed to zero on every thread ddplua computes on
-- (src/backends/cpu/cpu_fpu.h): the Lua thread, the GEMM pool and the
-- parallel loops, the process group's communication thread, the image
-- decode workers and forked DataLoader workers. Each case runs an op whose
-- float32 result is denormal unless flushed (or whose inputs are denormal),
-- once with the default (flushing: the result is 0), once after
-- ddp.set_flush_denormal(false) (the denormal value), and once more after
-- turning it back on, so a thread that does not follow the setting fails.
--
-- Results are read with flushing off: with denormals-are-zero on, reading a
-- denormal float32 into a Lua number gives 0 whatever the tensor holds.
local ddp = require "ddplua"
local io_util = require "helpers.io_util"

local MIN_NORMAL = 1.1754943508222875e-38 -- float32

-- the smallest and largest |value| of t, read with flushing off
local function range(t)
  local was = ddp.core._get_flush_denormal()
  ddp.set_flush_denormal(false)
  local a = t:abs()
  local lo, hi = a:min():item(), a:max():item()
  ddp.set_flush_denormal(was)
  return lo, hi
end

local function assert_flushed(t, what)
  local _, hi = range(t)
  assert(hi == 0, what .. ": expected every element flushed to 0, got a largest |value| of " .. hi)
end

local function assert_denormal(t, what)
  local lo, hi = range(t)
  assert(lo > 0 and hi < MIN_NORMAL, string.format("%s: expected denormal values, got |values| in [%g, %g]", what,
    lo, hi))
end

-- Runs a Lua chunk in a fresh lua5.4 with this process's module paths.
local function fresh(chunk)
  local path = os.tmpname()
  io_util.write(path, string.format("package.path = %q\npackage.cpath = %q\n", package.path, package.cpath) .. chunk)
  local p = assert(io.popen("lua5.4 " .. path .. " 2>&1"))
  local out = p:read("a")
  local ok = p:close()
  os.remove(path)
  return ok == true, out
end

describe("denormals", function()
  after_each(function()
    ddp.set_flush_denormal(true)
    ddp.set_num_threads(1)
  end)

  it("set_flush_denormal returns whether the CPU can flush, and checks its argument", function()
    local arch = io.popen("uname -m"):read("l")
    assert.equal(arch == "x86_64" or arch == "aarch64", ddp.set_flush_denormal(true))
    for _, bad in ipairs({ 1, "yes", {} }) do
      local ok, err = pcall(ddp.set_flush_denormal, bad)
      assert.is_false(ok)
      assert.matches("boolean expected", err)
    end
    assert.is_false(pcall(ddp.set_flush_denormal))
  end)

  it("flushes on the Lua thread by default: results and inputs", function()
    -- a fresh process, where nothing has called set_flush_denormal yet
    local ok, out = fresh([[
local ddp = require "ddplua"
local y = ddp.full({ 4 }, 1e-30) * 1e-10
ddp.set_flush_denormal(false)
print("largest", y:max():item(), (ddp.full({ 4 }, 1e-30) * 1e-10):max():item())
]])
    assert(ok, out)
    local flushed, kept = out:match("largest%s+(%S+)%s+(%S+)")
    assert.equal(0, tonumber(flushed), out)
    assert(tonumber(kept) > 0, out)
    local x = ddp.full({ 1000 }, 1e-30)
    assert_flushed(x * 1e-10, "1e-30 * 1e-10 by default")
    ddp.set_flush_denormal(false)
    local y = x * 1e-10
    assert_denormal(y, "1e-30 * 1e-10 without flushing")
    ddp.set_flush_denormal(true)
    assert_flushed(y * 1e10, "a denormal input read as 0") -- 1e-30 without denormals-are-zero
    assert_flushed(ddp.exp(ddp.full({ 64 }, -88.5)), "exp(-88.5)")
  end)

  it("flushes on the GEMM pool's threads, following the setting at their next task", function()
    ddp.set_num_threads(2)
    -- 256^3 multiply-adds: split over both threads; every product is 1e-42
    local a, b = ddp.full({ 256, 256 }, 1e-21), ddp.full({ 256, 256 }, 1e-21)
    assert_flushed(ddp.matmul(a, b), "matmul with 2 threads")
    ddp.set_flush_denormal(false)
    assert_denormal(ddp.matmul(a, b), "matmul with 2 threads, not flushing")
    ddp.set_flush_denormal(true)
    assert_flushed(ddp.matmul(a, b), "matmul with 2 threads, flushing again")
  end)

  it("flushes in the parallel elementwise and row loops", function()
    ddp.set_num_threads(2)
    local x = ddp.full({ 1 << 22 }, 1e-30) -- big enough to be split over the threads
    local rows = ddp.full({ 512, 4096 }, 1e-30)
    local function ops() return { x * 1e-10, ddp.softmax(rows, 2) * 1e-36 } end
    for _, t in ipairs(ops()) do assert_flushed(t, "a parallel loop") end
    ddp.set_flush_denormal(false)
    for _, t in ipairs(ops()) do assert_denormal(t, "a parallel loop, not flushing") end
    ddp.set_flush_denormal(true)
    for _, t in ipairs(ops()) do assert_flushed(t, "a parallel loop, flushing again") end
  end)

  it("flushes on the process group's communication thread (async all_reduce)", function()
    local ok, out = fresh([[
local ddp = require "ddplua"
local dist = ddp.distributed
dist.spawn(function(rank)
  dist.init_process_group { backend = "cpu" }
  local function make() -- denormal inputs, made while not flushing
    ddp.set_flush_denormal(false)
    local t = ddp.full({ 4096 }, 1e-39)
    ddp.set_flush_denormal(true)
    return t
  end
  local function largest(t)
    ddp.set_flush_denormal(false)
    local v = t:abs():max():item()
    ddp.set_flush_denormal(true)
    return v
  end
  local t = make()
  dist.all_reduce(t, "sum", { async = true }):wait() -- denormals-are-zero: 0 + 0
  assert(largest(t) == 0, "rank " .. rank .. ": the communication thread summed denormals: " .. largest(t))
  local u = make()
  ddp.set_flush_denormal(false)
  dist.all_reduce(u, "sum", { async = true }):wait()
  local v = u:min():item()
  assert(v > 1.9e-39 and v < 2.1e-39, "rank " .. rank .. ": not flushing, the sum is " .. v)
  ddp.set_flush_denormal(true)
  local w = make()
  dist.all_reduce(w, "sum", { async = true }):wait()
  assert(largest(w) == 0, "rank " .. rank .. ": flushing again, the sum is " .. largest(w))
  dist.destroy_process_group()
end, 2)
print("communication thread ok")
]])
    assert(ok, out)
    assert.matches("communication thread ok", out)
  end)

  it("flushes on the image decode workers", function()
    local CSVImageDataset = require "ddplua.data.csv_image"
    local T = require "ddplua.data.transforms"
    local dir = io_util.tmpdir()
    local lines = { "path,label" }
    for i = 1, 6 do
      local img = (ddp.rand(8, 8, 1) * 200 + 20):to("uint8") -- no zero pixel
      ddp.core.image.write_png(dir .. "/" .. i .. ".png", img)
      lines[#lines + 1] = i .. ".png,0"
    end
    io_util.write(dir .. "/labels.csv", table.concat(lines, "\n") .. "\n")
    -- x / 255 / 1e38: each pixel becomes a denormal, computed on a worker
    local ds = CSVImageDataset { csv = dir .. "/labels.csv", transform = { T.ToTensor(), T.Normalize({ 0 }, { 1e38 }) },
                                 num_workers = 2 }
    -- prefetched: the workers decode the batch while this thread waits
    local batch = { 1, 2, 3, 4, 5, 6 }
    local function get()
      ds:prefetch(batch)
      local t0 = ddp.clock()
      while ddp.clock() - t0 < 0.2 do end
      return ds:get_batch(batch)
    end
    assert_flushed(get(), "decode workers")
    ddp.set_flush_denormal(false)
    assert_denormal(get(), "decode workers, not flushing")
    ddp.set_flush_denormal(true)
    assert_flushed(get(), "decode workers, flushing again")
    ds:close()
    io_util.rm_rf(dir)
  end)
end)
