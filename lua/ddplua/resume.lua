-- ddp.checkpoint_every / ddp.resume: a training loop that ends where an
-- uninterrupted one would, whatever kills it (ddplua --max_restarts starts
-- the ranks again; --nnodes MIN:MAX may start fewer or more of them).
--
--   local ckpt = ddp.checkpoint_every { path = run_dir .. "/resume.safetensors", steps = 100,
--     model = model, optimizer = opt, scheduler = scheduler, loader = train_loader }
--   local start = ddp.resume()            -- {epoch = 1, step = 0, resumed = false} without a file
--   for epoch = start.epoch, epochs do
--     train_loader.sampler:set_epoch(epoch)
--     for x, y in train_loader:iter() do
--       ... opt:step() ...
--       ckpt:step()                        -- once per batch, on every rank: saves when due
--     end
--   end
--
-- A save is ddp.save_checkpoint (rank 0 writes the file atomically, so the
-- file is always the last complete checkpoint): the model, optimizer and
-- scheduler, the generators (rng = true), the step count, the epoch and the
-- sampler's place in it: `position` is the samples each rank has taken of
-- the epoch, counted from the batches ckpt:step() saw (batch_size each, the
-- last one possibly short), so the resumed epoch goes on with the next
-- batch. With steps = N a save follows every N-th step; with seconds = S the
-- first step S seconds after the last save (rank 0's clock decides, sent to
-- every rank with a one-number broadcast per step). ddp.resume() loads the
-- file on every rank if rank 0 finds it; a sampler saved at another world
-- size is re-sharded (data/distributed_sampler.lua), the generators are then
-- not restored (they are per rank).
local core = require "ddplua.core"
local rank = require "ddplua.rank"

local M = {}

local current -- this run's latest checkpoint_every, for ddp.resume()

local Every = {}
Every.__index = Every
Every.__name = "checkpoint_every"

local OPTS = { "path", "steps", "seconds", "model", "optimizer", "scheduler", "loader", "sampler", "batch_size",
  "extra" }

local function fail(fmt, ...) error(string.format("checkpoint_every: " .. fmt, ...), 3) end

--- Tells the ddplua host where the run keeps its files (restarts.log).
function M.note_run_dir(dir)
  if rank.is_main() and package.preload["ddplua.host"] then require("ddplua.host").note_run_dir(dir) end
end

local function device()
  local ddp = package.loaded["ddplua"]
  return ddp and ddp.device and ddp.device() or "cpu"
end

-- Rank 0's boolean on every rank (a broadcast when a group runs).
local function agree(flag)
  local dist = rank.dist()
  if not dist or dist.get_world_size() == 1 then return flag end
  local t = core.tensor({ flag and 1 or 0 }, { dtype = "int64", device = device() })
  dist.broadcast(t, 0)
  return t:item() == 1
end

--- checkpoint_every{path=, steps= | seconds=, model=, optimizer=, scheduler=,
--- loader= | sampler= + batch_size=, extra=}
function M.every(opts)
  if type(opts) ~= "table" then fail("expected a table of options, got a %s", type(opts)) end
  local valid = {}
  for _, k in ipairs(OPTS) do valid[k] = true end
  for k in pairs(opts) do
    if not valid[k] then fail("unknown option '%s' (valid: %s)", tostring(k), table.concat(OPTS, ", ")) end
  end
  if type(opts.path) ~= "string" or opts.path == "" then fail("path must be a file name, got %s", tostring(opts.path)) end
  if (opts.steps == nil) == (opts.seconds == nil) then fail("give either steps= or seconds= (how often to save)") end
  if opts.steps ~= nil and (math.type(opts.steps) ~= "integer" or opts.steps < 1) then
    fail("steps must be a positive integer, got %s", tostring(opts.steps))
  end
  if opts.seconds ~= nil and (type(opts.seconds) ~= "number" or not (opts.seconds > 0)) then
    fail("seconds must be a positive number, got %s", tostring(opts.seconds))
  end
  if type(opts.model) ~= "table" then fail("model= is needed (the module to save and restore)") end
  local sampler, bs = opts.sampler, opts.batch_size
  if opts.loader ~= nil then
    if type(opts.loader) ~= "table" or opts.loader.sampler == nil or opts.loader.batch_size == nil then
      fail("loader must be a DataLoader, got %s", type(opts.loader))
    end
    if sampler ~= nil or bs ~= nil then fail("give loader= or sampler= with batch_size=, not both") end
    sampler, bs = opts.loader.sampler, opts.loader.batch_size
  end
  if sampler ~= nil then
    if type(sampler) ~= "table" or type(sampler.state_dict) ~= "function" or type(sampler.load_state_dict) ~=
        "function" then
      fail("the sampler must have state_dict() and load_state_dict() (a DistributedSampler), got %s", type(sampler))
    end
    if math.type(bs) ~= "integer" or bs < 1 then fail("batch_size must be a positive integer, got %s", tostring(bs)) end
  end
  local self = setmetatable({
    path = opts.path, steps = opts.steps, seconds = opts.seconds, model = opts.model, optimizer = opts.optimizer,
    scheduler = opts.scheduler, sampler = sampler, batch_size = bs, extra = opts.extra,
    step_count = 0, batches = 0, epoch_seen = nil, last_save = core.clock(), saves = 0,
  }, Every)
  M.note_run_dir(opts.path:match("^(.*)/[^/]*$") or ".")
  current = self
  return self
