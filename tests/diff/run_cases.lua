-- ddplua's side of the differential suite, run as a child process by
-- tests/diff/run.lua so that a crash is caught and blamed on its case:
--
--   ddplua tests/diff/run_cases.lua DIR LIST FIRST
--
-- reads DIR/cases.json, DIR/inputs.safetensors and PyTorch's results
-- (DIR/results.json, DIR/results.safetensors), runs the cases whose
-- positions (in cases.json) DIR/LIST lists ({"positions": [...]}), from
-- its FIRST entry on, and appends one line per case to DIR/log: "start
-- <pos>" before it runs (flushed: the last one names the case a crash
-- killed), then "done <pos> <verdict> <detail>". Verdicts: match,
-- both_error, mismatch, known (a mismatch tests/diff/known_differences.lua
-- explains: its id follows), conditioned (see below).
--
-- A LIST with "conditioning": true is the recheck of mismatches of ops
-- whose result may be ill-conditioned: an element also passes within
-- COND_FACTOR times the deviation of PyTorch's float64 result under
-- one-ulp perturbations of the inputs (DIR/cond.json, cond.safetensors:
-- torch_ref.py --conditioning); such a case is "conditioned".
package.path = "./tests/?.lua;./?.lua;" .. package.path
local ddp = require "ddplua"
-- PyTorch keeps denormals by default (torch.set_flush_denormal(False)); ddplua flushes them by default (README),
-- which changes results that pass through the denormal range (a p-norm of 1e-17s). The suite compares the math,
-- so it runs with PyTorch's setting.
ddp.set_flush_denormal(false)
local known = require "tests.diff.known_differences"

local COND_FACTOR = 16
local dir, list_name, first = arg[1], arg[2], tonumber(arg[3])

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

local cases = ddp.core.json_decode(read(dir .. "/cases.json")).cases
local results = ddp.core.json_decode(read(dir .. "/results.json")).results
local inputs = ddp.load(dir .. "/inputs.safetensors")
local touts = ddp.load(dir .. "/results.safetensors")
local log = assert(io.open(dir .. "/log", "a"))
local list = ddp.core.json_decode(read(dir .. "/" .. list_name))
local cond, devs
if list.conditioning then
  cond = ddp.core.json_decode(read(dir .. "/cond.json")).results
  devs = ddp.load(dir .. "/cond.safetensors")
end

local function decode(v)
  if type(v) ~= "table" then return v end
  if v["$i"] then return math.tointeger(tonumber(v["$i"])) or tonumber(v["$i"]) end
  if v["$f"] then
    local s = v["$f"]
    if s == "nan" then return 0 / 0 elseif s == "inf" then return math.huge elseif s == "-inf" then return -math.huge end
    return tonumber(s) + 0.0
  end
  local out = {}
  for k, x in pairs(v) do out[k] = decode(x) end
  return out
end

-- ---- the helpers the expressions use (torch_ref.py defines the same) ----
local env = require("tests.diff.helpers").env(ddp)

local function apply_layout(t, ops)
  for _, op in ipairs(ops) do
    if op[1] == "t" then t = t:transpose(op[2], op[3])
    elseif op[1] == "permute" then t = t:permute({ table.unpack(op, 2) })
    elseif op[1] == "narrow" then t = t:narrow(op[2], op[3], op[4])
    elseif op[1] == "expand" then t = t:expand({ table.unpack(op, 2) }) end
  end
  return t
end

local function weights(out)
  local n, w = out:numel(), {}
  for i = 0, n - 1 do w[i + 1] = ((i * 7) % 11 - 5) / 4 end
  return ddp.tensor(w, { dtype = "float64" }):view(out:size()):to(out:dtype())
end

-- ---- comparison ----
local TOL = { float32 = { 1e-5, 1e-6 }, float64 = { 1e-10, 1e-12 } }
local GRAD_TOL = { float32 = { 1e-4, 1e-5 }, float64 = { 1e-9, 1e-11 } }

local function flat(t)
  local v = t:contiguous():view(-1):totable()
  return v
