-- data: TensorDataset, the DataLoader (get_batch / prefetch protocol, item
-- path and collate), samplers, Subset / random_split, FashionMNIST and the
-- IDX reader's errors.
local ddp = require "ddplua"
local data = ddp.data

local FMNIST = "/usr/share/datasets/fashion-mnist"

local function fails(pattern, fn)
  local ok, err = pcall(fn)
  assert.is_false(ok, "expected an error matching " .. pattern)
  assert.matches(pattern, tostring(err))
end

local io_util = require "helpers.io_util"
local tmpdir, write = io_util.tmpdir, io_util.write

-- An uncompressed IDX file of unsigned bytes: dims, then `payload` bytes.
local function idx_bytes(dims, payload)
  local parts = { string.char(0, 0, 8, #dims) }
  for _, d in ipairs(dims) do parts[#parts + 1] = string.pack(">I4", d) end
  parts[#parts + 1] = payload
  return table.concat(parts)
end

local function seq_tensor(n, cols)
  return ddp.arange(0, n * cols, { dtype = "float32" }):view(n, cols)
end

describe("data.TensorDataset", function()
  local x, y = seq_tensor(10, 3), ddp.arange(1, 11)

  it("holds rows of its tensors, by get(i), ds[i] and get_batch", function()
    local ds = data.TensorDataset(x, y)
    assert.are.equal(10, #ds)
    local xi, yi = ds:get(4)
    assert.are.same({ 9, 10, 11 }, xi:totable())
    assert.are.equal(4, yi:item())
    local item = ds[2]
    assert.are.same({ 3, 4, 5 }, item[1]:totable())
    local bx, by = ds:get_batch({ 7, 1, 7 })
    assert.are.same({ { 18, 19, 20 }, { 0, 1, 2 }, { 18, 19, 20 } }, bx:totable())
    assert.are.same({ 7, 1, 7 }, by:totable())
    assert.are.equal("int64", by:dtype())
  end)

  it("names mismatched sizes, non-tensors and positions out of range", function()
    fails("TensorDataset: size mismatch between tensors: tensor 1 has 10 rows, tensor 2 has 9",
      function() data.TensorDataset(x, ddp.zeros(9)) end)
    fails("TensorDataset: argument 2 is a table, expected a tensor", function() data.TensorDataset(x, {}) end)
    fails("TensorDataset: expected at least one tensor", function() data.TensorDataset() end)
    local ds = data.TensorDataset(x, y)
    fails("TensorDataset: index 11 out of range %(positions are 1..10%)", function() ds:get(11) end)
    fails("index 11 at batch position 2 is out of range 1..10", function() ds:get_batch({ 1, 11 }) end)
    fails("index 0 at batch position 1 is out of range 1..10", function() ds:get_batch({ 0 }) end)
    fails("index at batch position 2 is a string, expected an integer", function() ds:get_batch({ 1, "2" }) end)
  end)
end)

describe("data.DataLoader", function()
  local x, y = seq_tensor(10, 2), ddp.arange(1, 11)
  local ds = data.TensorDataset(x, y)

  local function collect(loader)
    local batches = {}
    for bx, by in loader:iter() do batches[#batches + 1] = { bx:totable(), by:totable() } end
    return batches
  end

  it("yields batches in order, the last one short unless drop_last", function()
    local loader = data.DataLoader(ds, { batch_size = 4 })
    assert.are.equal(3, #loader)
    local b = collect(loader)
    assert.are.equal(3, #b)
    assert.are.same({ 1, 2, 3, 4 }, b[1][2])
    assert.are.same({ { 8, 9 }, { 10, 11 }, { 12, 13 }, { 14, 15 } }, b[2][1])
    assert.are.same({ 9, 10 }, b[3][2])
    local dl = data.DataLoader(ds, { batch_size = 4, drop_last = true })
    assert.are.equal(2, #dl)
    assert.are.equal(2, #collect(dl))
    assert.are.equal(10, #data.DataLoader(ds))
  end)

  it("shuffles every epoch with ddplua's generator, each item once", function()
    ddp.manual_seed(11)
    local loader = data.DataLoader(ds, { batch_size = 3, shuffle = true })
    local function epoch()
      local order = {}
      for _, by in loader:iter() do
        for _, v in ipairs(by:totable()) do order[#order + 1] = v end
      end
      return order
    end
    local e1, e2 = epoch(), epoch()
    local sorted = { table.unpack(e1) }
    table.sort(sorted)
    assert.are.same({ 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 }, sorted)
    assert.are_not.same(e1, e2)
    ddp.manual_seed(11)
    assert.are.same(e1, epoch())
  end)

  it("takes its order from a sampler", function()
    local sampler = setmetatable({ indices = function() return { 10, 3, 5 } end }, { __len = function() return 3 end })
    local loader = data.DataLoader(ds, { batch_size = 2, sampler = sampler })
    assert.are.equal(2, #loader)
    local b = collect(loader)
    assert.are.same({ 10, 3 }, b[1][2])
    assert.are.same({ 5 }, b[2][2])
  end)

  it("splits an epoch between ranks with a DistributedSampler", function()
    local seen = {}
    for rank = 0, 1 do
      local sampler = data.DistributedSampler(ds, { num_replicas = 2, rank = rank, seed = 3 })
      local loader = data.DataLoader(ds, { batch_size = 2, sampler = sampler })
      assert.are.equal(3, #loader) -- 5 items per rank
      for _, by in loader:iter() do
        for _, v in ipairs(by:totable()) do
          assert.is_nil(seen[v])
          seen[v] = rank
        end
      end
    end
    for i = 1, 10 do assert.is_not_nil(seen[i]) end
  end)

  it("calls get_batch once per batch and prefetch with the batch that comes next", function()
    local log = {}
    local custom = setmetatable({
      get_batch = function(_, idx)
        log[#log + 1] = "get " .. table.concat(idx, ",")
        return ddp.tensor(idx), "meta"
      end,
      prefetch = function(_, idx) log[#log + 1] = "prefetch " .. table.concat(idx, ",") end,
    }, { __len = function() return 5 end })
    local out = {}
    for b, meta in data.DataLoader(custom, { batch_size = 2 }):iter() do
      out[#out + 1] = b:totable()
      assert.are.equal("meta", meta)
    end
    assert.are.same({ { 1, 2 }, { 3, 4 }, { 5 } }, out)
    assert.are.same({ "prefetch 1,2", "get 1,2", "prefetch 3,4", "get 3,4", "prefetch 5", "get 5" }, log)
  end)

  it("reads other datasets item by item and collates them", function()
    -- get(i) returning several values: tensors are stacked, integers make int64
    local ds1 = setmetatable({ get = function(_, i) return ddp.full({ 2 }, i), i * 10 end },
      { __len = function() return 3 end })
    local batches = {}
    for bx, by in data.DataLoader(ds1, { batch_size = 2 }):iter() do batches[#batches + 1] = { bx, by } end
    assert.are.same({ { 1, 1 }, { 2, 2 } }, batches[1][1]:totable())
    assert.are.same({ 10, 20 }, batches[1][2]:totable())
    assert.are.equal("int64", batches[1][2]:dtype())
    assert.are.same({ { 3, 3 } }, batches[2][1]:totable())
    -- a plain Lua list of {x, y} items; fractional numbers make float32
    local list = { { ddp.zeros(2), 0.5 }, { ddp.ones(2), 1.5 } }
    local bx, by = data.DataLoader(list, { batch_size = 2 }):iter()()
    assert.are.same({ { 0, 0 }, { 1, 1 } }, bx:totable())
    assert.are.same({ 0.5, 1.5 }, by:totable())
    assert.are.equal("float32", by:dtype())
    -- a custom collate_fn receives the items and may return a list
    local loader = data.DataLoader(list, { batch_size = 2, collate_fn = function(items)
      return { #items, items[2][2] }
    end })
    local n, last = loader:iter()()
    assert.are.equal(2, n)
    assert.are.equal(1.5, last)
  end)

  it("names fields the default collate cannot batch", function()
    local list = { { "a" }, { "b" } }
    fails("default_collate: field 1 of the items is a string; pass a collate_fn", function()
      data.DataLoader(list, { batch_size = 2 }):iter()()
    end)
  end)

  it("rejects bad options", function()
    fails("DataLoader: batch_size must be a positive integer, got 0",
      function() data.DataLoader(ds, { batch_size = 0 }) end)
    fails("DataLoader: unknown option 'batchsize'", function() data.DataLoader(ds, { batchsize = 2 }) end)
    fails("DataLoader: sampler and shuffle=true are mutually exclusive", function()
      data.DataLoader(ds, { shuffle = true, sampler = data.SequentialSampler(ds) })
    end)
    fails("DataLoader: sampler must have a sampler:indices%(%) method",
      function() data.DataLoader(ds, { sampler = 3 }) end)
    fails("DataLoader: expected a dataset", function() data.DataLoader(42) end)
    fails("DataLoader: expected a dataset .*got string", function() data.DataLoader("abc") end)
  end)
end)

describe("samplers", function()
  it("SequentialSampler and RandomSampler cover 1..n", function()
    local s = data.SequentialSampler(4)
    assert.are.equal(4, #s)
    assert.are.same({ 1, 2, 3, 4 }, s:indices())
    local r = data.RandomSampler(data.TensorDataset(ddp.zeros(6)))
    assert.are.equal(6, #r)
    local idx = r:indices()
    table.sort(idx)
    assert.are.same({ 1, 2, 3, 4, 5, 6 }, idx)
    assert.are.same({}, data.RandomSampler(0):indices())
    fails("RandomSampler: expected a dataset", function() data.RandomSampler("x") end)
  end)
end)

describe("data.Subset and data.random_split", function()
  local ds = data.TensorDataset(seq_tensor(10, 1), ddp.arange(1, 11))

  it("Subset maps positions onto its dataset for items and batches", function()
    local sub = data.Subset(ds, { 4, 9, 2 })
    assert.are.equal(3, #sub)
    local _, y = sub:get(2)
    assert.are.equal(9, y:item())
    local _, by = sub:get_batch({ 3, 1 })
    assert.are.same({ 2, 4 }, by:totable())
    fails("Subset: index 4 out of range %(positions are 1..3%)", function() sub:get(4) end)
    fails("Subset: position 2 holds 11, expected an index 1..10", function() data.Subset(ds, { 1, 11 }) end)
  end)

  it("splits by fractions with PyTorch's rounding, disjoint and covering", function()
    local parts = data.random_split(ds, { 0.8, 0.1, 0.1 }, { seed = 1 })
    assert.are.same({ 8, 1, 1 }, { #parts[1], #parts[2], #parts[3] })
    local seen = {}
    for _, p in ipairs(parts) do
      for _, i in ipairs(p.indices) do
        assert.is_nil(seen[i])
        seen[i] = true
      end
    end
    for i = 1, 10 do assert.is_true(seen[i]) end
    local seven = data.TensorDataset(ddp.zeros(7))
    local p7 = data.random_split(seven, { 0.8, 0.1, 0.1 })
    assert.are.same({ 6, 1, 0 }, { #p7[1], #p7[2], #p7[3] }) -- floor 5, 0, 0 + remainder 2 from the front
  end)

  it("splits by counts; a seed gives the same split and leaves the global generator alone", function()
    ddp.manual_seed(5)
    local before = ddp.get_rng_state()
    local a = data.random_split(ds, { 3, 7 }, { seed = 42 })
    assert.are.same(before, ddp.get_rng_state())
    local b = data.random_split(ds, { 3, 7 }, { seed = 42 })
    assert.are.same(a[1].indices, b[1].indices)
    assert.are.equal(7, #a[2])
    local c = data.random_split(ds, { 3, 7 }, { seed = 43 })
    assert.are_not.same(a[1].indices, c[1].indices)
  end)

  it("names lengths that do not fit the dataset", function()
    fails("random_split: the lengths sum to 9 but the dataset has 10 items",
      function() data.random_split(ds, { 4, 5 }) end)
    fails("random_split: length 1 is 0.3: give integer counts summing to 10 or fractions summing to 1",
      function() data.random_split(ds, { 0.3, 0.5 }) end)
    fails("random_split: length 1 must be a non%-negative number", function() data.random_split(ds, { -1, 11 }) end)
    fails("random_split: unknown option 'sed'", function() data.random_split(ds, { 5, 5 }, { sed = 1 }) end)
  end)
end)

describe("data.FashionMNIST", function()
  local train = data.FashionMNIST { split = "train" }
  local test = data.FashionMNIST { root = FMNIST, split = "test" }

  it("has 60000 training and 10000 test items kept as uint8", function()
    assert.are.equal(60000, #train)
    assert.are.equal(10000, #test)
    assert.are.equal("uint8", train.images:dtype())
    assert.are.same({ 60000, 1, 28, 28 }, train.images:size())
    assert.are.equal("int64", train.labels:dtype())
  end)

  it("gathers float32 batches in [0, 1] equal to the bytes / 255, labels 1..10", function()
    local raw = ddp.core._idx_load(FMNIST .. "/t10k-images-idx3-ubyte.gz")
    local raw_labels = ddp.core._idx_load(FMNIST .. "/t10k-labels-idx1-ubyte.gz")
    local idx = { 1, 10000, 4321, 1 }
    local x, y = test:get_batch(idx)
    assert.are.same({ 4, 1, 28, 28 }, x:size())
    assert.are.equal("float32", x:dtype())
    assert.are.equal("int64", y:dtype())
    for k, i in ipairs(idx) do
      local want = (raw[i]:float() / 255):totable()
      assert.are.same(want, x[k][1]:totable())
      assert.are.equal(raw_labels[i]:item() + 1, y[k]:item())
    end
    assert.is_true(x:min():item() >= 0 and x:max():item() <= 1)
    local lx, ly = test:get_batch({ 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20 })
    assert.is_true(ly:min():item() >= 1 and ly:max():item() <= 10)
    assert.are.equal(20, lx:size(1))
    local xi, yi = test:get(4321)
    assert.are.same({ 1, 28, 28 }, xi:size())
    assert.are.equal(raw_labels[4321]:item() + 1, yi)
    assert.are.equal(10, #data.FashionMNIST.classes)
  end)

  it("feeds a DataLoader", function()
    local loader = data.DataLoader(test, { batch_size = 1000 })
    assert.are.equal(10, #loader)
    local n = 0
    for x, y in loader:iter() do
      assert.are.same({ 1000, 1, 28, 28 }, x:size())
      n = n + y:size(1)
    end
    assert.are.equal(10000, n)
  end)

  it("names a missing file and the Debian package that has it", function()
    fails("FashionMNIST: /nonexistent/dir/train%-images%-idx3%-ubyte.gz: cannot open %(No such file or directory%); "
      .. "install the Debian package dataset%-fashion%-mnist",
      function() data.FashionMNIST { root = "/nonexistent/dir" } end)
    fails('FashionMNIST: split must be "train" or "test", got val', function() data.FashionMNIST { split = "val" } end)
    fails("FashionMNIST: unknown option 'path'", function() data.FashionMNIST { path = "/tmp" } end)
  end)

  it("names a corrupt, short or malformed file and what is wrong with it", function()
    local dir = tmpdir()
    local good_labels = idx_bytes({ 3 }, string.char(0, 1, 2))
    -- a gzip stream cut short
    local f = assert(io.open(FMNIST .. "/t10k-images-idx3-ubyte.gz", "rb"))
    local gz = f:read(200000)
    f:close()
    write(dir .. "/t10k-images-idx3-ubyte.gz", gz)
    write(dir .. "/t10k-labels-idx1-ubyte", good_labels)
    fails("FashionMNIST: " .. dir:gsub("%p", "%%%0") .. "/t10k%-images%-idx3%-ubyte.gz: corrupt or truncated gzip data",
      function() data.FashionMNIST { root = dir, split = "test" } end)
    os.remove(dir .. "/t10k-images-idx3-ubyte.gz")
    -- fewer bytes than the header announces (an uncompressed file is read too)
    write(dir .. "/t10k-images-idx3-ubyte", idx_bytes({ 3, 28, 28 }, string.rep("\1", 100)))
    fails("t10k%-images%-idx3%-ubyte: truncated: the header says %[3, 28, 28%] %(2352 bytes of data%) but the file "
      .. "holds 100", function() data.FashionMNIST { root = dir, split = "test" } end)
    -- bytes after the data
    write(dir .. "/t10k-images-idx3-ubyte", idx_bytes({ 3, 2, 2 }, string.rep("\1", 13)))
    fails("unexpected bytes after the 12 bytes of data the header announces",
      function() data.FashionMNIST { root = dir, split = "test" } end)
    -- not IDX at all
    write(dir .. "/t10k-images-idx3-ubyte", "PK\3\4 not an idx file")
    fails("not an IDX file %(magic bytes 0x50 0x4b, expected 0x00 0x00%)",
      function() data.FashionMNIST { root = dir, split = "test" } end)
    -- an element type other than unsigned bytes
    write(dir .. "/t10k-images-idx3-ubyte", string.char(0, 0, 0x0D, 1) .. string.pack(">I4", 1) .. "abcd")
    fails("IDX element type 0x0d is not supported", function() data.FashionMNIST { root = dir, split = "test" } end)
    -- images and labels that disagree
    write(dir .. "/t10k-images-idx3-ubyte", idx_bytes({ 2, 2, 2 }, string.rep("\1", 8)))
    fails("holds 2 images but .*t10k%-labels%-idx1%-ubyte holds 3 labels",
      function() data.FashionMNIST { root = dir, split = "test" } end)
    -- a label outside 0..9
    write(dir .. "/t10k-images-idx3-ubyte", idx_bytes({ 3, 2, 2 }, string.rep("\1", 12)))
    write(dir .. "/t10k-labels-idx1-ubyte", idx_bytes({ 3 }, string.char(0, 12, 2)))
    fails("holds label 12, expected 0..9", function() data.FashionMNIST { root = dir, split = "test" } end)
    -- a consistent small file loads
    write(dir .. "/t10k-labels-idx1-ubyte", good_labels)
    local ds = data.FashionMNIST { root = dir, split = "test" }
    assert.are.equal(3, #ds)
    local x, y = ds:get_batch({ 3, 1 })
    assert.are.same({ 3, 1 }, y:totable())
    assert.are.same({ 2, 1, 2, 2 }, x:size())
    assert.is_true(math.abs(x[1][1][1][1]:item() - 1 / 255) < 1e-7)
    io_util.rm_rf(dir)
  end)

  it("keeps decompressed files in cache_dir, reads them back, and follows a changed source", function()
    local src, top = tmpdir(), tmpdir()
    local cache = top .. "/a/b" -- made as needed
    local function ls(dir)
      local names, p = {}, io.popen("ls -1 " .. dir .. " 2>/dev/null")
      for line in p:lines() do names[#names + 1] = line end
      p:close()
      table.sort(names)
      return names
    end
    local function put_gz(name, bytes)
      write(src .. "/" .. name, bytes)
      assert(os.execute("gzip -f " .. src .. "/" .. name))
    end
    put_gz("t10k-images-idx3-ubyte", idx_bytes({ 3, 2, 2 }, string.rep("\7", 12)))
    put_gz("t10k-labels-idx1-ubyte", idx_bytes({ 3 }, string.char(4, 5, 6)))
    local first = data.FashionMNIST { root = src, split = "test", cache_dir = cache }
    local files = ls(cache)
    assert.are.equal(2, #files)
    assert.matches("^t10k%-images%-idx3%-ubyte%.%x+%-%x+%-%x+%.idx$", files[1])
    assert.matches("^t10k%-labels%-idx1%-ubyte%.%x+%-%x+%-%x+%.idx$", files[2])
    -- the cached file is the plain IDX file
    local f = assert(io.open(cache .. "/" .. files[1], "rb"))
    assert.are.equal(idx_bytes({ 3, 2, 2 }, string.rep("\7", 12)), f:read("a"))
    f:close()
    -- the same files elsewhere (same names, sizes and mtimes) get their own entries
    local copy = top .. "/copy"
    assert(os.execute("cp -rp " .. src .. " " .. copy))
    data.FashionMNIST { root = copy, split = "test", cache_dir = cache }
    assert.are.equal(4, #ls(cache))
    assert(os.execute("rm -rf " .. copy .. " " .. cache .. "/*"))
    data.FashionMNIST { root = src, split = "test", cache_dir = cache }
    assert.are.same(files, ls(cache))
    -- a second load reads the cache: change it (still valid) and the data follows
    write(cache .. "/" .. files[2], idx_bytes({ 3 }, string.char(9, 8, 7)))
    local second = data.FashionMNIST { root = src, split = "test", cache_dir = cache }
    assert.are.same({ 10, 9, 8 }, second.labels:totable())
    assert.are.same({ 5, 6, 7 }, first.labels:totable())
    -- a damaged cache file is replaced from the source
    write(cache .. "/" .. files[1], idx_bytes({ 3, 2, 2 }, "\1\2"))
    local third = data.FashionMNIST { root = src, split = "test", cache_dir = cache }
    assert.are.equal(7, third.images:max():item())
    assert.are.same(files, ls(cache))
    f = assert(io.open(cache .. "/" .. files[1], "rb"))
    assert.are.equal(4 + 3 * 4 + 12, #f:read("a"))
    f:close()
    -- a new source (another size) is read afresh, under a new name
    put_gz("t10k-labels-idx1-ubyte", idx_bytes({ 3 }, string.char(1, 1, 1)) .. "")
    put_gz("t10k-images-idx3-ubyte", idx_bytes({ 3, 2, 3 }, string.rep("\3", 18)))
    local fourth = data.FashionMNIST { root = src, split = "test", cache_dir = cache }
    assert.are.same({ 3, 1, 2, 3 }, fourth.images:size())
    assert.are.same({ 2, 2, 2 }, fourth.labels:totable())
    assert.are.equal(4, #ls(cache)) -- nothing half-written left beside them (no .tmp files)
    for _, name in ipairs(ls(cache)) do assert.is_nil(name:find("tmp", 1, true)) end
    -- a cache that cannot be written only costs the speed-up; false turns it off
    local blocker = top .. "/file"
    write(blocker, "x")
    local fifth = data.FashionMNIST { root = src, split = "test", cache_dir = blocker .. "/sub" }
    assert.are.same({ 2, 2, 2 }, fifth.labels:totable())
    for _, none in ipairs({ false, "", "off" }) do assert.is_nil(data.FashionMNIST.cache_dir(none)) end
    assert.are.equal("/x/y", data.FashionMNIST.cache_dir("/x/y"))
    if os.getenv("DDPLUA_CACHE_DIR") == nil and os.getenv("XDG_CACHE_HOME") == nil and os.getenv("HOME") then
      assert.are.equal(os.getenv("HOME") .. "/.cache/ddplua", data.FashionMNIST.cache_dir(nil))
    end
    local sixth = data.FashionMNIST { root = src, split = "test", cache_dir = false }
    assert.are.same({ 2, 2, 2 }, sixth.labels:totable())
    fails("FashionMNIST: cache_dir must be a directory path, false or \"off\", got number",
      function() data.FashionMNIST { root = src, split = "test", cache_dir = 42 } end)
    io_util.rm_rf(src)
    io_util.rm_rf(top)
  end)
end)