end

-- The sampler's state as of now: its position advanced by the batches of
-- this epoch (capped at what this rank had left when the epoch began).
function Every:_sampler_state()
  local s = self.sampler
  local state = s:state_dict()
  if type(state) == "table" and math.type(state.position) == "integer" and type(s.remaining) == "function" then
    local left = s:remaining()
    state.position = state.position + math.min(self.batches * self.batch_size, left)
  end
  return state
end

--- Saves now (every rank calls it).
function Every:save(epoch)
  local s = self.sampler
  require("ddplua.checkpoint").save(self.path, {
    model = self.model, optimizer = self.optimizer, scheduler = self.scheduler,
    sampler = s and self:_sampler_state() or nil, epoch = epoch or (s and s.epoch) or self.epoch,
    step = self.step_count, rng = true, extra = self.extra,
  })
  self.last_save = core.clock()
  self.saves = self.saves + 1
end

--- One batch done (after opt:step()); saves when due. Returns true when it saved.
function Every:step(epoch)
  local s = self.sampler
  local e = s and s.epoch or epoch
  if e ~= self.epoch_seen then
    self.epoch_seen, self.batches = e, 0
  end
  self.epoch = e
  self.batches = self.batches + 1
  self.step_count = self.step_count + 1
  local due
  if self.steps then due = self.step_count % self.steps == 0
  else due = agree(core.clock() - self.last_save >= self.seconds) end
  if due then self:save(epoch) end
  return due
end

--- resume([ckpt]) -> {epoch=, step=, resumed=, world_size=}: the state of
--- the last complete checkpoint restored into ckpt's objects (default: this
--- run's latest checkpoint_every), or {epoch = 1, step = 0, resumed = false}.
function M.resume(every)
  every = every or current
  if getmetatable(every) ~= Every then
    error("resume: call ddp.checkpoint_every{...} first (it names the file and what to restore), or pass its " ..
      "result", 2)
  end
  local f = io.open(every.path, "rb")
  if f then f:close() end
  if not agree(f ~= nil) then return { epoch = 1, step = 0, resumed = false } end
  local info = require("ddplua.checkpoint").load(every.path, { model = every.model, optimizer = every.optimizer,
    scheduler = every.scheduler, sampler = every.sampler })
  every.step_count = info.step or 0
  every.epoch_seen, every.batches = every.sampler and every.sampler.epoch or info.epoch, 0
  local now = rank.world_size()
  rank.print(string.format("resumed from %s: epoch %d, step %d%s", every.path, info.epoch or 1, every.step_count,
    info.world_size and info.world_size ~= now and
    string.format(" (saved by %d ranks, now %d: the epoch's remaining samples are dealt out again)",
      info.world_size, now) or ""))
  return { epoch = info.epoch or 1, step = every.step_count, resumed = true, world_size = info.world_size }
end

return M
