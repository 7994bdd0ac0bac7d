-- data.DataLoader(ds, {batch_size=1, shuffle=false, sampler=, drop_last=false,
-- collate_fn=, num_workers=0, prefetch_factor=2, persistent_workers=false,
-- timeout=0, worker_init_fn=, pin_memory=false}): batches of a dataset, in
-- the sampler's order.
--   for x, y in loader:iter() do ... end      #loader = batches per epoch
-- A dataset with get_batch (TensorDataset, FashionMNIST, ...) builds each
-- batch in one call and gets a prefetch(next_indices) hint when it has
-- prefetch; any other dataset is read item by item and the items are
-- combined by collate_fn (default: stack tensors, numbers become an int64
-- tensor, or float32 when any is fractional).
--
-- num_workers = N > 0: N worker processes build the batches while the
-- loop trains (lua/ddplua/data/worker_pool.lua: the same batches in the
-- same order; errors name the worker and the item). pin_memory is
-- accepted, as PyTorch scripts pass it, and changes nothing.
local ddp = require "ddplua"
local dataset = require "ddplua.data.dataset"
local sampler = require "ddplua.data.sampler"
local E = require "ddplua.errors"

local DataLoader = { __name = "DataLoader" }
DataLoader.__index = DataLoader
setmetatable(DataLoader, { __call = function(c, ...) return c.new(...) end })

-- Each worker is a forked process: more than this is a typo, not a machine.
local MAX_WORKERS = 1024

local VALID = { "batch_size", "shuffle", "sampler", "drop_last", "collate_fn", "num_workers", "prefetch_factor",
  "persistent_workers", "timeout", "worker_init_fn", "pin_memory" }
local valid = {}
for _, k in ipairs(VALID) do valid[k] = true end

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

local function check_workers(opts)
  local nw = opts.num_workers or 0
  if math.type(nw) ~= "integer" or nw < 0 or nw > MAX_WORKERS then
    E.raise("DataLoader: num_workers must be a non-negative integer, got " .. tostring(nw) .. " (at most " ..
      MAX_WORKERS .. ": each is a process)")
  end
  if nw == 0 and opts.prefetch_factor ~= nil then
    E.raise("DataLoader: prefetch_factor is for worker processes; it needs num_workers > 0")
  end
  if nw == 0 and opts.persistent_workers then
    E.raise("DataLoader: persistent_workers=true needs num_workers > 0")
  end
  local pf = opts.prefetch_factor or 2
  if math.type(pf) ~= "integer" or pf < 1 then
    E.raise("DataLoader: prefetch_factor must be a positive integer, got " .. tostring(pf))
  end
  local timeout = opts.timeout or 0
  if type(timeout) ~= "number" or not (timeout >= 0) then -- not (>= 0): NaN too
    E.raise("DataLoader: timeout must be a number of seconds >= 0 (0: wait forever), got " .. tostring(timeout))
  end
  if opts.worker_init_fn ~= nil and type(opts.worker_init_fn) ~= "function" then
    E.raise("DataLoader: worker_init_fn must be a function of the worker id, got " .. type(opts.worker_init_fn))
  end
  for _, k in ipairs { "persistent_workers", "pin_memory" } do
    if opts[k] ~= nil and type(opts[k]) ~= "boolean" then
      E.raise("DataLoader: " .. k .. " must be true or false, got " .. tostring(opts[k]))
    end
  end
  return nw, pf, timeout
end

function DataLoader.new(ds, opts)
  opts = opts or {}
  if type(opts) ~= "table" then E.raise("DataLoader: options must be a table") end
  for k in pairs(opts) do
    if not valid[k] then
      E.raise("DataLoader: unknown option '" .. tostring(k) .. "' (valid options: " .. table.concat(VALID, ", ") .. ")")
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
  local nw, pf, timeout = check_workers(opts)
  return setmetatable({
    dataset = ds,
    batch_size = bs,
    drop_last = opts.drop_last and true or false,
    sampler = s,
    collate_fn = opts.collate_fn or DataLoader.default_collate,
    num_workers = nw,
    prefetch_factor = pf,
    persistent_workers = opts.persistent_workers == true,
    timeout = timeout,
    worker_init_fn = opts.worker_init_fn,
    pin_memory = opts.pin_memory == true,
  }, DataLoader)
