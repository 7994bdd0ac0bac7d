-- Batch gathering from an in-memory dataset: Fashion-MNIST's 47 MB of
-- uint8 pixels (60000 x 784), 64 random rows per batch as float32 / 255,
-- the way the MLP example reads every batch; and the same from a float32
-- TensorDataset (188 MB). Random rows of a source larger than the caches:
-- the time is the memory's (src/data/gather.c prefetches rows ahead).
--
--   ddplua bench/get_batch.lua [batches=3000] [batch=64]
local ddp = require "ddplua"

local opt = { batches = 3000, batch = 64 }
for _, a in ipairs(arg or {}) do
  local k, v = a:match("^(%w+)=(%d+)$")
  if not k or opt[k] == nil then error("usage: ddplua bench/get_batch.lua [batches=N] [batch=N], got " .. a, 0) end
  opt[k] = math.tointeger(tonumber(v))
end

print("cpu: " .. ddp.core.cpu_info())
local mnist = ddp.data.FashionMNIST { split = "train" }
local x, y = mnist:get_batch((function() local t = {} for i = 1, #mnist do t[i] = i end return t end)())
local floats = ddp.data.TensorDataset(x, y)
local perm = ddp.randperm(#mnist):totable()

local function time(ds)
  local n, bs = #perm, opt.batch
  local t0 = ddp.clock()
  for i = 0, opt.batches - 1 do
    local first = (i * bs) % (n - bs) + 1
    ds:get_batch(table.move(perm, first, first + bs - 1, 1, {}))
  end
  return (ddp.clock() - t0) / opt.batches * 1e6
end

for _, row in ipairs({ { "FashionMNIST uint8 -> float32", mnist }, { "TensorDataset float32", floats } }) do
  local us = time(row[2])
  print(string.format("%-30s %7.1f us per batch of %d (%.2f GB/s of rows read)", row[1], us, opt.batch,
    opt.batch * 784 * (row[2] == mnist and 1 or 4) / us / 1e3))
end
