-- data.DataLoader(ds, {batch_size=1, shuffle=false, sampler=, drop_last=false,
-- collate_fn=}): batches of a dataset, in the sampler's order.
--   for x, y in loader:iter() do ... end      #loader = batches per epoch
-- A dataset with get_batch (TensorDataset, FashionMNIST, ...) builds each
-- batch in one call and gets a prefetch(next_indices) hint when it has
-- prefetch; any other dataset is read item by item and the items are
-- combined by collate_fn (default: stack tensors, numbers become an int64
-- tensor, or float32 when any is fractional).
local ddp = require "ddplua"
local dataset = require "ddplua.data.dataset"
local sampler = require "ddplua.data.sampler"
local E = require "ddplua.errors"

local DataLoader = { __name = "DataLoader" }
DataLoader.__index = DataLoader
setmetatable(DataLoader, { __call = function(c, ...) return c.new(...) end })

local valid = { batch_size = true, shuffle = true, sampler = true, drop_last = true, collate_fn = true }

--- The default collate_fn: samples is a list of items, each a list of
--- fields; returns one batched value per field.
function DataLoader.default_collate(samples)
  local first = samples[1]
  local out = {}
  for f = 1, (first.n or #first) do
    local v = first[f]
    local column = {}
    for j, s in ipairs(samples) do column[j] = s[f] end
    if ddp.is_tensor(v) then
      out[f] = ddp.stack(column)
    elseif type(v) == "number" then
      for j, c in ipairs(column) do
        if type(c) ~= "number" then
          error(string.format("default_collate: field %d is a number in item 1 but a %s in item %d", f, type(c), j), 0)
        end
      end
      out[f] = ddp.tensor(column)
    else
      error(string.format("default_collate: field %d of the items is a %s; pass a collate_fn that batches it", f,
        type(v)), 0)
    end
  end
  return table.unpack(out, 1, first.n or #first)
end

function DataLoader.new(ds, opts)
  opts = opts or {}
  if type(opts) ~= "table" then E.raise("DataLoader: options must be a table") end
  for k in pairs(opts) do
    if not valid[k] then
      E.raise("DataLoader: unknown option '" .. tostring(k) ..
        "' (valid options: batch_size, shuffle, sampler, drop_last, collate_fn)")
    end
  end
  local ok, n = pcall(function() return #ds end)
  if (type(ds) ~= "table" and type(ds) ~= "userdata") or not ok or math.type(n) ~= "integer" then
    E.raise("DataLoader: expected a dataset (with #ds and ds:get(i), ds[i] or ds:get_batch(indices)), got " ..
      type(ds))
  end
  local bs = opts.batch_size or 1
  if math.type(bs) ~= "integer" or bs < 1 then
    E.raise("DataLoader: batch_size must be a positive integer, got " .. tostring(bs))
  end
  if opts.sampler ~= nil and opts.shuffle then
    E.raise("DataLoader: sampler and shuffle=true are mutually exclusive (the sampler decides the order)")
  end
  local s = opts.sampler
  if s ~= nil then
    if type(s) ~= "table" or type(s.indices) ~= "function" then
      E.raise("DataLoader: sampler must have a sampler:indices() method")
    end
  elseif opts.shuffle then
    s = sampler.RandomSampler(n)
  else
    s = sampler.SequentialSampler(n)
  end
  if opts.collate_fn ~= nil and type(opts.collate_fn) ~= "function" then
    E.raise("DataLoader: collate_fn must be a function")
  end
  return setmetatable({
    dataset = ds,
    batch_size = bs,
    drop_last = opts.drop_last and true or false,
    sampler = s,
    collate_fn = opts.collate_fn or DataLoader.default_collate,
  }, DataLoader)
end

local function batches(n, bs, drop_last)
  if drop_last then return n // bs end
  return (n + bs - 1) // bs
end

function DataLoader.__len(self) return batches(#self.sampler, self.batch_size, self.drop_last) end

local function unpack_result(...)
  if select("#", ...) == 1 then
    local r = ...
    if type(r) == "table" and not ddp.is_tensor(r) then return table.unpack(r) end
  end
  return ...
end

--- An iterator over one epoch's batches.
function DataLoader:iter()
  local ds, bs, collate = self.dataset, self.batch_size, self.collate_fn
  local idx = self.sampler:indices()
  local nb = batches(#idx, bs, self.drop_last)
  local get_batch, prefetch = ds.get_batch, ds.prefetch
  local function slice(b)
    local first = (b - 1) * bs + 1
    return table.move(idx, first, math.min(first + bs - 1, #idx), 1, {})
  end
  local b, nxt = 0, nb > 0 and slice(1) or nil
  if prefetch and nxt then prefetch(ds, nxt) end
  return function()
    b = b + 1
    if b > nb then return nil end
    local cur = nxt
    nxt = b < nb and slice(b + 1) or nil
    if get_batch then
      local r = table.pack(get_batch(ds, cur))
      if prefetch and nxt then prefetch(ds, nxt) end
      return table.unpack(r, 1, r.n)
    end
    local items = {}
    for k, i in ipairs(cur) do items[k] = dataset.item_fields(ds, i) end
    return unpack_result(collate(items))
  end
end

return DataLoader
