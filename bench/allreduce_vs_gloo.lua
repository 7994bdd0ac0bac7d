-- all_reduce bandwidth of ddplua's cpu process group beside PyTorch's gloo,
-- measured in the same run (2 ranks, float32 sum, 16 MiB and 100 MiB), with
-- the goal ratio (>= 5x gloo's algbw) and busbw as a fraction of memcpy.
-- On a machine shared with other work single runs swing by 2x, so every
-- measurement is repeated (interleaved) and the medians are compared.
--   ddplua bench/allreduce_vs_gloo.lua [nproc=2] [reps=3]
local nproc, reps = 2, 3
for _, a in ipairs(arg or {}) do
  nproc = tonumber(a:match("^nproc=(%d+)$")) or nproc
  reps = tonumber(a:match("^reps=(%d+)$")) or reps
end

local exe = arg and arg[-1] or "ddplua"
local peers = os.getenv("DDPLUA_PEERS") or "/work/shared/peers"
-- the peer's iteration counts are the project's reference commands; ddplua
-- runs more iterations of its own for a steadier time
local cases = { { floats = 4194304, iters = 20, ours = 50 }, { floats = 26214400, iters = 5, ours = 20 } }

local function capture(cmd)
  local p = assert(io.popen(cmd .. " 2>&1"))
  local out = p:read("a")
  p:close()
  return out
end

local function gloo(floats, iters)
  local out = capture(string.format("/usr/bin/python3 %s/torch_allreduce.py %d %d %d", peers, nproc, floats, iters))
  local bw = out:match("algbw=([%d.]+)GB/s")
  if not bw then error("torch_allreduce.py did not report a bandwidth:\n" .. out) end
  return tonumber(bw)
end

local function ours(floats, iters, shared)
  local out = capture(string.format("%s examples/allreduce_bench.lua nproc=%d sizes=%d iters=%d shared=%d", exe, nproc,
    floats * 4, iters, shared))
  local memcpy = tonumber(out:match("memcpy ([%d.]+) GB/s"))
  local row = out:match("\n%s*" .. floats * 4 .. "%s+[^\n]*")
  if not row or not memcpy then error("allreduce_bench.lua printed no result:\n" .. out) end
  local v = {}
  for x in row:gmatch("[%d.]+") do v[#v + 1] = tonumber(x) end
  return v[5], v[6], memcpy -- algbw, busbw
end

local function median(t)
  table.sort(t)
  return t[(#t + 1) // 2]
end

print(string.format("all_reduce float32 sum, %d ranks, median of %d runs (goal: >= 5x gloo's algbw)", nproc, reps))
print(string.format("%10s %10s %12s %8s %8s %12s %8s %8s", "bytes", "gloo", "ddplua", "ratio", "bus/mcpy",
  "ddplua-shm", "ratio", "bus/mcpy"))
for _, c in ipairs(cases) do
  local g, a, b, as, bs = {}, {}, {}, {}, {}
  for r = 1, reps do
    g[r] = gloo(c.floats, c.iters)
    local x, y, m = ours(c.floats, c.ours, 0)
    a[r], b[r] = x, y / m
    x, y, m = ours(c.floats, c.ours, 1)
    as[r], bs[r] = x, y / m
  end
  local gm = median(g)
  print(string.format("%10d %6.2fGB/s %8.2fGB/s %7.1fx %8.2f %8.2fGB/s %7.1fx %8.2f", c.floats * 4, gm, median(a),
    median(a) / gm, median(b), median(as), median(as) / gm, median(bs)))
end
