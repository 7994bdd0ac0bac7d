-- Checkpoint speed: ddp.save / ddp.load (safetensors, atomic: temporary
-- file + fsync + rename) against torch.save / torch.load of the same tensors
-- (with an fsync too, so both reach the disk), when /usr/bin/python3 has torch.
--
--   ./build/bin/ddplua bench/io_checkpoint.lua [MB=256] [DIR=/tmp]
--
-- Loads read a file the save just wrote (in the page cache), and copy every
-- tensor into an existing model tensor, as load_state_dict does: they
-- measure parsing, mapping/reading and copying, not the disk.
local ddp = require "ddplua"
local core = require "ddplua.core"

local mb = tonumber(arg[1] or "256")
local dir = arg[2] or "/tmp"
local path = string.format("%s/ddplua_bench_%d.safetensors", dir, core.getpid())
local n_tensors = 8
local per = math.floor(mb * 1024 * 1024 / 4 / n_tensors)
local sd = {}
for i = 1, n_tensors do sd[string.format("layer%d.weight", i)] = ddp.randn(per) end
local bytes = per * 4 * n_tensors

local function best_of(k, fn)
  local best = math.huge
  for _ = 1, k do
    local t0 = ddp.clock()
    fn()
    best = math.min(best, ddp.clock() - t0)
  end
  return best
end

local t_save = best_of(3, function() ddp.save(sd, path) end)
local model = {}
for k, v in pairs(sd) do model[k] = ddp.empty(v:size()) end
local function load_into_model(opts)
  local t = ddp.load(path, opts)
  for k, dst in pairs(model) do dst:copy_(t[k]) end
end
local t_load = best_of(3, function() load_into_model() end)
local t_read = best_of(3, function() load_into_model { mmap = false } end)
os.remove(path)

local mbytes = bytes / 1048576
print(string.format("%-28s %10s %10s", "", "seconds", "MB/s"))
print(string.format("%-28s %10.3f %10.0f", "ddp.save (fsync'ed)", t_save, mbytes / t_save))
print(string.format("%-28s %10.3f %10.0f", "ddp.load + copy_ (mapped)", t_load, mbytes / t_load))
print(string.format("%-28s %10.3f %10.0f", "ddp.load + copy_ (read)", t_read, mbytes / t_read))

local py = [[
import os, sys, time, torch
mb, path = float(sys.argv[1]), sys.argv[2]
n = 8; per = int(mb * 1024 * 1024 / 4 / n)
sd = {"layer%d.weight" % i: torch.randn(per) for i in range(1, n + 1)}
model = {k: torch.empty_like(v) for k, v in sd.items()}
def load():
    t = torch.load(path)
    for k, dst in model.items():
        dst.copy_(t[k])
def best(k, fn):
    b = float("inf")
    for _ in range(k):
        t0 = time.perf_counter(); fn(); b = min(b, time.perf_counter() - t0)
    return b
def save():
    with open(path, "wb") as f:
        torch.save(sd, f); f.flush(); os.fsync(f.fileno())
torch.set_num_threads(1)
print(best(3, save), best(3, load))
os.remove(path)
]]
local script = os.tmpname()
local f = assert(io.open(script, "w"))
f:write(py)
f:close()
local p = io.popen(string.format("/usr/bin/python3 %s %s %s/torch_bench_%d.pt 2>&1", script, mb, dir, core.getpid()))
local out = p:read("a")
p:close()
os.remove(script)
local ts, tl = out:match("^([%d.e%-]+) ([%d.e%-]+)")
if ts then
  ts, tl = tonumber(ts), tonumber(tl)
  print(string.format("%-28s %10.3f %10.0f", "torch.save (fsync'ed)", ts, mbytes / ts))
  print(string.format("%-28s %10.3f %10.0f", "torch.load + copy_", tl, mbytes / tl))
  print(string.format("ratios (torch time / ddplua time): save %.2fx, load %.2fx", ts / t_save, tl / t_load))
else
  print("torch peer not run: " .. out:gsub("\n", " "):sub(1, 200))
end
