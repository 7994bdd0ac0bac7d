-- F.pad of a long 1-D signal: the first call of a new length (its position map built) and a repeated call, per
-- mode, beside PyTorch's F.pad on the same shape (one thread each; the map is core._pad_positions since 2026-12-07,
-- a Lua list of positions before).
--   ./build/bin/ddplua bench/pad_maps.lua [n=1000000]
local ddp = require "ddplua"
local F = ddp.nn.F
local n = 1000000
for _, a in ipairs(arg or {}) do n = tonumber(a:match("^n=(%d+)$")) or error("usage: bench/pad_maps.lua [n=N]", 0) end
ddp.set_num_threads(1)
local py = [[
import sys, time, torch
import torch.nn.functional as F
torch.set_num_threads(1)
n = int(sys.argv[1])
for mode in ["constant", "reflect", "replicate", "circular"]:
    x = torch.randn(1, 1, n + 7)
    t0 = time.perf_counter(); F.pad(x, (2, 3), mode); t1 = time.perf_counter(); F.pad(x, (2, 3), mode)
    t2 = time.perf_counter()
    print("%s %.2f %.2f" % (mode, (t1 - t0) * 1e3, (t2 - t1) * 1e3))
]]
local path = os.tmpname() -- the peer's script
local f = assert(io.open(path, "w"))
f:write(py)
f:close()
local p = assert(io.popen("/usr/bin/python3 " .. path .. " " .. n .. " 2>&1"))
local theirs = {}
for line in p:lines() do
  local mode, a, b = line:match("^(%a+) ([%d.]+) ([%d.]+)$")
  if mode then theirs[mode] = { a, b } end
end
p:close()
os.remove(path)
print(string.format("CPU: %s | F.pad of [1, 1, %d] by (2, 3), ms", ddp.core.cpu_info(), n + 7))
print(string.format("%-10s %12s %12s %14s %14s", "mode", "first", "again", "torch first", "torch again"))
for _, mode in ipairs({ "constant", "reflect", "replicate", "circular" }) do
  local x = ddp.randn(1, 1, n + 7)
  local t0 = ddp.clock()
  F.pad(x, { 2, 3 }, mode)
  local t1 = ddp.clock()
  F.pad(x, { 2, 3 }, mode)
  local t2 = ddp.clock()
  local t = theirs[mode] or { "-", "-" }
  print(string.format("%-10s %12.2f %12.2f %14s %14s", mode, (t1 - t0) * 1e3, (t2 - t1) * 1e3, t[1], t[2]))
end