end

-- nil when got matches want, else a description of the first difference;
-- ref (may be nil): a float64 evaluation of the same case, against which a
-- float32 got passes when it is at most twice as far off as want is; dev
-- (may be nil): the conditioning deviations (an element within COND_FACTOR
-- times its deviation of want passes)
local function compare(got, want, tol, ref, dev)
  if got:dtype() ~= want:dtype() then return "dtype " .. got:dtype() .. " vs " .. want:dtype() end
  local gs, ws = got:size(), want:size()
  if #gs ~= #ws then return "shape [" .. table.concat(gs, ", ") .. "] vs [" .. table.concat(ws, ", ") .. "]" end
  for d = 1, #gs do
    if gs[d] ~= ws[d] then return "shape [" .. table.concat(gs, ", ") .. "] vs [" .. table.concat(ws, ", ") .. "]" end
  end
  local g, w = flat(got), flat(want)
  local r = ref and ref:numel() == got:numel() and flat(ref:double()) or nil
  local dv = dev and dev:numel() == got:numel() and flat(dev) or nil
  if got:is_floating_point() then
    local rtol, atol = tol[1], tol[2]
    local scale = 1.0
    for _, x in ipairs(w) do
      if x == x and x ~= math.huge and x ~= -math.huge and math.abs(x) > scale then scale = math.abs(x) end
    end
    for i = 1, #w do
      local a, b = g[i], w[i]
      local close = function(x, y) return math.abs(x - y) <= atol * scale + rtol * math.abs(y) end
      local ok = a == b or (a ~= a and b ~= b) or (a == a and b == b and close(a, b))
      local e = r and r[i]
      if not ok and e and e == e and a == a and b == b and math.abs(e) ~= math.huge then
        ok = math.abs(a - e) <= 2 * math.abs(b - e) or close(a, e)
      end
      local di = dv and dv[i]
      if not ok and di and di == di and di ~= math.huge and a == a and b == b then
        ok = math.abs(a - b) <= COND_FACTOR * di
      end
      if not ok then return string.format("element %d: %.17g vs %.17g (largest |want| %.17g)", i, a, b, scale) end
    end
  else
    for i = 1, #w do
      if g[i] ~= w[i] then return string.format("element %d: %s vs %s", i, tostring(g[i]), tostring(w[i])) end
    end
  end
  return nil
end

