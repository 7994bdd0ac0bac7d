-- DistributedSampler with PyTorch's semantics (DESIGN.md section 8):
--   num_samples = ceil(N / R)   (drop_last: floor(N / R)),  total = num_samples * R
--   shuffle with a generator seeded by seed + epoch (the same order on every rank),
--   pad by repeating indices from the front (5 items on 2 ranks duplicate one),
--   rank r takes positions r, r+R, r+2R, ...
-- Positions are 1-based (PyTorch's index i is ddplua's i + 1).
--
-- Resuming mid-epoch (ddp.checkpoint_every / ddp.resume): the state is
-- {epoch, position, offset, num_replicas}: every rank took `position`
-- samples of the epoch's order after its first `offset` positions. Loaded
-- at the same world size, indices() skips them; loaded at another world size
-- (a node lost or joined), the epoch's first offset + position * R_old
-- positions are done and the rest of the order (its real items) is dealt out
-- again over the new ranks, padded or truncated as for a whole epoch: no
-- sample of the epoch is skipped, none repeated but for that padding.
local ddp = require "ddplua"
local E = require "ddplua.errors"

local DistributedSampler = {}
DistributedSampler.__index = DistributedSampler
DistributedSampler.__name = "DistributedSampler"

local function dataset_len(ds)
  if type(ds) == "number" then return ds end
  local ok, n = pcall(function() return #ds end)
  if ok and math.type(n) == "integer" then return n end
  if type(ds) == "table" and type(ds.len) == "function" then return ds:len() end
  E.raise("DistributedSampler: the dataset has no length (#dataset)")
end

local MAX_REPLICAS = 1 << 24

--- DistributedSampler(dataset, {num_replicas=, rank=, shuffle=true, seed=0, drop_last=false})
function DistributedSampler.new(dataset, opts)
  opts = opts or {}
  for k in pairs(opts) do
    if k ~= "num_replicas" and k ~= "rank" and k ~= "shuffle" and k ~= "seed" and k ~= "drop_last" then
      E.raise("DistributedSampler: unknown option '" .. tostring(k) ..
        "' (valid: num_replicas, rank, shuffle, seed, drop_last)")
    end
  end
  local R, rank = opts.num_replicas, opts.rank
  if R == nil or rank == nil then
    local dist = ddp.distributed
    if not dist.is_initialized() then
      E.raise("DistributedSampler: the process group is not initialised; call " ..
        "dist.init_process_group first or pass num_replicas= and rank=")
    end
    R = R or dist.get_world_size()
    rank = rank or dist.get_rank()
  end
  if math.type(R) ~= "integer" or R < 1 then
    E.raise("DistributedSampler: num_replicas must be a positive integer, got " .. tostring(R))
  end
  -- every epoch's padded order holds at least num_replicas positions: a world past 2^24 ranks would build tables
  -- of billions of entries (math.maxinteger looped until the process was killed)
  if R > MAX_REPLICAS then
    E.raise(string.format("DistributedSampler: num_replicas %d is more than the %d ranks a job can have", R,
      MAX_REPLICAS))
  end
  if math.type(rank) ~= "integer" or rank < 0 or rank >= R then
    E.raise(string.format("DistributedSampler: invalid rank %s, expected 0..%d", tostring(rank), R - 1))
  end
  local seed = opts.seed or 0
  if math.type(seed) ~= "integer" then E.raise("DistributedSampler: seed must be an integer") end
  local N = dataset_len(dataset)
  local drop_last = opts.drop_last and true or false
  local num_samples
  if drop_last and N % R ~= 0 then
    num_samples = (N - R) // R + (((N - R) % R ~= 0) and 1 or 0) -- ceil((N - R) / R) == floor(N / R)
  else
    num_samples = N // R + (N % R > 0 and 1 or 0)
  end
  local self = setmetatable({
    dataset = dataset,
    num_replicas = R,
    rank = rank,
    shuffle = opts.shuffle ~= false,
    seed = seed,
    drop_last = drop_last,
    epoch = 0,
    n = N,
    num_samples = num_samples,
    total_size = num_samples * R,
    _passes = {}, -- epoch -> full passes over its order (reported by the DataLoader)
    _warned = false,
    position = 0, -- samples of this epoch this rank already took (resume)
    offset = 0,   -- positions of this epoch's order taken before the world changed (resume)
  }, DistributedSampler)
  return self
end

function DistributedSampler:set_epoch(epoch)
  if math.type(epoch) ~= "integer" then E.raise("set_epoch: expected an integer epoch, got " .. tostring(epoch)) end
  if epoch ~= self.epoch then self.position, self.offset = 0, 0 end
  self.epoch = epoch
end

function DistributedSampler.__len(self) return self.num_samples end

--- The epoch's global order (all ranks, padded), 1-based.
function DistributedSampler:global_indices()
  local N, total = self.n, self.total_size
  local idx
  if self.shuffle then
    local g = ddp.Generator(self.seed + self.epoch)
    idx = ddp.randperm(N, { generator = g }):totable()
  else
    idx = {}
    for i = 1, N do idx[i] = i end
  end
  if not self.drop_last then
    local have = #idx
    local k = 1
    while #idx < total do -- repeat from the front
      idx[#idx + 1] = idx[k]
      k = k + 1
      if k > have then k = 1 end
    end
  else
    for i = #idx, total + 1, -1 do idx[i] = nil end
  end
  return idx
end

-- How many samples each rank takes of a segment of `len` positions.
local function per_rank(len, R, drop_last)
  if len <= 0 then return 0 end
  if drop_last then return len // R end
  return (len + R - 1) // R
end

-- The epoch's order after `offset` positions (its real items only), padded
-- from its front or truncated to a multiple of R, as global_indices.
local function segment(self, all)
  local seg = table.move(all, self.offset + 1, self.n, 1, {})
  local want = per_rank(#seg, self.num_replicas, self.drop_last) * self.num_replicas
  local have = #seg
  for i = have + 1, want do seg[i] = seg[(i - have - 1) % have + 1] end
  for i = #seg, want + 1, -1 do seg[i] = nil end
  return seg
end

--- A second complete pass over one epoch's shuffle means two epochs
--- trained on the same order: set_epoch was not called. A direct
--- indices() call counts as a pass; the DataLoader draws with _draw and
--- reports the passes it completes, so one cut short (peeking at a batch
--- before the loop) does not count.
function DistributedSampler:_pass_completed()
  if not self.shuffle then return end
  local n = (self._passes[self.epoch] or 0) + 1
  self._passes[self.epoch] = n
  if n == 2 and not self._warned then
    self._warned = true
    io.stderr:write(string.format("ddplua: warning: DistributedSampler: two epochs drew epoch %d's order (the " ..
      "same shuffle); call sampler:set_epoch(epoch) at the start of every epoch\n", self.epoch))
  end
end

--- This rank's positions for the current epoch (a Lua array, 1-based):
--- the ones it has not taken yet when a mid-epoch state was loaded.
function DistributedSampler:indices()
  self:_pass_completed()
  return self:_draw()
end

function DistributedSampler:_draw()
  local all = self:global_indices()
  local out = {}
  if self.offset == 0 then
    for p = self.rank + 1 + self.position * self.num_replicas, self.total_size, self.num_replicas do
      out[#out + 1] = all[p]
    end
    return out
  end
  local seg = segment(self, all)
  for p = self.rank + 1 + self.position * self.num_replicas, #seg, self.num_replicas do out[#out + 1] = seg[p] end
  return out
end

--- How many samples indices() gives this rank now (the epoch's, less those
--- a loaded state says it took).
function DistributedSampler:remaining()
  local count = self.offset == 0 and self.num_samples or per_rank(self.n - self.offset, self.num_replicas,
    self.drop_last)
  return math.max(count - self.position, 0)
end

--- Resume support: {epoch=, position=, offset=, num_replicas=} (see the top).
function DistributedSampler:state_dict()
  return { epoch = self.epoch, position = self.position, offset = self.offset, num_replicas = self.num_replicas }
end

local function shown(v) return type(v) == "string" and string.format("%q", v) or tostring(v) end

--- Checked here, so that a bad state is an error at load rather than at
--- the first iteration: epoch an integer, offset an integer in 0..N,
--- num_replicas a positive integer (default: this sampler's), position an
--- integer in 0..the samples each of those ranks takes of the epoch after
--- offset. A state saved at another num_replicas is re-sharded (see the top).
function DistributedSampler:load_state_dict(s)
  local function fail(fmt, ...) error(string.format("DistributedSampler: load_state_dict: " .. fmt, ...), 3) end
  if type(s) ~= "table" then fail("expected a table {epoch=, position=}, got a %s", type(s)) end
  for k in pairs(s) do
    if k ~= "epoch" and k ~= "position" and k ~= "offset" and k ~= "num_replicas" then
      fail("unknown field '%s' (expected epoch, position, offset, num_replicas)", tostring(k))
    end
  end
  local epoch, position, offset = s.epoch or 0, s.position or 0, s.offset or 0
  local R = s.num_replicas or self.num_replicas
  if math.type(epoch) ~= "integer" or epoch < 0 then
    fail("epoch is %s, expected a non-negative integer", shown(epoch))
  end
  if math.type(offset) ~= "integer" or offset < 0 or offset > self.n then
    fail("offset is %s, expected an integer in 0..%d (positions of the epoch's order)", shown(offset), self.n)
  end
  if math.type(R) ~= "integer" or R < 1 or R > MAX_REPLICAS then
    fail("num_replicas is %s, expected a positive integer up to %d", shown(R), MAX_REPLICAS)
  end
  local most = offset == 0 and R == self.num_replicas and self.num_samples or per_rank(self.n - offset, R, self.drop_last)
  if math.type(position) ~= "integer" or position < 0 or position > most then
    fail("position is %s, expected an integer in 0..%d (this rank's samples per epoch)", shown(position), most)
  end
  self.epoch = epoch
  if R == self.num_replicas then
    self.offset, self.position = offset, position
  else -- another world: every old rank took `position` of the segment, i.e. its first position * R positions
    self.offset, self.position = math.min(offset + position * R, self.n), 0
  end
end

--- Which rows of an all_gather of per-rank results (rank-major, num_samples
--- rows per rank) are real items, in the epoch's global order: a 1-based
--- list of rows, padding duplicates dropped. Every dataset item appears once.
function DistributedSampler:gather_order()
  local R, ns = self.num_replicas, self.num_samples
  local rows = {}
  local n_real = math.min(self.n, self.total_size)
  for p = 0, n_real - 1 do
    rows[#rows + 1] = (p % R) * ns + p // R + 1
  end
  return rows
end

return setmetatable(DistributedSampler, { __call = function(_, ...) return DistributedSampler.new(...) end })
