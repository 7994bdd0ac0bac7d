-- The differential suite against PyTorch (make test runs 6000 cases through tests/spec/diff_suite_spec.lua, on the
-- Release build and on the ASan/UBSan build; docs/differential_suite.md has the long run and its table):
--
--   ./build/bin/ddplua tests/diff/run.lua
--   SEED=7 DIFF_CASES=50000 ./build/bin/ddplua tests/diff/run.lua   other cases / a long run
--   DIFF_OPS=conv2d,matmul ...                                       only these ops (rows of the table)
--   DIFF_BIN=build-asan/bin/ddplua ...                               the ddplua that runs the cases (ASan build)
--   DIFF_KEEP=1 ...                                                  keep the case files (their directory is printed)
--
-- Draws DIFF_CASES random cases (default 20000) over the ops of tests/diff/ops.lua (DIFF_OPS_MODULE: another list,
-- for the suite's own spec) from SEED (fixed in CI), writes their inputs (safetensors) and descriptions (JSON) to a
-- temporary directory, computes PyTorch's results for all of them in one python3 process (tests/diff/torch_ref.py),
-- then runs them in a ddplua child process (tests/diff/run_cases.lua) that compares outputs and gradients. A child
-- that dies (a crash, a sanitizer report, a case making no progress for DIFF_TIMEOUT seconds, default 60) is blamed on
-- the case it had started, and a new child goes on after it. Prints the per-op table (cases, matches, both refused,
-- known differences, mismatches, crashes) and, for each mismatch or crash (up to DIFF_REPRO per op, default 2), a
-- Lua program that rebuilds the inputs, runs the op and its backward and prints what ddplua gives. Exits 1 on any
-- crash or on any mismatch that docs/pytorch_differences.md (tests/diff/known_differences.lua) does not explain.
package.path = "./tests/?.lua;./?.lua;" .. package.path
local ddp = require "ddplua"
local G = require "tests.diff.gen"
local OPS = os.getenv("DIFF_OPS_MODULE") and dofile(os.getenv("DIFF_OPS_MODULE")) or require "tests.diff.ops"
local known = require "tests.diff.known_differences"
local helpers = require "tests.diff.helpers"

local SEED = math.tointeger(tonumber(os.getenv("SEED") or "")) or 20250611
local N = math.tointeger(tonumber(os.getenv("DIFF_CASES") or "")) or 20000
local BIN = os.getenv("DIFF_BIN") or "./build/bin/ddplua"
local TIMEOUT = tonumber(os.getenv("DIFF_TIMEOUT") or "") or 60
local REPRO = math.tointeger(tonumber(os.getenv("DIFF_REPRO") or "")) or 2
local PYTHON = os.getenv("DIFF_PYTHON") or "/usr/bin/python3"

local function q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end
local function read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

if not os.execute(q(PYTHON) .. " -c 'import torch' >/dev/null 2>&1") then
  print("differential suite: skipped (" .. PYTHON .. " cannot import torch)")
  os.exit(0)
end

-- the known differences and their page must agree (one list, documented)
local sections, why = known.check_page(read("docs/pytorch_differences.md") or "")
if not sections then
  io.stderr:write(why .. "\n")
  os.exit(1)
end

-- ---- the ops to draw from ----
local selected = {}
local only = os.getenv("DIFF_OPS")
local wanted = {}
if only and only ~= "" then
  for name in only:gmatch("[^,%s]+") do wanted[name] = true end
end
for _, e in ipairs(OPS) do
  if not next(wanted) or wanted[e.name] then
    for _ = 1, e.weight or 1 do selected[#selected + 1] = e end
  end
end
assert(#selected > 0, "DIFF_OPS selects no op")

-- ---- JSON-safe arguments: integers and floats (NaN, inf) keep their type ----
local function encode(v)
  if math.type(v) == "integer" then return { ["$i"] = tostring(v) } end
  if math.type(v) == "float" then
    local s = v ~= v and "nan" or v == math.huge and "inf" or v == -math.huge and "-inf" or string.format("%.17g", v)
    return { ["$f"] = s }
  end
  if type(v) == "table" then
    local out = {}
    for k, x in pairs(v) do out[k] = encode(x) end
    return out
  end
  return v
end

-- ---- draw the cases ----
local dir = os.tmpname()
os.remove(dir)
assert(os.execute("mkdir -p " .. q(dir)))
local t0 = ddp.clock()
local cases, tensors = {}, {}
for pos = 1, N do
  local e = selected[(pos - 1) % #selected + 1]
  local g = G.new(SEED * 1000003 + pos)
  local A = e.gen(g) or {}
  g.last_args = A
  local c = { id = pos, op = e.name, lua = e.lua, torch = e.torch, args = encode(A), inputs = {},
    grad = e.grad ~= false, tol = e.tol, grad_tol = e.grad_tol, max_abs = g.max_abs, n_special = g.n_special }
  for _, inp in ipairs(g.inputs) do
    local key = "c" .. pos .. "_" .. inp.name
    local t
    if #inp.base_shape == 0 then t = ddp.tensor(inp.values[1], { dtype = inp.dtype })
    else t = ddp.tensor(inp.values, { dtype = inp.dtype }):view(inp.base_shape) end
    tensors[key] = t
    c.inputs[#c.inputs + 1] = { name = inp.name, key = key, dtype = inp.dtype, base_shape = inp.base_shape,
      layout = inp.layout, requires_grad = inp.requires_grad }
  end
  c.values = nil
  cases[pos] = { case = c, gen = g, entry = e }
end
local json_cases = {}
for pos = 1, N do json_cases[pos] = cases[pos].case end
ddp.save(tensors, dir .. "/inputs.safetensors")
local f = assert(io.open(dir .. "/cases.json", "wb"))
f:write(ddp.core.json_encode({ cases = json_cases }))
f:close()
local t_gen = ddp.clock() - t0

-- ---- PyTorch ----
t0 = ddp.clock()
local ok = os.execute(q(PYTHON) .. " tests/diff/torch_ref.py " .. q(dir .. "/cases.json") .. " " ..
  q(dir .. "/inputs.safetensors") .. " " .. q(dir .. "/results.json") .. " " .. q(dir .. "/results.safetensors"))
assert(ok, "tests/diff/torch_ref.py failed")
local t_torch = ddp.clock() - t0

-- ---- ddplua, in children; a death is blamed on the case it started ----
-- The shell runs the child and kills it when its log has not grown for TIMEOUT seconds (a hang in one case);
-- it writes the child's exit status (128 + n for signal n) to DIR/rc.
local WATCH = [[
"$@" >"$D/child.out" 2>&1 &
pid=$!
last=-1 idle=0
while kill -0 $pid 2>/dev/null; do
  sleep 0.1
  n=$(wc -c <"$D/log" 2>/dev/null || echo 0)
  if [ "$n" = "$last" ]; then idle=$((idle + 1)); else idle=0 last=$n; fi
  if [ $idle -ge $((T * 10)) ]; then kill -KILL $pid 2>/dev/null; echo timeout >"$D/hung"; break; fi
done
wait $pid 2>/dev/null
echo $? >"$D/rc"
]]
local verdicts = {}
-- runs the cases at `positions` in children (LIST: the file that lists them for the child); a death is blamed on the
-- case it had started and the next child goes on after it
local function run_children(list_name, positions, extra)
  local lf = assert(io.open(dir .. "/" .. list_name, "wb"))
  lf:write(ddp.core.json_encode({ positions = positions, conditioning = extra or false }))
  lf:close()
  local index = {}
  for k, pos in ipairs(positions) do index[pos] = k end
  local next_k = 1
  while next_k <= #positions do
    os.remove(dir .. "/hung")
    local f = assert(io.open(dir .. "/log", "w"))
    f:close()
    os.execute("D=" .. q(dir) .. " T=" .. q(TIMEOUT) .. " sh -c " .. q(WATCH) .. " watch " .. q(BIN) ..
      " tests/diff/run_cases.lua " .. q(dir) .. " " .. q(list_name) .. " " .. next_k)
    local rc = tonumber((read(dir .. "/rc") or ""):match("%d+")) or -1
    local started
    for line in (read(dir .. "/log") or ""):gmatch("[^\n]+") do
      local p = line:match("^start (%d+)$")
      if p then started = tonumber(p) end
      local dp_, verdict, detail = line:match("^done (%d+) (%S+) ?(.*)$")
      if dp_ then
        verdicts[tonumber(dp_)] = { verdict, detail }
        started = nil
        next_k = index[tonumber(dp_)] + 1
      end
    end
    if next_k <= #positions then
      local out = (read(dir .. "/child.out") or ""):gsub("%s+$", "")
      if not started then -- it died before its first case: the runner itself is broken, not a case
        io.stderr:write("tests/diff/run_cases.lua failed before running a case (status " .. rc .. "):\n" .. out .. "\n")
        os.exit(1)
      end
      local how = read(dir .. "/hung") and string.format("made no progress for %g s (killed)", TIMEOUT) or
        rc > 128 and "was killed by signal " .. (rc - 128) or "exited with status " .. rc
      verdicts[started] = { "crash", string.format("the child %s; its last output: %s", how,
        out:sub(-600):gsub("\n", " | ")) }
      next_k = index[started] + 1
    end
  end
end

t0 = ddp.clock()
local all = {}
for pos = 1, N do all[pos] = pos end
run_children("list.json", all)
-- a value mismatch of an op whose result may be ill-conditioned (entry.conditioning) is rechecked against how far
-- PyTorch's own float64 result moves under one-ulp perturbations of its inputs (torch_ref.py --conditioning)
local recheck = {}
for pos = 1, N do
  local v, e = verdicts[pos], cases[pos].entry
  if v and v[1] == "mismatch" and e.conditioning and v[2]:find("element %d+:") then recheck[#recheck + 1] = pos end
end
if #recheck > 0 then
  local pf = assert(io.open(dir .. "/recheck.json", "wb"))
  pf:write(ddp.core.json_encode({ positions = recheck }))
  pf:close()
  assert(os.execute(q(PYTHON) .. " tests/diff/torch_ref.py --conditioning " .. q(dir .. "/cases.json") .. " " ..
    q(dir .. "/inputs.safetensors") .. " " .. q(dir .. "/recheck.json") .. " " .. q(dir .. "/cond.json") .. " " ..
    q(dir .. "/cond.safetensors")), "tests/diff/torch_ref.py --conditioning failed")
  run_children("list_cond.json", recheck, true)
end
local t_ddp = ddp.clock() - t0

-- ---- the table and the reproducers ----
local function lua_literal(v)
  if math.type(v) == "integer" then
    return v == math.mininteger and "math.mininteger" or string.format("%d", v)
  end
  if math.type(v) == "float" then
    if v ~= v then return "0/0" end
    if v == math.huge then return "math.huge" end
    if v == -math.huge then return "-math.huge" end
    return string.format("%.17g", v)
  end
  if type(v) == "string" then return string.format("%q", v) end
  if type(v) == "table" then
    local parts = {}
    for i, x in ipairs(v) do parts[i] = lua_literal(x) end
    local keys = {}
    for k in pairs(v) do if math.type(k) ~= "integer" then keys[#keys + 1] = k end end
    table.sort(keys)
    for _, k in ipairs(keys) do parts[#parts + 1] = k .. " = " .. lua_literal(v[k]) end
    return "{ " .. table.concat(parts, ", ") .. " }"
  end
  return tostring(v)
end

local function reproducer(pos, verdict)
  local c, g = cases[pos].case, cases[pos].gen
  local lines = { string.format("-- differential case %d (SEED=%d), op %s: %s", pos, SEED, c.op, verdict[2]),
    'local ddp = require "ddplua"', "local A = " .. lua_literal(g.last_args or {}) }
  for _, name in ipairs(helpers.used(c.lua)) do lines[#lines + 1] = helpers.source[name] end
  local names = {}
  for k, inp in ipairs(g.inputs) do
    local base = #inp.base_shape == 0 and string.format("ddp.tensor(%s, { dtype = %q })", lua_literal(inp.values[1]),
      inp.dtype) or string.format("ddp.tensor(%s, { dtype = %q }):view(%s)", lua_literal(inp.values), inp.dtype,
      lua_literal(inp.base_shape))
    local expr = base .. ((inp.requires_grad and c.grad) and ":requires_grad_()" or "")
    lines[#lines + 1] = string.format("local %s_leaf = %s", inp.name, expr)
    local view = inp.name .. "_leaf"
    for _, op in ipairs(inp.layout) do
      if op[1] == "t" then view = view .. string.format(":transpose(%d, %d)", op[2], op[3])
      elseif op[1] == "permute" then view = view .. ":permute(" .. lua_literal({ table.unpack(op, 2) }) .. ")"
      elseif op[1] == "narrow" then view = view .. string.format(":narrow(%d, %d, %d)", op[2], op[3], op[4])
      else view = view .. ":expand(" .. lua_literal({ table.unpack(op, 2) }) .. ")" end
    end
    lines[#lines + 1] = string.format("local %s = %s", inp.name, view)
    names[k] = inp.name
  end
  local body = c.lua:find("return", 1, true) and c.lua or ("return " .. c.lua)
  lines[#lines + 1] = "local function op(" .. table.concat(names, ", ") .. (#names > 0 and ", " or "") ..
    "A) " .. body .. " end"
  lines[#lines + 1] = "local out = table.pack(op(" .. table.concat(names, ", ") .. (#names > 0 and ", " or "") ..
    "A))"
  lines[#lines + 1] = "for i = 1, out.n do print(out[i]) end"
  local leaves = {}
  for _, inp in ipairs(g.inputs) do
    if inp.requires_grad and c.grad then leaves[#leaves + 1] = inp.name end
  end
  if #leaves > 0 then
    lines[#lines + 1] = "-- the suite's backward: of sum(out[1] * w), w_i = ((7 i) % 11 - 5) / 4 (i from 0)"
    lines[#lines + 1] = "local out_y, out_w = out[1], {}"
    lines[#lines + 1] = "for i = 0, out_y:numel() - 1 do out_w[i + 1] = ((i * 7) % 11 - 5) / 4 end"
    lines[#lines + 1] = "if out_y.requires_grad then"
    lines[#lines + 1] = "  (out_y * ddp.tensor(out_w, { dtype = \"float64\" }):view(out_y:size()):to(out_y:dtype())):sum():backward()"
    for _, name in ipairs(leaves) do
      lines[#lines + 1] = string.format("  print(\"gradient of %s\", %s_leaf.grad)", name, name)
    end
    lines[#lines + 1] = "end"
  end
  lines[#lines + 1] = "-- PyTorch (torch, F = torch.nn.functional, A as above; D(d) = 0-based d; " ..
    "tests/diff/torch_ref.py): " .. c.torch
  return table.concat(lines, "\n")
end

local stats, order = {}, {}
local totals = { cases = 0, match = 0, both_error = 0, known = 0, conditioned = 0, mismatch = 0, crash = 0 }
local shown, repros, by_known = {}, {}, {}
for pos = 1, N do
  local c = cases[pos].case
  local v = verdicts[pos] or { "crash", "no verdict" }
  local s = stats[c.op]
  if not s then
    s = { cases = 0, match = 0, both_error = 0, known = 0, conditioned = 0, mismatch = 0, crash = 0, known_ids = {} }
    stats[c.op] = s
    order[#order + 1] = c.op
  end
  s.cases = s.cases + 1
  s[v[1]] = (s[v[1]] or 0) + 1
  totals.cases = totals.cases + 1
  totals[v[1]] = (totals[v[1]] or 0) + 1
  if v[1] == "known" then
    local id = v[2]:match("^(%S+):") or "?"
    s.known_ids[id] = true
    by_known[id] = (by_known[id] or 0) + 1
  end
  if v[1] == "mismatch" or v[1] == "crash" then
    shown[c.op] = (shown[c.op] or 0) + 1
    if shown[c.op] <= REPRO then repros[#repros + 1] = reproducer(pos, v) end
  end
end

print(string.format("differential suite vs PyTorch: SEED=%d, %d cases (generate %.1f s, PyTorch %.1f s, ddplua %.1f s, " ..
  "ddplua from %s)", SEED, N, t_gen, t_torch, t_ddp, BIN))
print(string.format("%-22s %6s %6s %7s %6s %5s %9s %6s  %s", "op", "cases", "match", "refused", "known", "cond",
  "mismatch", "crash", "known differences"))
table.sort(order)
for _, op in ipairs(order) do
  local s = stats[op]
  local ids = {}
  for id in pairs(s.known_ids) do ids[#ids + 1] = id end
  table.sort(ids)
  print(string.format("%-22s %6d %6d %7d %6d %5d %9d %6d  %s", op, s.cases, s.match, s.both_error, s.known,
    s.conditioned, s.mismatch, s.crash, table.concat(ids, ", ")))
end
print(string.format("%-22s %6d %6d %7d %6d %5d %9d %6d", "total", totals.cases, totals.match, totals.both_error,
  totals.known, totals.conditioned, totals.mismatch, totals.crash))
-- the known differences that explained cases, owned items (not deliberate: docs/pytorch_differences.md) marked
local kids = {}
for id in pairs(by_known) do kids[#kids + 1] = id end
table.sort(kids)
for _, id in ipairs(kids) do
  local owner = sections[id].owner
  print(string.format("known %-28s %6d cases%s", id, by_known[id], owner and ("  OWNED, not deliberate: " .. owner) or
    ""))
end
for _, r in ipairs(repros) do print("\n" .. r) end
if os.getenv("DIFF_KEEP") then print("case files kept in " .. dir) else os.execute("rm -rf " .. q(dir)) end
os.exit((totals.mismatch + totals.crash) == 0 and 0 or 1)
