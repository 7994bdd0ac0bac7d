-- Extreme arguments (math.maxinteger, math.mininteger, 2^32 + k, NaN, 1e300, a __len of 2^61) through the data, io
-- and distributed bindings: each raises a Lua error naming the argument, or does what PyTorch does; none may overflow
-- (this spec runs under ASan/UBSan in `make test`), wrap to another value, hang or signal another process. These
-- found: a batch buffer sized from a huge __len or TokenFile:sample's batch_size wrapping to 0 bytes (heap overflow),
-- 1-based starts and indices of math.mininteger overflowing their - 1, a window start near math.maxinteger
-- overflowing start + block, a Resize of an empty image dividing by zero (SIGFPE), image sizes, channels, JPEG quality,
-- world_size, rank and master_port cast to int (world_size 2^32 + 1 made a world of one), a worker pid of 0 or -1
-- reaching waitpid/kill (kill(-1, SIGKILL) signals every process of the user), NaN timeouts passing the checks,
-- bucket_cap_mb = 1e300 cast to size_t (a bucket per parameter), a prefetch_factor whose product wrapped (nothing
-- was ever sent: the loader waited forever) and an IDX header whose sizes aborted the process on the allocation.
local ddp = require "ddplua"
local core = ddp.core
local data = require "ddplua.data"
local dist = require "ddplua.distributed"
local R = require "helpers.ref"

local big, small, nan = math.maxinteger, math.mininteger, 0 / 0

local dir = os.tmpname()
os.remove(dir)
core.mkdir(dir)
local function write(name, bytes)
  local path = dir .. "/" .. name
  local f = assert(io.open(path, "wb"))
  f:write(bytes)
  f:close()
  return path
end
-- a table whose # is n and whose every entry is v (no memory behind it)
local function fake(n, v) return setmetatable({}, { __len = function() return n end, __index = function() return v end }) end
local function i64(list) return ddp.tensor(list, { dtype = "int64" }) end
local function u8(...) return ddp.zeros({ ... }, { dtype = "uint8" }) end

