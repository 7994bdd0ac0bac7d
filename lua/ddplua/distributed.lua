-- ddp.distributed: process groups and collectives, as torch.distributed.
--
--   dist.init_process_group{backend="cpu", init_method="tcp://127.0.0.1:8009", world_size=2, rank=r}
--   dist.all_reduce(t, "sum")                  -- in place; also avg, max, min, prod
--   local w = dist.all_reduce(t, "avg", {async=true}); ...; w:wait()
--   dist.broadcast(t, 0)  dist.all_gather(list_or_out, t)  dist.barrier()
--   local g = dist.new_group({0, 1}); dist.all_reduce(t, "sum", {group=g})
--   dist.destroy_process_group()
--   dist.spawn(function(rank, ...) ... end, nprocs, ...)   -- mp.spawn for `ddplua script.lua`
--
-- Ranks are 0-based process ids (as RANK, NCCL and the seed tutorial);
-- src/dst arguments are global ranks, also with {group=g}.
local core = require "ddplua.core"
local E = require "ddplua.errors"
local C = core.dist

local M = {}

M.ReduceOp = { SUM = "sum", AVG = "avg", MAX = "max", MIN = "min", PRODUCT = "prod", PROD = "prod" }

for _, k in ipairs {
  "new_group", "destroy_process_group", "is_initialized", "get_rank", "get_world_size", "get_local_rank",
  "get_local_world_size", "get_backend", "spawn", "find_free_port", "nccl_available",
} do
  M[k] = C[k]
end

-- The collectives. A failure is reported at the user's line (the first
-- frame outside the library: for a collective inside ddp.save_checkpoint or
-- DDP's forward, the line that called those), and one that depends on what
-- the other ranks did (a mismatch, a timeout, a rank that left) also says
-- which call this rank was in and from where: every rank prints its own
-- side, so together they show each rank's call and its line.
local function annotate(name, err, from_library)
  local msg = tostring(err)
  if not (msg:find("mismatch", 1, true) or msg:find("timed out", 1, true) or msg:find("never arrived", 1, true)
      or msg:find("exited", 1, true) or msg:find("was killed", 1, true)) then
    return msg
  end
  local rank = C.is_initialized() and C.get_rank() or 0
  msg = string.format("%s\n  rank %d was in dist.%s%s at %s", msg, rank, name,
    from_library and " (inside a ddplua call)" or "", E.user_site())
  if msg:find("mismatch", 1, true) then
    msg = msg .. "\n  every rank must make the same collective calls in the same order (ddp.save_checkpoint is " ..
      "one: call it on every rank; to save from one rank, use ddp.save_state)"
  end
  return msg
end