local compiled = {}
local function compile(c)
  local src = c.lua
  local key = c.op .. "\0" .. src
  if compiled[key] then return compiled[key] end
  local names = {}
  for _, inp in ipairs(c.inputs) do names[#names + 1] = inp.name end
  names[#names + 1] = "A"
  local body = src:find("return", 1, true) and src or ("return " .. src)
  local f = assert(load("local " .. table.concat(names, ", ") .. " = ...\n" .. body, "=" .. c.op, "t", env))
  compiled[key] = f
  return f
end

-- ddplua's side of one case: {ok, err, outs, grads (name -> tensor), grad_err}
local function compute(c)
  local A = decode(c.args)
  local leaves, args = {}, {}
  for k, inp in ipairs(c.inputs) do
    local t = inputs[inp.key]:clone()
    if inp.requires_grad and c.grad then
      t:requires_grad_()
      leaves[inp.name] = t
    end
    args[k] = apply_layout(t, inp.layout)
  end
  args[#c.inputs + 1] = A
  local res = table.pack(pcall(compile(c), table.unpack(args, 1, #c.inputs + 1)))
  if not res[1] then return { ok = false, err = tostring(res[2]):gsub("\n", " ") } end
  local d = { ok = true, outs = {}, leaves = leaves }
  for i = 2, res.n do d.outs[#d.outs + 1] = res[i] end
  local out = d.outs[1]
  if next(leaves) and ddp.is_tensor(out) and out.requires_grad then
    local okb, err = pcall(function() (out * weights(out)):sum():backward() end)
    if not okb then d.grad_err = tostring(err):gsub("\n", " ") end
  end
  return d
end

-- ddplua's results against a PyTorch result record r (r.ref64: float64 reference); returns verdict, detail
local function judge(c, d, r, cr)
  if not d.ok then
    if r.status == "error" then return "both_error", "" end
    return "mismatch", "ddplua refused, PyTorch gave a result: " .. d.err
  end
  if r.status == "error" then return "mismatch", "ddplua gave a result, PyTorch refused: " .. r.error end
  local outs = d.outs
  if #outs ~= #r.outs then return "mismatch", string.format("%d outputs vs %d", #outs, #r.outs) end
  for k, o in ipairs(r.outs) do
    local got = outs[k]
    if not ddp.is_tensor(got) then return "mismatch", "output " .. k .. " is a " .. type(got) end
    local want = touts[o.key]
    local ref = r.ref64 and r.ref64.outs and r.ref64.outs[k] and touts[r.ref64.outs[k].key]
    local dkey = cr and cr.outs and cr.outs[k]
    local dev = type(dkey) == "string" and devs[dkey] or nil
    local dd = compare(got, want, (c.tol or {})[want:dtype()] or TOL[want:dtype()] or { 0, 0 }, ref, dev)
    local alias = known.dtype_alias[o.dtype] -- a PyTorch dtype ddplua lacks (bool: uint8)
    if alias and got:dtype() ~= alias then dd = "dtype " .. got:dtype() .. " vs " .. o.dtype end
    if dd then return "mismatch", "output " .. k .. ": " .. dd end
  end
  if r.grad_error then return "mismatch", "PyTorch's backward failed: " .. r.grad_error end
  if r.grads then
    if not outs[1].requires_grad then return "mismatch", "the output does not require grad" end
    if d.grad_err then return "mismatch", "backward failed: " .. d.grad_err end
    for name, leaf in pairs(d.leaves) do -- PyTorch's None (JSON null, nil here) stands for zeros
      local key = r.grads[name]
      local want = type(key) == "string" and touts[key] or ddp.zeros_like(leaf)
      local g = leaf.grad or ddp.zeros_like(leaf)
      local rkey = r.ref64 and r.ref64.grads and r.ref64.grads[name]
      local ref = type(rkey) == "string" and touts[rkey] or nil
      local dkey = cr and cr.grads and cr.grads[name]
      local dev = type(dkey) == "string" and devs[dkey] or nil
      local dd = compare(g, want, (c.grad_tol or {})[want:dtype()] or GRAD_TOL[want:dtype()], ref, dev)
      if dd then return "mismatch", "gradient of " .. name .. ": " .. dd end
    end
  end
  return "match", ""
end

-- runs one case; returns verdict, detail. A mismatch where ddplua agrees with
-- PyTorch on the same inputs made contiguous (r.refc) is PyTorch's handling
-- of the layout (known_differences: pytorch_noncontiguous).
local function run(c, r, cr)
  local d = compute(c)
  local verdict, detail = judge(c, d, r, cr)
  if cr and verdict == "match" then return "conditioned", "" end
  local overlap = r.status == "error" and r.error:find("single memory location", 1, true)
  if verdict == "mismatch" and r.refc and not overlap and judge(c, d, r.refc) == "match" then
    return "known", "pytorch_noncontiguous: " .. detail
  end
  return verdict, detail
end

for k = first, #list.positions do
  local pos = list.positions[k]
  local c, r = cases[pos], results[pos]
  local cr = cond and cond[tostring(pos)]
  log:write("start ", pos, "\n")
  log:flush()
  local ok, verdict, detail = pcall(run, c, r, cr)
  if not ok then verdict, detail = "mismatch", "the runner failed: " .. tostring(verdict) end
  if verdict == "mismatch" then
    c.A = decode(c.args)
    local id = known.explain(c, r, detail)
    if id then verdict, detail = "known", id .. ": " .. detail end
  end
  log:write("done ", pos, " ", verdict, " ", (tostring(detail):gsub("\n", " ")), "\n")
  log:flush()
end
log:close()