describe("hostile arguments: data", function()
  it("gathers rows only at positions in range, whatever the index or the list's length", function()
    local t = i64({ 1, 2, 3, 4, 5, 6 }):reshape(3, 2)
    R.assert_errors({
      { function() return core._gather_rows(t, { small }) end, "index -9223372036854775808 at batch position 1" },
      { function() return core._gather_rows(t, fake(1 << 61, 1)) end, "length (#) is 2305843009213693952" },
    })
  end)

  it("TokenFile: starts, batch sizes and lengths near the integer limits", function()
    local tf = core._token_file(write("tok.bin", string.rep("\1\0", 100)), "uint16")
    R.assert_errors({
      { function() return tf:windows({ small }, 4) end, "window start -9223372036854775808" },
      { function() return tf:windows(i64({ small }), 4) end, "window start -9223372036854775808" },
      { function() return tf:windows({ big }, 4) end, "window start 9223372036854775807" },
      { function() return tf:windows(fake(1 << 61, 1), 4) end, "length (#) is 2305843009213693952" },
      { function() return tf:sample(1 << 61, 4) end, "batch_size 2305843009213693952 x block_size 4" },
      { function() return tf:sample(big, 4) end, "is too large" },
      { function() return tf:sample(1, small) end, "got -9223372036854775808" },
      { function() return tf:sample(1, big) end, "block_size 9223372036854775807 + 1" },
    })
    local g = { seed = 1, offset = 5 }
    R.assert_error(function() return tf:sample(1 << 61, 4, g) end, "too large")
    assert.are.equal(5, g.offset) -- a rejected batch draws nothing
    local x, y = tf:windows({ 96 }, 4)
    assert.are.same({ 1, 4 }, { x:size(1), y:size(2) })
    tf:close()
  end)

  it("image: sizes, channels and quality beyond int, and resampling an empty image", function()
    local to_tensor = { { op = "to_tensor" } }
    R.assert_errors({
      { function() return core.image.apply(to_tensor, u8((1 << 32) + 2, 0)) end, "shape [4294967298, 0]" },
      { function() return core.image.write_png(dir .. "/x.png", u8((1 << 32) + 1, 0)) end, "above 2^31 - 1" },
      { function() return core.image.apply({ { op = "resize", height = 4, width = 0 } }, u8(0, 5)) end,
        "the image is empty" },
      { function() return core.image.apply({ { op = "resize", height = 3, width = 3 } }, u8(0, 4)) end,
        "transform 1 (Resize): the image is empty" },
      { function() return core.image.apply({ { op = "rotation", min = 10, max = 10 } }, u8(0, 0)) end,
        "transform 1 (RandomRotation)" },
      { function() return core.image.write_jpeg(dir .. "/x.jpg", u8(2, 2, 3), (1 << 32) + 50) end,
        "quality must be 1..100, got 4294967346" },
      { function() return core.image.write_jpeg(dir .. "/x.jpg", u8(2, 2, 3), big) end, "got 9223372036854775807" },
      { function() return core.image.read(dir .. "/x.png", (1 << 32) + 1) end, "channels must be 0..4" },
    })
    assert.are.same({ 1, 0, 5 }, core.image.apply(to_tensor, u8(0, 5)):size()) -- no resampling: an empty result
  end)

  it("image: a read_idx header larger than memory is an error, not an abort", function()
    -- 1 TiB: "out of memory" (or, where memory is overcommitted without limit, "truncated data"); ASan's
    -- allocator aborts on any request that large, so only the normal build asks
    local path = write("big.idx", "\0\0\8\3" .. string.pack(">I4>I4>I4", 0x10000, 0x10000, 0x100) .. "abc")
    if os.getenv("DDPLUA_ASAN") ~= "1" then R.assert_error(function() return core.image.read_idx(path) end, "big.idx") end
    path = write("huge.idx", "\0\0\8\3" .. string.pack(">I4>I4>I4", 0xffffffff, 0xffffffff, 0xffffffff))
    R.assert_error(function() return core.image.read_idx(path, 1) end, "is too large")
  end)

  it("DataLoader workers: pids that are not a worker's, NaN timeouts, huge prefetch_factor", function()
    R.assert_errors({
      { function() return core._worker_reap(-1, 0) end, "pid must be a worker's process id" },
      { function() return core._worker_reap(0, 0) end, "got 0" },
      { function() return core._worker_reap((1 << 32) - 1, 0) end, "got 4294967295" },
      { function() return core._worker_alive(small) end, "got -9223372036854775808" },
      { function() return core._worker_poll({}, nan) end, "timeout must be a number of seconds, got nan" },
      { function() return core._worker_poll(fake((1 << 32) + 1, 1), 0) end, "length (#) is 4294967297" },
    })
    local ds = data.TensorDataset(ddp.arange(8):float())
    R.assert_errors({
      { function() return data.DataLoader(ds, { num_workers = 1, timeout = nan }) end, "timeout must be" },
      { function() return data.DataLoader(ds, { num_workers = big }) end, "(at most 1024: each is a process)" },
    })
    -- prefetch_factor * num_workers wrapped negative: no batch was ever sent
    local dl = data.DataLoader(ds, { batch_size = 2, num_workers = 2, prefetch_factor = big, timeout = 20 })
    local n = 0
    for _ in dl:iter() do n = n + 1 end
    assert.are.equal(4, n)
  end)

  it("a worker socket's recv with a NaN timeout is an error, not a wait forever", function()
    local role, a, b = core._worker_fork()
    if role == "child" then
      local ok, err = pcall(a.recv, a, nan)
      core._worker_exit((not ok and tostring(err):find("got nan", 1, true)) and 7 or 1)
    end
    local how = core._worker_reap(a, 10)
    b:close()
    assert.are.equal("exited with code 7", how)
  end)
end)