-- dist.<name> runs C[cname] (the same but for PyTorch's tensor forms below),
-- its errors under the name the user called
local function collective(name, cname)
  local f = C[cname]
  return function(...)
    local ok, a, b = pcall(f, ...)
    if ok then return a, b end
    if name ~= cname and type(a) == "string" and a:sub(1, #cname + 1) == cname .. ":" then
      a = name .. a:sub(#cname + 1)
    end
    local caller = debug.getinfo(2, "S")
    E.raise(annotate(name, a, caller ~= nil and caller.what ~= "C" and E.in_library(caller.source)))
  end
end
for _, k in ipairs { "all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "barrier", "send", "recv" } do
  M[k] = collective(k, k)
end

-- PyTorch's tensor forms (torch.distributed 1.13): the output (all_gather)
-- or the input (reduce_scatter) is one tensor of world_size blocks, never a
-- list, so a port's shapes are checked as PyTorch checks them.
local function one_tensor(name, what, v, list_form)
  if not core.is_tensor(v) then
    E.raise(string.format("%s: the %s must be a tensor of world_size blocks, got %s (dist.%s takes a list)", name, what,
      type(v), list_form))
  end
  return v
end

local all_gather_t, reduce_scatter_t = collective("all_gather_into_tensor", "all_gather"),
  collective("reduce_scatter_tensor", "reduce_scatter")
function M.all_gather_into_tensor(output, input, opts)
  return all_gather_t(one_tensor("all_gather_into_tensor", "output", output, "all_gather"), input, opts)
end
function M.reduce_scatter_tensor(output, input, op, opts)
  return reduce_scatter_t(output, one_tensor("reduce_scatter_tensor", "input", input, "reduce_scatter"), op, opts)
end

local function env_int(name, what)
  local v = os.getenv(name)
  if v == nil or v == "" then return nil end
  local n = math.tointeger(tonumber(v))
  if not n then E.raise(string.format("init_process_group: environment variable %s=%q is not an integer%s", name, v,
    what and (" (" .. what .. ")") or "")) end
  return n
end

local function need(v, msg)
  if v == nil then E.raise("init_process_group: " .. msg) end
  return v
end

local valid_opts = { backend = true, init_method = true, world_size = true, rank = true, timeout = true }
local auto_vote = require "ddplua.backend_vote"

-- "auto" (the default): auto_vote (ddplua/backend_vote.lua) on this node is
-- this rank's vote, and the group is nccl only if every rank votes for it
-- (the C side pools the votes through the store); returns "auto", the vote
-- and the note. A world of one rank is cpu without asking: nothing crosses
-- ranks, and asking loads the CUDA plugin and initialises CUDA, after which
-- this process may no longer fork (a later dist.spawn is refused). PyTorch's
-- "gloo" is ddplua's cpu backend (rank 0 says so, once).
local function pick_backend(b, rank, world_size)
  b = b or os.getenv("DDPLUA_BACKEND")
  if b == nil or b == "" or b == "auto" then
    if world_size == 1 then return "cpu" end
    if not C.nccl_available() then return "auto", false end
    local choice, note = auto_vote(true, core.cuda_device_count(), env_int("LOCAL_WORLD_SIZE"))
    return "auto", choice == "nccl", note
  end
  if b == "gloo" then
    if (rank or 0) == 0 then
      io.stderr:write("ddplua: backend 'gloo' (PyTorch's CPU backend) runs as ddplua's 'cpu' backend\n")
    end
    return "cpu"
  end
  if b == "cpu" then return "cpu" end
  if b == "mpi" or b == "ucc" then
    E.raise(string.format("init_process_group: backend %q is not available in ddplua (backends: \"cpu\" (PyTorch's " ..
      "\"gloo\"), \"nccl\", \"auto\")", b))
  end
  if b == "nccl" then
    local ok, why = C.nccl_available()
    if ok then return "nccl" end
    if not core.cuda_is_available() then
      E.raise("init_process_group: backend 'nccl' needs CUDA, but " .. tostring(why) .. "; use backend='cpu'")
    end
    E.raise("init_process_group: backend 'nccl' is not available: " .. tostring(why) .. "; use backend='cpu' " ..
      "(it accepts CUDA tensors, staged through host memory)")
  end
  E.raise(string.format("init_process_group: unknown backend %q (expected \"cpu\" (or PyTorch's \"gloo\"), " ..
    "\"nccl\" or \"auto\")", tostring(b)))
end

-- PyTorch's positional form: init_process_group(backend, init_method,
-- timeout, world_size, rank), or (backend, {options}); -1 (PyTorch's
-- default world_size and rank) means unset.
local function positional_opts(backend, ...)
  local n, second = select("#", ...), ...
  if n == 1 and type(second) == "table" then
    local opts = {}
    for k, v in pairs(second) do opts[k] = v end
    if opts.backend ~= nil and opts.backend ~= backend then
      E.raise(string.format("init_process_group: backend %q given twice, differently (%q in the options)", backend,
        tostring(opts.backend)))
    end
    opts.backend = backend
    return opts
  end
  if n > 4 then E.raise("init_process_group: too many arguments (backend, init_method, timeout, world_size, rank)") end
  local init_method, timeout, world_size, rank = ...
  return { backend = backend, init_method = init_method, timeout = timeout,
    world_size = world_size ~= -1 and world_size or nil, rank = rank ~= -1 and rank or nil }
end

--- init_process_group{backend=, init_method=, world_size=, rank=, timeout=}
--- or init_process_group("gloo" | "nccl" | ..., ...) as PyTorch's. Every
--- field is optional under the launcher (and under dist.spawn).
function M.init_process_group(opts, ...)
  if type(opts) == "string" then opts = positional_opts(opts, ...) end
  opts = opts or {}
  if type(opts) ~= "table" then
    E.raise("init_process_group: expected a backend name or an options table, got " .. type(opts))
  end
  for k in pairs(opts) do
    if not valid_opts[k] then
      E.raise("init_process_group: unknown option '" .. tostring(k) ..
        "' (valid: backend, init_method, world_size, rank, timeout)")
    end
  end
  local given = opts
  opts = {}
  for k, v in pairs(given) do opts[k] = v end
  if opts.world_size == -1 then opts.world_size = nil end
  if opts.rank == -1 then opts.rank = nil end
  local backend, auto_nccl, note = pick_backend(opts.backend, opts.rank or tonumber(os.getenv("RANK") or "0"),
    opts.world_size or tonumber(os.getenv("WORLD_SIZE") or ""))
  local timeout = opts.timeout or tonumber(os.getenv("DDPLUA_TIMEOUT") or "") or 300
  if type(timeout) ~= "number" or not (timeout > 0) then -- not (> 0): NaN too
    E.raise("init_process_group: timeout must be a positive number of seconds, got " .. tostring(timeout))
  end
  local p = {
    backend = backend,
    auto_nccl = auto_nccl,
    timeout = timeout,
    debug = os.getenv("DDPLUA_DEBUG") == "1",
    rank = opts.rank or env_int("RANK"),
    world_size = opts.world_size or env_int("WORLD_SIZE"),
  }
  local method = opts.init_method or "env://"
  if type(method) ~= "string" then E.raise("init_process_group: init_method must be a string") end
  local host, port = method:match("^tcp://%[?([^%]]*)%]?:(%d+)$")
  if host then
    need(p.world_size, "init_method='" .. method .. "' needs world_size=")
    need(p.rank, "init_method='" .. method .. "' needs rank=")
    p.master_addr, p.master_port = host, tonumber(port)
    p.serve, p.bind = p.rank == 0, host -- rank 0 serves the store, as PyTorch's TCPStore
    -- processes started by hand each have their own job token (or none):
    -- the address is the shared secret, as with PyTorch's TCPStore
    p.token = "ddplua-tcp:" .. host .. ":" .. port
  elseif method == "env://" then
    local hint = " (run under `ddplua --nproc N`, inside dist.spawn, or set it)"
    p.master_addr = need(os.getenv("MASTER_ADDR"), "env:// needs MASTER_ADDR in the environment" .. hint)
    p.master_port = need(env_int("MASTER_PORT"), "env:// needs MASTER_PORT in the environment" .. hint)
    need(p.rank, "env:// needs RANK in the environment or rank=" .. hint)
    need(p.world_size, "env:// needs WORLD_SIZE in the environment or world_size=" .. hint)
    local launched = os.getenv("DDPLUA_LAUNCHED") == "1"
    -- without the launcher rank 0 serves the store (as torchrun-less env:// in PyTorch)
    p.serve, p.bind = (not launched) and p.rank == 0, p.master_addr
    p.token = os.getenv("DDPLUA_JOB_TOKEN") or "ddplua-env"
    p.local_rank, p.local_size = env_int("LOCAL_RANK"), env_int("LOCAL_WORLD_SIZE")
    p.node_rank, p.nnodes = env_int("NODE_RANK"), env_int("DDPLUA_NNODES")
  else
    E.raise(string.format("init_process_group: unsupported init_method %q (expected \"env://\" or " ..
      "\"tcp://host:port\")", method))
  end
  if math.type(p.rank) ~= "integer" or math.type(p.world_size) ~= "integer" or p.world_size < 1 then
    E.raise(string.format("init_process_group: rank and world_size must be integers (got rank=%s, world_size=%s)",
      tostring(p.rank), tostring(p.world_size)))
  end
  if p.rank < 0 or p.rank >= p.world_size then
    E.raise(string.format("init_process_group: rank %d is out of range for world_size %d (expected 0..%d)", p.rank,
      p.world_size, p.world_size - 1))
  end
  local clash = C._init(p)
  -- why auto chose cpu where this node has NCCL: one line per node
  if backend == "auto" then
    local why = note or clash or (auto_nccl and C.get_backend() == "cpu" and "ddplua: backend auto: not every " ..
      "rank of the job has NCCL and a GPU of its own: using the cpu group")
    if why and (p.local_rank or p.rank) == 0 then io.stderr:write(why, "\n") end
  end
end

--- The default group as an object: {group = dist.group.WORLD}.
M.group = setmetatable({}, { __index = function(_, k) if k == "WORLD" then return C._world() end end })

--- Tensor in the group's shared memory (nil when the group has none):
--- collectives on it read the peers' copies in place. DDP puts its
--- gradient buckets there.
function M.alloc_shared(n, dtype, opts) return C._alloc_shared(n, dtype, opts) end

-- run helpers (exported as ddp.is_main, ddp.print, ddp.device) -------------

--- True on rank 0, or when there is no process group (and the launcher did
--- not start this process as another rank).
function M.is_main()
  if C.is_initialized() then return C.get_rank() == 0 end
  local r = os.getenv("RANK")
  return r == nil or r == "" or r == "0"
end

--- print on the main process only.
function M.print(...)
  if M.is_main() then print(...) end
end

--- The device this rank computes on: "cuda:<local rank>" when a GPU is
--- available, else "cpu" (ddp.device()).
function M.device() return require("ddplua").device() end

--- gather_for_metrics(t, sampler): every rank's results for its shard of a
--- DistributedSampler (rows in the order of sampler:indices()), gathered on
--- every rank with all_gather and with the padding duplicates dropped, so a
--- metric covers each dataset item exactly once. Rows come back in the
--- epoch's global order; gather predictions and labels alike to align them.
function M.gather_for_metrics(t, sampler, opts)
  if not require("ddplua").is_tensor(t) then E.raise("gather_for_metrics: expected a tensor, got " .. type(t)) end
  if type(sampler) ~= "table" or type(sampler.gather_order) ~= "function" then
    E.raise("gather_for_metrics: expected the DistributedSampler that produced the rows")
  end
  local n = t:dim() > 0 and t:size(1) or 0
  if n ~= sampler.num_samples then
    E.raise(string.format("gather_for_metrics: the tensor has %d rows but the sampler gives this rank %d samples " ..
      "(gather the results of one whole epoch of the sampler)", n, sampler.num_samples))
  end
  local world = M.get_world_size(opts and opts.group)
  if world ~= sampler.num_replicas then
    E.raise(string.format("gather_for_metrics: the group has %d ranks but the sampler was built for %d", world,
      sampler.num_replicas))
  end
  local shape = t:size()
  shape[1] = n * world
  local all = require("ddplua").empty(shape, { dtype = t:dtype(), device = t:device() })
  M.all_gather(all, t:contiguous(), opts)
  return all:index_select(1, sampler:gather_order())
end

-- DistributedDataParallel lives in ddplua/distributed_data_parallel.lua
-- (loaded on first use; pairs(dist) loads it to list it).
setmetatable(M, {
  __index = function(t, k)
    if k == "DistributedDataParallel" or k == "DDP" then
      local v = require "ddplua.distributed_data_parallel"
      rawset(t, "DistributedDataParallel", v)
      rawset(t, "DDP", v)
      return v
    end
  end,
  __pairs = function(t)
    local _ = t.DistributedDataParallel
    return next, t, nil
  end,
})

return M
