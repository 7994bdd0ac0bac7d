-- Datasets. The protocol every dataset follows (the DataLoader relies on it):
--   #ds                  number of items
--   ds:get(i) or ds[i]   item i (1-based): its fields as several values
--                        (x, y) or as one list {x, y}
--   ds:get_batch(idx)    optional: the batch at the 1-based positions of the
--                        Lua array idx, as tensors (x, y, ...), built at once
--   ds:prefetch(idx)     optional: a hint that get_batch(idx) comes next
-- TensorDataset and FashionMNIST gather their batches in C in one call.
local ddp = require "ddplua"
local E = require "ddplua.errors"
local core = ddp.core

local M = {}

local function check_position(who, i, n)
  if math.type(i) ~= "integer" or i < 1 or i > n then
    E.raise(string.format("%s: index %s out of range (positions are 1..%d)", who, tostring(i), n))
  end
end
M.check_position = check_position

-- Datasets index by integer as well as by method name.
local function dataset_class(name)
  local cls = {}
  cls.__name = name
  cls.__index = function(self, k)
    if math.type(k) == "integer" then return { self:get(k) } end
    return cls[k]
  end
  cls.__len = function(self) return self:len() end
  return setmetatable(cls, { __call = function(c, ...) return c.new(...) end })
end
M.dataset_class = dataset_class

-- TensorDataset(x, y, ...) ---------------------------------------------------

local TensorDataset = dataset_class("TensorDataset")
M.TensorDataset = TensorDataset

function TensorDataset.new(...)
  local n = select("#", ...)
  if n == 0 then E.raise("TensorDataset: expected at least one tensor") end
  local tensors = { ... }
  local len
  for i = 1, n do
    local t = tensors[i]
    if not ddp.is_tensor(t) then
      E.raise(string.format("TensorDataset: argument %d is a %s, expected a tensor", i, type(t)))
    end
    if t:dim() < 1 then E.raise(string.format("TensorDataset: tensor %d is 0-dimensional", i)) end
    len = len or t:size(1)
    if t:size(1) ~= len then
      E.raise(string.format("TensorDataset: size mismatch between tensors: tensor 1 has %d rows, tensor %d has %d", len,
        i, t:size(1)))
    end
  end
  return setmetatable({ tensors = tensors, _n = len }, TensorDataset)
end

function TensorDataset:len() return self._n end

function TensorDataset:get(i)
  check_position("TensorDataset", i, self._n)
  local out = {}
  for k, t in ipairs(self.tensors) do out[k] = t[i] end
  return table.unpack(out)
end

function TensorDataset:get_batch(indices)
  local out = {}
  for k, t in ipairs(self.tensors) do out[k] = core._gather_rows(t, indices) end
  return table.unpack(out)
end

-- Subset(ds, indices) ----------------------------------------------------------

local Subset = dataset_class("Subset")
M.Subset = Subset

local function item_fields(ds, i)
  local get = ds.get
  if get then
    local r = table.pack(get(ds, i))
    if r.n == 1 and type(r[1]) == "table" and not ddp.is_tensor(r[1]) then return r[1] end
    return r
  end
  local v = ds[i]
  if type(v) == "table" and not ddp.is_tensor(v) then return v end
  return { v, n = 1 }
end
M.item_fields = item_fields

function Subset.new(ds, indices)
  if ds == nil or type(indices) ~= "table" then E.raise("Subset: expected (dataset, list of positions)") end
  local n = #ds
  for k, i in ipairs(indices) do
    if math.type(i) ~= "integer" or i < 1 or i > n then
      E.raise(string.format("Subset: position %d holds %s, expected an index 1..%d of the dataset", k, tostring(i), n))
    end
  end
  local self = setmetatable({ dataset = ds, indices = indices }, Subset)
  -- batches go through the underlying dataset's fast paths when it has them
  if ds.get_batch then
    rawset(self, "get_batch", function(s, idx) return ds:get_batch(s:_map(idx)) end)
  end
  if ds.prefetch then
    rawset(self, "prefetch", function(s, idx) return ds:prefetch(s:_map(idx)) end)
  end
  return self
end

function Subset:len() return #self.indices end

function Subset:_map(idx)
  local out, map, n = {}, self.indices, #self.indices
  for k, i in ipairs(idx) do
    check_position("Subset", i, n)
    out[k] = map[i]
  end
  return out
end

function Subset:get(i)
  check_position("Subset", i, #self.indices)
  return table.unpack(item_fields(self.dataset, self.indices[i]))
end

-- random_split(ds, lengths, {seed=}) ---------------------------------------------

--- Splits ds into Subsets of the given lengths: counts summing to #ds, or
--- fractions summing to 1 (floor(n * f) each, the remainder handed out one
--- by one from the first split on, as PyTorch does). The permutation comes
--- from ddplua's generator; with seed= from a generator seeded just for it
--- (the global one is left untouched).
function M.random_split(ds, lengths, opts)
  if type(lengths) ~= "table" or #lengths == 0 then
    E.raise("random_split: expected a list of lengths or fractions")
  end
  opts = opts or {}
  for k in pairs(opts) do
    if k ~= "seed" then E.raise("random_split: unknown option '" .. tostring(k) .. "' (valid options: seed)") end
  end
  local n, sum = #ds, 0
  for i, l in ipairs(lengths) do
    if type(l) ~= "number" or l < 0 then
      E.raise(string.format("random_split: length %d must be a non-negative number, got %s", i, tostring(l)))
    end
    sum = sum + l
    -- (integer lengths past the dataset's size would wrap the sum around: math.maxinteger + 1)
    if math.type(l) == "integer" and l > n then
      E.raise(string.format("random_split: length %d is %d but the dataset has %d items", i, l, n))
    end
  end
  local counts = {}
  if math.abs(sum - 1) < 1e-9 and sum <= 1 + 1e-12 then
    local total = 0
    for i, f in ipairs(lengths) do
      counts[i] = math.floor(n * f)
      total = total + counts[i]
    end
    for r = 0, n - total - 1 do
      local i = r % #counts + 1
      counts[i] = counts[i] + 1
    end
  else
    for i, l in ipairs(lengths) do
      if math.type(l) ~= "integer" then
        E.raise(string.format("random_split: length %d is %s: give integer counts summing to %d or fractions summing "
          .. "to 1", i, tostring(l), n))
      end
      counts[i] = l
    end
    if sum ~= n then
      E.raise(string.format("random_split: the lengths sum to %s but the dataset has %d items", tostring(sum), n))
    end
  end
  local perm
  if opts.seed ~= nil then
    if math.type(opts.seed) ~= "integer" then E.raise("random_split: seed must be an integer") end
    perm = ddp.randperm(n, { generator = ddp.Generator(opts.seed) }):totable()
  else
    perm = ddp.randperm(n):totable()
  end
  local out, first = {}, 1
  for i, c in ipairs(counts) do
    out[i] = Subset.new(ds, table.move(perm, first, first + c - 1, 1, {}))
    first = first + c
  end
  return out
end

return M
