-- Single-process MLP training throughput and memory: the workload of
-- /work/shared/peers/torch_ddp_mlp.py 1 200 64 (MLP 784-1024-1024-10 on
-- Fashion-MNIST, SGD lr 0.05 momentum 0.9, batch 64, 1 BLAS thread, batches
-- cut from one shuffled permutation at (i * batch) % (n - batch), 5 warm-up
-- steps, then 200 timed steps), continued to 2000 steps to watch memory.
--
--   ddplua bench/mlp.lua [steps=2000] [timed=200] [batch=64]
--
-- Prints one line: samples/s over the timed steps, peak RSS (VmHWM), RSS
-- after 100 and after `steps` steps, and the last loss.
local ddp = require "ddplua"
local nn, optim, data = ddp.nn, ddp.optim, ddp.data

local cfg = { steps = 2000, timed = 200, batch = 64 }
for _, a in ipairs(arg or {}) do
  local k, v = a:match("^(%w+)=(%d+)$")
  if not k or cfg[k] == nil then error("usage: ddplua bench/mlp.lua [steps=N] [timed=N] [batch=N], got " .. a, 0) end
  cfg[k] = math.tointeger(tonumber(v))
end
if cfg.timed > cfg.steps or cfg.steps < 100 then error("need 100 <= steps and timed <= steps", 0) end

local function status_kib(field)
  local f = assert(io.open("/proc/self/status"))
  local s = f:read("a")
  f:close()
  return tonumber(s:match(field .. ":%s*(%d+)"))
end

ddp.set_num_threads(1)
ddp.manual_seed(0)
local ds = data.FashionMNIST { split = "train" }
local model = nn.Sequential {
  nn.Flatten(), nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10),
}
local opt = optim.SGD(model:parameters(), { lr = 0.05, momentum = 0.9 })
local criterion = nn.CrossEntropyLoss()
local perm = ddp.randperm(#ds):totable()
local n, bs = #perm, cfg.batch

local function step(i)
  local first = (i * bs) % (n - bs) + 1
  local x, y = ds:get_batch(table.move(perm, first, first + bs - 1, 1, {}))
  opt:zero_grad()
  local loss = criterion(model(x), y)
  loss:backward()
  opt:step()
  return loss
end

for i = 0, 4 do step(i) end
local t0, elapsed = ddp.clock(), nil
local rss100, loss
for i = 0, cfg.steps - 1 do
  loss = step(i)
  if i + 1 == cfg.timed then
    loss:item() -- the step's work is done when its loss is read
    elapsed = ddp.clock() - t0
  end
  if i + 1 == 100 then rss100 = status_kib("VmRSS") end
end
local rss_end = status_kib("VmRSS")
print(string.format("ddplua_mlp steps=%d batch=%d samples/s=%.0f peak_rss_kib=%d rss_100_kib=%d rss_%d_kib=%d " ..
  "loss=%.3f", cfg.steps, bs, cfg.timed * bs / elapsed, status_kib("VmHWM"), rss100, cfg.steps, rss_end,
  loss:item()))