end

-- (n // bs plus one for a remainder: n + bs - 1 wrapped around for a batch_size near math.maxinteger)
local function batches(n, bs, drop_last)
  if drop_last then return n // bs end
  return n // bs + (n % bs > 0 and 1 or 0)
end

function DataLoader.__len(self) return batches(#self.sampler, self.batch_size, self.drop_last) end

local function unpack_result(...)
  if select("#", ...) == 1 then
    local r = ...
    if type(r) == "table" and not ddp.is_tensor(r) then return table.unpack(r) end
  end
  return ...
end
DataLoader._unpack_result = unpack_result
DataLoader._item_fields = dataset.item_fields

-- The epoch's batches as lists of dataset positions.
local function epoch_batches(self)
  local s = self.sampler
  -- a sampler that tells passes apart (DistributedSampler) hears of completed ones only
  local idx = s._draw and s:_draw() or s:indices()
  local bs, out = self.batch_size, {}
  for b = 1, batches(#idx, bs, self.drop_last) do
    local first = (b - 1) * bs + 1
    out[b] = table.move(idx, first, first - 1 + math.min(bs, #idx - first + 1), 1, {})
  end
  return out
end

local function pass_completed(self)
  if self.sampler._pass_completed then self.sampler:_pass_completed() end
end

-- In this process (num_workers = 0).
local function iter_here(self, list)
  local ds, collate = self.dataset, self.collate_fn
  local nb = #list
  local get_batch, prefetch = ds.get_batch, ds.prefetch
  if prefetch and nb > 0 then prefetch(ds, list[1]) end
  local b = 0
  return function()
    b = b + 1
    if b > nb then
      if b == nb + 1 then pass_completed(self) end
      return nil
    end
    local cur = list[b]
    if get_batch then
      local r = table.pack(get_batch(ds, cur))
      if prefetch and b < nb then prefetch(ds, list[b + 1]) end
      return table.unpack(r, 1, r.n)
    end
    local items = {}
    for k, i in ipairs(cur) do items[k] = dataset.item_fields(ds, i) end
    return unpack_result(collate(items))
  end
end

--- An iterator over one epoch's batches. With workers it also returns a
--- to-be-closed value, so `for ... in loader:iter()` stops them when the
--- loop ends early (break, error).
function DataLoader:iter()
  local list = epoch_batches(self)
  if self.num_workers == 0 then return iter_here(self, list) end
  local pool = rawget(self, "_pool")
  if pool and (pool.closed or not pool.done or not self.persistent_workers) then
    pool:shutdown() -- the last epoch's (left early, or not persistent)
    pool = nil
  end
  pool = pool or require("ddplua.data.worker_pool").start(self)
  rawset(self, "_pool", pool)
  local nb, epoch = #list, pool:epoch(list)
  local finished = false
  local f = function()
    local r = table.pack(epoch())
    if r.n == 0 or r[1] == nil then
      if not finished then
        finished = true
        pass_completed(self)
        if not self.persistent_workers then pool:shutdown() end
      end
      return nil
    end
    return table.unpack(r, 1, r.n)
  end
  local closer = setmetatable({}, { __close = function()
    if not finished and nb > 0 then pool:shutdown() end
  end })
  return f, nil, nil, closer
end

--- Stops the worker processes now (they also stop when the loader is
--- garbage collected, or with the process).
function DataLoader:shutdown()
  local pool = rawget(self, "_pool")
  if pool then pool:shutdown() end
end

return DataLoader
