-- The DataLoader's worker processes (DataLoader{num_workers = N}), as
-- PyTorch's: N fork()ed copies of this process each build whole batches
-- (the dataset's get / get_batch and the collate_fn run there) and hand
-- them back in shared memory (src/data/worker_proc.c), so a slow Lua get
-- does not stall training. The parent decides the order: batch b goes to
-- worker (b - 1) % N, at most prefetch_factor * N batches are in flight,
-- and batches are yielded in order, so a loader gives the same batches in
-- the same order as with num_workers = 0 (for a dataset whose items do not
-- depend on random numbers; each worker's generator is seeded with
-- base_seed + worker id, base_seed new every epoch, as PyTorch does).
--
-- An error in a worker is raised in the parent when its batch is due,
-- naming the worker, the item and the batch; a worker that dies (a signal,
-- os.exit) is an error naming it and how it ended. Workers die with the
-- parent (PR_SET_PDEATHSIG) and are reaped when the epoch ends, when the
-- loop is left early (the iterator's to-be-closed value), at the next
-- epoch, or when the pool is garbage collected; persistent_workers keeps
-- them from one epoch to the next. Items must be CPU tensors, numbers,
-- strings, booleans or tables of them (what ddp.save_state holds).
local ddp = require "ddplua"
local core = ddp.core
local state = require "ddplua.state"
local E = require "ddplua.errors"

local M = {}

-- A batch (table.pack of the loader's values) as text and tensors for the
-- socket, with ddp.save_state's codec: the tree as JSON, tensors by path.
local function encode_batch(res)
  local tree, tensors = state.encode({ n = res.n, v = { table.unpack(res, 1, res.n) } })
  local names, list = {}, {}
  for name in pairs(tensors) do names[#names + 1] = name end
  table.sort(names)
  for i, name in ipairs(names) do list[i] = tensors[name] end
  return core.json_encode({ tree = tree, names = names }, "batch"), list
end

local function decode_batch(text, ts)
  local m = core.json_decode(text, "batch")
  local tensors = {}
  for i, name in ipairs(m.names) do tensors[name] = ts[i] end
  local v = state.decode(m.tree, tensors)
  return { n = v.n, table.unpack(v.v, 1, v.n) }
end

-- Set in a worker process: data.get_worker_info()
M.info = nil

local Pool = {}
Pool.__index = Pool

-- The batch for `indices`, as the list of values the loader yields; calls
-- on_item(i) before reading item i (so an error can name it).
function M.build_batch(loader, indices, on_item)
  local ds, collate = loader.dataset, loader.collate_fn
  local get_batch = ds.get_batch
  if get_batch then return table.pack(get_batch(ds, indices)) end
  local items = {}
  for k, i in ipairs(indices) do
    on_item(i)
    items[k] = loader._item_fields(ds, i)
  end
  on_item(-1)
  return table.pack(loader._unpack_result(collate(items)))
end

-- The error with the traceback's frames outside the library (the
-- dataset's code, the user's collate_fn): the worker's own machinery
-- tells the user nothing.
local function traceback(err)
  local lines, level = { tostring(err) }, 2
  while true do
    local info = debug.getinfo(level, "Slnf")
    -- below build_batch: the worker's loop, then the parent's frames fork copied
    if info == nil or info.func == M.build_batch then break end
    if info.what ~= "C" and not E.in_library(info.source) then
      lines[#lines + 1] = string.format("\t%s:%d: in %s", info.short_src, info.currentline,
        info.name and ("function '" .. info.name .. "'") or (info.what == "main" and "main chunk" or "a function"))
    end
    level = level + 1
  end
  if #lines > 1 then table.insert(lines, 2, "worker traceback (your code):") end
  return table.concat(lines, "\n")
end

-- The worker's life: seed, worker_init_fn, then batches until stop or EOF.
local function run_worker(loader, id, n, seed, sock)
  core.set_num_threads(1) -- as PyTorch's workers: N processes, one thread each
  core.manual_seed(seed)
  math.randomseed(seed)
  M.info = { id = id, num_workers = n, seed = seed, dataset = loader.dataset }
  local init_error
  if loader.worker_init_fn then
    local ok, err = xpcall(loader.worker_init_fn, traceback, id)
    if not ok then init_error = "worker_init_fn failed: " .. tostring(err) end
  end
  while true do
    local kind, seq, _, _, ts = sock:recv()
    if kind ~= "task" then core._worker_exit(0) end -- stop, or the parent is gone
    local item = -1
    local ok, res
    if init_error then
      ok, res = false, init_error
    else
      local indices = ts[1]:totable()
      ok, res = xpcall(M.build_batch, traceback, loader, indices, function(i) item = i end)
    end
    local sent
    if ok then
      local encoded, text, tensors = pcall(encode_batch, res)
      if encoded then
        sent = pcall(sock.send, sock, "result", seq, -1, text, tensors)
      else
        sent = pcall(sock.send, sock, "error", seq, -1, "the batch cannot be sent to the main process: " ..
          tostring(text))
      end
    else
      sent = pcall(sock.send, sock, "error", seq, item, tostring(res))
    end
    if not sent then core._worker_exit(0) end -- the parent stopped listening (it stopped the pool, or died)
    io.stdout:flush()
    io.stderr:flush()
  end
end

-- A seed for this epoch's workers from the global generator's state and an
-- epoch count, without drawing from it: the main process's random numbers
-- stay those of num_workers = 0.
local function base_seed(loader)
  local st = core.get_rng_state()
  loader._worker_epochs = (loader._worker_epochs or 0) + 1
  return (st.seed * 1000003 + st.offset * 8191 + loader._worker_epochs * 131071) % (1 << 53)
end

--- Starts loader.num_workers workers.
function M.start(loader)
  local n, seed = loader.num_workers, base_seed(loader)
  local self = setmetatable({ workers = {}, n = n, owner = core.getpid(), seq = 0, loader = loader }, Pool)
  for w = 1, n do
    local role, a, b = core._worker_fork()
    if role == "child" then
      local ok, err = xpcall(run_worker, traceback, loader, w - 1, n, seed + w - 1, a)
      if not ok then io.stderr:write("ddplua: DataLoader worker ", w - 1, ": ", tostring(err), "\n") end
      core._worker_exit(1)
    end
    self.workers[w] = { id = w - 1, pid = a, sock = b, pending = {} }
  end
  return self
end

local function worker_ended(self, w, seq)
  local how = core._worker_reap(w.pid, 1)
  w.dead = true
  return string.format("DataLoader worker %d (pid %d) %s while loading batch %d", w.id, w.pid, how,
    seq - self.epoch_base)
end

--- The iterator over one epoch's batches (lists of dataset positions).
function Pool:epoch(batches)
  local loader = self.loader
  local nb, n = #batches, self.n
  -- batches in flight; prefetch_factor * n wraps around for a huge factor (then none was ever sent)
  local limit = loader.prefetch_factor > math.maxinteger // n and math.maxinteger or loader.prefetch_factor * n
  local base = self.seq
  self.epoch_base, self.seq = base, base + nb
  self.done = false
  local next_send, outstanding, results = 1, 0, {}
  local socks = {}
  for i, w in ipairs(self.workers) do socks[i] = w.sock end
  local function send_more()
    while next_send <= nb and outstanding < limit do
      local w = self.workers[(next_send - 1) % n + 1]
      local seq = base + next_send
      local ok, err = pcall(w.sock.send, w.sock, "task", seq, -1, nil,
        { ddp.tensor(batches[next_send], { dtype = "int64" }) })
      if not ok then
        -- the worker died since the last poll (its end is closed): name it, as receive does
        if not tostring(err):find("connection is closed", 1, true) then error(err, 0) end
        local first = seq
        for s in pairs(w.pending) do first = math.min(first, s) end
        err = worker_ended(self, w, first)
        self:shutdown()
        E.raise(err)
      end
      w.pending[seq] = true
      next_send, outstanding = next_send + 1, outstanding + 1
    end
  end
  -- waits for any message; false + a message when a worker ended
  local function receive(want)
    local timeout = loader.timeout > 0 and loader.timeout or nil
    local t0 = ddp.clock()
    while true do
      local slice = timeout and math.min(1.0, math.max(0, timeout - (ddp.clock() - t0))) or 1.0
      local k = core._worker_poll(socks, slice)
      if k then
        local w = self.workers[k]
        local kind, seq, item, text, ts = w.sock:recv(0)
        if kind == "closed" then
          local first = math.huge
          for s in pairs(w.pending) do first = math.min(first, s) end
          return false, worker_ended(self, w, first == math.huge and want or first)
        elseif kind == "result" or kind == "error" then
          w.pending[seq] = nil
          if seq > base then -- not a leftover of an abandoned epoch
            outstanding = outstanding - 1
            if kind == "result" then
              results[seq] = { true, decode_batch(text, ts) }
            else
              results[seq] = { false, w, item, text }
            end
          end
          return true
        end
      elseif timeout and ddp.clock() - t0 >= timeout then
        local w = self.workers[(want - base - 1) % n + 1]
        return false, string.format("DataLoader timed out after %g s waiting for batch %d from worker %d (pid %d)",
          timeout, want - base, w.id, w.pid)
      end
    end
  end
  local b = 0
  return function()
    b = b + 1
    if b > nb then
      self.done = true
      return nil
    end
    send_more()
    local seq = base + b
    while results[seq] == nil do
      local ok, err = receive(seq)
      if not ok then
        self:shutdown()
        E.raise(err)
      end
    end
    local r = results[seq]
    results[seq] = nil
    send_more()
    if not r[1] then
      local w, item, text = r[2], r[3], r[4]
      self:shutdown()
      local what = item >= 0 and string.format("on item %d of batch %d", item, b) or
        string.format("building batch %d", b)
      E.raise(string.format("DataLoader worker %d (pid %d) failed %s: %s", w.id, w.pid, what, text))
    end
    return table.unpack(r[2], 1, r[2].n)
  end
end

--- Stops and reaps the workers (a no-op in a worker's copy of the pool).
function Pool:shutdown()
  if self.closed or core.getpid() ~= self.owner then return end
  self.closed = true
  for _, w in ipairs(self.workers) do
    if not w.dead then pcall(w.sock.send, w.sock, "stop", 0) end
  end
  for _, w in ipairs(self.workers) do
    w.sock:close()
    if not w.dead then core._worker_reap(w.pid, 2) end
    w.dead = true
  end
end

Pool.__gc = Pool.shutdown
Pool.__close = Pool.shutdown

return M
