-- CSVImageDataset loading speed: images/s through get_batch with the worker
-- pool against num_workers = 0 (every image decoded on the calling thread),
-- on Fashion-MNIST items written as PNG files (generated on first use).
--
--   ddplua bench/csv_images.lua [n=4000] [batch=64] [dir=runs/bench_csv] [epochs=2]
--
-- Columns: "sync" calls get_batch alone (the calling thread and the workers
-- decode the batch together); "prefetch" runs the DataLoader protocol
-- (prefetch the next batch, then get the current one); "prefetch + step"
-- adds a stand-in training step (a matmul) between batches, so the workers
-- decode while the training thread computes. The step's own time is
-- measured apart and reported, and the image rate counts the whole loop.
-- "cpu us/img" is the process CPU time (all threads) per image in the
-- prefetch column: the pool's overhead, which a busy machine cannot hide.
local ddp = require "ddplua"
local CSVImageDataset = require "ddplua.data.csv_image"
local T = require "ddplua.data.transforms"
local image = ddp.core.image

local opt = { n = 4000, batch = 64, dir = "runs/bench_csv", epochs = 2 }
for _, a in ipairs(arg or {}) do
  local k, v = a:match("^([%w_]+)=(.*)$")
  if not k or opt[k] == nil then error("csv_images: unexpected argument '" .. a .. "'", 0) end
  opt[k] = type(opt[k]) == "number" and assert(math.tointeger(tonumber(v)), k .. " must be an integer") or v
end

local function shell_quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

-- the dataset: n PNGs + labels.csv, written unless already there with n rows
local csv = opt.dir .. "/labels.csv"
local function count_rows()
  local f = io.open(csv)
  if not f then return 0 end
  local n = -1
  for _ in f:lines() do n = n + 1 end
  f:close()
  return n
end
if count_rows() ~= opt.n then
  assert(os.execute("mkdir -p " .. shell_quote(opt.dir .. "/images")))
  local src = "/usr/share/datasets/fashion-mnist/train-"
  local images = image.read_idx(src .. "images-idx3-ubyte.gz", opt.n)
  local labels = image.read_idx(src .. "labels-idx1-ubyte.gz", opt.n):totable()
  local f = assert(io.open(csv, "w"))
  f:write("path,label\n")
  for i = 1, images:size(1) do
    local name = string.format("images/%05d.png", i - 1)
    image.write_png(opt.dir .. "/" .. name, images[i])
    f:write(name, ",", labels[i], "\n")
  end
  f:close()
end

local configs = {
  { name = "1x32x32  (Resize, Rotation, Flip, ToTensor, Normalize)", channels = 1,
    transform = { T.Resize { 32, 32 }, T.RandomRotation(10), T.RandomHorizontalFlip(), T.ToTensor(),
      T.Normalize { mean = { 0.5 }, std = { 0.5 } } } },
  { name = "3x96x96  (Resize, Rotation, Flip, ToTensor, Normalize)", channels = 3,
    transform = { T.Resize { 96, 96 }, T.RandomRotation(10), T.RandomHorizontalFlip(), T.ToTensor(),
      T.Normalize { mean = { 0.485, 0.456, 0.406 }, std = { 0.229, 0.224, 0.225 } } } },
}

local function batches_of(n, b)
  local out = {}
  for s = 1, n, b do
    local idx = {}
    for i = s, math.min(n, s + b - 1) do idx[#idx + 1] = i end
    out[#out + 1] = idx
  end
  return out
end

-- the stand-in training step: about as long as decoding one batch without workers
local wa, wb = ddp.randn(256, 256), ddp.randn(256, 256)
local function step(reps) for _ = 1, reps do wa:matmul(wb) end end

local function rate(ds, batches, mode, reps)
  local t0, c0 = ddp.clock(), os.clock()
  for _ = 1, opt.epochs do
    if mode ~= "sync" then ds:prefetch(batches[1]) end
    for k, b in ipairs(batches) do
      if mode ~= "sync" and batches[k + 1] then ds:prefetch(batches[k + 1]) end
      local x = ds:get_batch(b)
      assert(x:size(1) == #b)
      if mode == "step" then step(reps) end
    end
  end
  local images = opt.epochs * opt.n
  return images / (ddp.clock() - t0), (os.clock() - c0) / images * 1e6
end

local cores = tonumber(io.popen("nproc"):read("l")) or 0
local loadavg = io.open("/proc/loadavg") -- others' work on the machine skews every figure
local load = loadavg and loadavg:read("n") or 0
if loadavg then loadavg:close() end
print(string.format("CSVImageDataset loading: %d PNG items (28x28 grey), batch %d, %d epochs, %d cores " ..
  "(load average %.1f), images/s", opt.n, opt.batch, opt.epochs, cores, load))
local batches = batches_of(opt.n, opt.batch)
for _, cfg in ipairs(configs) do
  -- calibrate the step to the single-threaded decode time of one batch
  local ds0 = CSVImageDataset { csv = csv, channels = cfg.channels, transform = cfg.transform, num_workers = 0 }
  local per_batch = opt.batch / rate(ds0, batches, "sync")
  local t0, reps = ddp.clock(), 0
  while ddp.clock() - t0 < 0.2 do
    step(1)
    reps = reps + 1
  end
  reps = math.max(1, math.floor(per_batch / ((ddp.clock() - t0) / reps) + 0.5))
  local t1 = ddp.clock()
  step(reps * 10)
  local step_ms = (ddp.clock() - t1) / 10 * 1e3
  print(string.format("\n%s; training step stand-in %.1f ms/batch", cfg.name, step_ms))
  print(string.format("%-12s %10s %10s %16s %10s %12s", "num_workers", "sync", "prefetch", "prefetch + step",
    "speedup", "cpu us/img"))
  local base
  for _, workers in ipairs { 0, 1, 2, 4 } do
    local ds = workers == 0 and ds0 or CSVImageDataset { csv = csv, channels = cfg.channels,
      transform = cfg.transform, num_workers = workers }
    local sync = rate(ds, batches, "sync")
    local pre, cpu = rate(ds, batches, "prefetch")
    local stepped = rate(ds, batches, "step", reps)
    base = base or sync
    print(string.format("%-12d %10.0f %10.0f %16.0f %9.2fx %12.1f", workers, sync, pre, stepped, sync / base, cpu))
    ds:close()
  end
end