describe("hostile arguments: distributed (a world of one rank)", function()
  local function init(o)
    o.backend, o.init_method = "cpu", "tcp://127.0.0.1:" .. (o.port or dist.find_free_port())
    o.port = nil
    o.rank, o.world_size = o.rank or 0, o.world_size or 1
    dist.init_process_group(o)
  end
  after_each(function()
    if dist.is_initialized() then dist.destroy_process_group() end
  end)

  it("rejects world_size, rank, master_port and timeout beyond their range instead of wrapping them", function()
    local port = dist.find_free_port()
    R.assert_errors({
      { function() init { world_size = (1 << 32) + 1 } end, "world_size = 4294967297 is out of range" },
      { function() init { world_size = (1 << 32) + 1, rank = 1 << 32 } end, "rank = 4294967296 is out of range" },
      { function() init { port = (1 << 32) + port } end, "master_port = " .. ((1 << 32) + port) },
      { function() init { timeout = nan } end, "timeout must be a positive number of seconds" },
    })
    assert.is_false(dist.is_initialized())
    init { timeout = 1e300 } -- forever, as a huge timedelta
    assert.are.equal(1, dist.get_world_size())
  end)

  it("names out-of-range ranks as given, not as their low 32 bits", function()
    init {}
    R.assert_errors({
      { function() dist.broadcast(ddp.zeros(2), 1 << 32) end, "src 4294967296 is out of range" },
      { function() dist.broadcast(ddp.zeros(2), small) end, "src -9223372036854775808 is out of range" },
      { function() dist.new_group({ 1 << 32 }) end, "rank 4294967296 is out of range" },
      { function() dist.new_group(fake(1 << 61, 0)) end, "length (#) is 2305843009213693952" },
      { function() dist.spawn(function() end, 1 << 32) end, "got 4294967296" },
    })
  end)

  it("bucket_cap_mb = 1e300 or inf puts every parameter in one bucket, as PyTorch's int(cap * MB)", function()
    init {}
    for _, cap in ipairs({ 1e300, math.huge }) do
      local m = ddp.nn.Sequential(ddp.nn.Linear(2, 2), ddp.nn.Linear(2, 2))
      local d = dist.DistributedDataParallel(m, { bucket_cap_mb = cap })
      local r = rawget(d, "reducer")
      for i = 1, 4 do assert.are.equal(1, r:bucket_of(i)) end
      assert.is_nil(r:bucket_of(big))
      assert.is_nil(r:bucket_of((1 << 32) + 1))
    end
  end)
end)

-- A path with a NUL byte: C stops reading it at the NUL, so "a.st\0junk" wrote a.st (Python: "embedded null byte")
describe("hostile arguments: paths with a NUL byte", function()
  it("are refused by every binding that opens, writes or looks at a file", function()
    local p = dir .. "/nul.st\0junk"
    R.assert_errors({
      { function() ddp.save({ x = ddp.zeros(2) }, p) end, "save: the path contains a NUL byte (at byte " },
      { function() ddp.load(p) end, "load: the path contains a NUL byte" },
      { function() ddp.save_checkpoint(p, { model = ddp.nn.Linear(2, 2) }) end, "the path contains a NUL byte" },
      { function() data.TokenFile { path = p, dtype = "uint16", block_size = 4 } end, "TokenFile: the path contains" },
      { function() core.image.read(p) end, "image.read: the path contains a NUL byte" },
      { function() core.image.write_png(p, u8(2, 2, 1)) end, "image.write_png: the path contains a NUL byte" },
      { function() core.image.read_csv(p) end, "image.read_csv: the path contains a NUL byte" },
      { function() core.image.read_idx(p) end, "image.read_idx: the path contains a NUL byte" },
      { function() core._idx_load(p) end, "IDX file: the path contains a NUL byte" },
      { function() core._idx_load(dir .. "/x.gz", dir .. "\0c") end, "IDX cache dir: the path contains a NUL byte" },
      { function() core.yaml_load(p) end, "yaml load: the path contains a NUL byte" },
      { function() core.mkdir(dir .. "/d\0e") end, "mkdir: the path contains a NUL byte" },
    })
    assert.is_nil(io.open(dir .. "/nul.st"), "the file before the NUL was written")
    assert.is_nil(io.open(dir .. "/d"), "the directory before the NUL was made")
  end)
end)
