-- DistributedDataParallel: wraps a module so that backward all-reduces
-- (averages) gradients across the process group, bucket by bucket, while
-- backward is still running (the reducer in src/distributed/ddp_reducer.c).
--
--   local model = dist.DistributedDataParallel(model, {bucket_cap_mb=25,
--                    find_unused_parameters=false, broadcast_buffers=true})
--   local opt = optim.SGD(model:parameters(), {lr=0.05})   -- after wrapping
--   do local _ <close> = model:no_sync() ... end            -- accumulate locally
--
-- The wrapper behaves as a Module: calling it runs the wrapped forward;
-- parameters(), named_parameters(), train(), eval(), to() pass through;
-- model.module is the wrapped module; state_dict() keys carry PyTorch's
-- "module." prefix.
local ddp = require "ddplua"
local core = ddp.core

local DDP = {}
DDP.__index = DDP
DDP.__name = "DistributedDataParallel"

local valid_opts = {
  bucket_cap_mb = true, find_unused_parameters = true, broadcast_buffers = true, process_group = true,
  device_ids = true, output_device = true, gradient_as_bucket_view = true, static_graph = true,
}

local function check_module(m)
  if type(m) ~= "table" or type(m.named_parameters) ~= "function" then
    error("DistributedDataParallel: expected an nn.Module, got " .. (type(m) == "table" and "a table" or type(m)), 3)
  end
end

-- Broadcasts rank 0's values of a list of tensors (coalesced per dtype into
-- one flat buffer, so wrapping a model costs one collective per dtype).
local function broadcast_tensors(dist, tensors, group)
  local by_dtype, order = {}, {}
  for _, t in ipairs(tensors) do
    local dt = t:dtype() .. "@" .. t:device()
    if not by_dtype[dt] then by_dtype[dt] = {}; order[#order + 1] = dt end
    table.insert(by_dtype[dt], t)
  end
  ddp.no_grad(function()
    for _, key in ipairs(order) do
      local list = by_dtype[key]
      local flat = ddp.cat((function()
        local parts = {}
        for i, t in ipairs(list) do parts[i] = t:reshape(-1) end
        return parts
      end)())
      dist.broadcast(flat, 0, { group = group })
      local off = 1
      for _, t in ipairs(list) do
        local n = t:numel()
        if n > 0 then t:copy_(flat:narrow(1, off, n):view(t:size())) end
        off = off + n
      end
    end
  end)
end

function DDP.new(module, opts)
  opts = opts or {}
  for k in pairs(opts) do
    if not valid_opts[k] then
      error("DistributedDataParallel: unknown option '" .. tostring(k) .. "' (valid: bucket_cap_mb, " ..
        "find_unused_parameters, broadcast_buffers, process_group, device_ids, output_device)", 2)
    end
  end
  check_module(module)
  local dist = ddp.distributed
  if not dist.is_initialized() then
    error("DistributedDataParallel: the default process group is not initialised; call " ..
      "dist.init_process_group() before wrapping the model", 2)
  end
  local group = opts.process_group
  local names, params = {}, {}
  for name, p in module:named_parameters() do
    names[#names + 1], params[#params + 1] = name, p
  end
  -- every rank must hold the same parameters: compare counts and shapes
  local n_el = 0
  local sig = 0
  for i, p in ipairs(params) do
    n_el = n_el + p:numel()
    for d, s in ipairs(p:size()) do sig = (sig * 31 + s * 7 + d + i) % 1000000007 end
  end
  local mine = ddp.tensor({ #params, n_el, sig })
  local world = dist.get_world_size(group)
  local all = ddp.zeros({ world, 3 }, { dtype = "int64" })
  dist.all_gather(all, mine, { group = group })
  local rows = all:totable()
  for r = 2, world do
    local a, b = rows[1], rows[r]
    if a[1] ~= b[1] or a[2] ~= b[2] or a[3] ~= b[3] then
      error(string.format("DistributedDataParallel: ranks hold different models: rank 0 has %d parameters " ..
        "(%d elements), rank %d has %d parameters (%d elements)%s", a[1], a[2], r - 1, b[1], b[2],
        (a[1] == b[1] and a[2] == b[2]) and " with different shapes" or ""), 2)
    end
  end
  -- rank 0's parameters and buffers everywhere
  local state = {}
  for _, p in ipairs(params) do state[#state + 1] = p end
  local buffers = {}
  if module.named_buffers then
    for _, b in module:named_buffers() do buffers[#buffers + 1] = b end
  end
  for _, b in ipairs(buffers) do state[#state + 1] = b end
  if #state > 0 then broadcast_tensors(dist, state, group) end

  local reducer = core.ddp_reducer(group, params, names, {
    bucket_cap_mb = opts.bucket_cap_mb or 25,
    first_bucket_mb = math.min(1, opts.bucket_cap_mb or 25),
    find_unused_parameters = opts.find_unused_parameters,
  })
  local self = setmetatable({
    module = module,
    reducer = reducer,
    process_group = group,
    broadcast_buffers = opts.broadcast_buffers ~= false,
    _buffers = buffers,
    find_unused_parameters = opts.find_unused_parameters and true or false,
  }, DDP)
  return self
end

function DDP:forward(...)
  if self.broadcast_buffers and #self._buffers > 0 and self.module.training ~= false then
    broadcast_tensors(ddp.distributed, self._buffers, self.process_group)
  end
  return self.module(...)
end

DDP.__call = function(self, ...) return self:forward(...) end

--- A to-be-closed guard: backward passes inside it accumulate gradients
--- locally; the next backward outside reduces the accumulated total.
function DDP:no_sync()
  local prev = self.reducer:set_sync(false)
  return setmetatable({}, { __close = function() self.reducer:set_sync(prev) end })
end

function DDP:parameters(...) return self.module:parameters(...) end
function DDP:named_parameters(...) return self.module:named_parameters(...) end
function DDP:buffers(...) return self.module:buffers(...) end
function DDP:named_buffers(...) return self.module:named_buffers(...) end
function DDP:children(...) return self.module:children(...) end
function DDP:modules(...) return self.module:modules(...) end
function DDP:train(mode) self.module:train(mode); return self end
function DDP:eval() self.module:eval(); return self end
function DDP:zero_grad(...) return self.module:zero_grad(...) end
function DDP:to(...)
  self.module:to(...)
  return self
end

--- state_dict keys carry PyTorch's "module." prefix (in the module's order).
function DDP:state_dict() return self.module:state_dict("module.") end

--- Accepts keys with or without the "module." prefix.
function DDP:load_state_dict(sd, strict)
  local inner = {}
  for k, v in pairs(sd) do inner[(k:gsub("^module%.", ""))] = v end
  return self.module:load_state_dict(inner, strict)
end

--- Reducer counters: buckets, how many all-reduces started during backward
--- (overlap), and how long before backward ended the first one started.
function DDP:reducer_stats() return self.reducer:stats() end

function DDP:__tostring()
  return "DistributedDataParallel(\n  (module): " .. tostring(self.module):gsub("\n", "\n  ") .. "\n)"
end

return setmetatable(DDP, { __call = function(_, ...) return DDP.new(...) end })
