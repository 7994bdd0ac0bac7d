-- Launch latency of the host: `ddplua --nproc 2 SCRIPT`, from exec to exit, median of N runs, beside
-- PyTorch's mp.spawn + gloo hello (peers/torch_hello.py) measured in the same run.
--   ./build/bin/ddplua bench/launch.lua [runs=20] [peer_runs=3]
-- Workloads: a trivial script (prints its rank), examples/hello.lua (init_process_group, one
-- all_reduce, destroy) when it exists, and bench/first_step.lua (Fashion-MNIST loaded, DDP wrap, one step:
-- the wait before a rerun trains; also after 6 s idle, 3 runs). Each run goes through /bin/sh (os.execute);
-- the time of `sh -c 'exec true'` is printed as the floor included in every figure.
-- Goal: <= 1/50 of PyTorch's figure (2.8-4.5 s on the 2-core reference machine), i.e. well under 60 ms.
local clock = require("ddplua.core").clock

local M = {}

local function q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

local function median(xs)
  table.sort(xs)
  local n = #xs
  return n % 2 == 1 and xs[(n + 1) / 2] or (xs[n / 2] + xs[n / 2 + 1]) / 2
end

--- Median wall time in seconds of `runs` executions of a shell command; errors if one fails.
function M.time_command(cmd, runs)
  local ts = {}
  for i = 1, runs do
    local t0 = clock()
    local ok, how, code = os.execute(cmd .. " >/dev/null")
    ts[i] = clock() - t0
    if not ok then error(("'%s' failed (%s %s)"):format(cmd, how, code)) end
  end
  return median(ts)
end

local function this_binary()
  local i = -1
  while arg and arg[i - 1] do i = i - 1 end
  return os.getenv("DDPLUA_BIN") or (arg and arg[i]) or "./build/bin/ddplua"
end

local function repo_root()
  local src = debug.getinfo(1, "S").source:match("^@(.*)/bench/[^/]*$")
  return src or "."
end

local function peers_dir(root)
  -- (an unset DDPLUA_PEERS must not end the list: ipairs stops at a nil)
  local candidates = { root .. "/../shared/peers", root .. "/../../shared/peers" }
  if os.getenv("DDPLUA_PEERS") then table.insert(candidates, 1, os.getenv("DDPLUA_PEERS")) end
  for _, d in ipairs(candidates) do
    local f = d and io.open(d .. "/torch_hello.py")
    if f then
      f:close()
      return d
    end
  end
end

--- Returns a list of {name=, seconds=} plus the peer's figure (or nil when PyTorch is not there).
function M.measure(runs, peer_runs)
  local bin, root = this_binary(), repo_root()
  local trivial = os.tmpname()
  local f = assert(io.open(trivial, "w"))
  f:write('print("rank", os.getenv("RANK"))\n')
  f:close()
  local function ddplua(args) return M.time_command("exec " .. q(bin) .. " " .. args, runs) end
  local rows = {
    { name = "sh -c 'exec true' (floor in every row)", seconds = M.time_command("exec true", runs) },
    { name = "ddplua trivial.lua (in-process)", seconds = ddplua(q(trivial)) },
    { name = "ddplua --nproc 2 trivial.lua", seconds = ddplua("--nproc 2 " .. q(trivial)), launch = true },
  }
  local hello = root .. "/examples/hello.lua"
  local hf = io.open(hello)
  if hf then
    hf:close()
    rows[#rows + 1] = { name = "ddplua --nproc 2 examples/hello.lua", seconds = ddplua("--nproc 2 " .. q(hello)),
      launch = true }
  end
  local first = root .. "/bench/first_step.lua"
  rows[#rows + 1] = { name = "ddplua --nproc 2 bench/first_step.lua", seconds = ddplua("--nproc 2 " .. q(first)),
    first_step = true }
  -- the same after 6 s with nothing running, as a rerun after an edit comes: memory freed by the last run may
  -- have gone back to a VM's host by then (src/tensor/alloc_cpu.c: huge pages cost 0.66 s here)
  local idle = {}
  for i = 1, 3 do
    os.execute("sleep 6")
    idle[i] = M.time_command("exec " .. q(bin) .. " --nproc 2 " .. q(first), 1)
  end
  rows[#rows + 1] = { name = "  the same after 6 s idle (median of 3)", seconds = median(idle), first_step_idle = true }
  os.remove(trivial)
  local peer, peers = nil, peers_dir(root)
  if peers and os.execute("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") then
    peer = M.time_command("cd " .. q(peers) .. " && exec /usr/bin/python3 torch_hello.py", peer_runs)
  end
  return rows, peer
end

local function main(runs, peer_runs)
  local rows, peer = M.measure(runs, peer_runs)
  print(("launch latency, median of %d runs (PyTorch: %d runs)"):format(runs, peer_runs))
  print(("%-44s %12s %12s %10s  %s"):format("workload", "ddplua ms", "PyTorch ms", "ratio", "goal <= 1/50"))
  for _, r in ipairs(rows) do
    local ratio, verdict = "", ""
    if r.launch and peer then
      ratio = ("1/%.0f"):format(peer / r.seconds)
      verdict = r.seconds <= peer / 50 and "pass" or "FAIL"
    end
    print(("%-44s %12.1f %12s %10s  %s"):format(r.name, r.seconds * 1000,
      r.launch and peer and ("%.0f"):format(peer * 1000) or "", ratio, verdict))
  end
  if not peer then print("(PyTorch peer not found: set DDPLUA_PEERS to the peers directory)") end
end

if arg and arg[0] and arg[0]:match("launch%.lua$") then
  main(tonumber(arg[1]) or 20, tonumber(arg[2]) or 3)
end
return M
