-- A bounded mutation fuzzer for what ddplua reads from users' files:
--   yaml        YAML run files: the reader (core.yaml_parse, core.yaml_load), ddp.config's merge of the
--               result into defaults, and writing it back (core.yaml_dump);
--   csv         CSV image lists: the CSV reader and CSVImageDataset (labels, paths, splits), then loading
--               the items it accepted;
--   checkpoint  checkpoint metadata: load_checkpoint of a real checkpoint (model, SGD, StepLR,
--               DistributedSampler, RNG states, extra) whose metadata entries are mutated, then a training
--               step with what it accepted.
-- Every case starts from a valid seed input and applies 1-8 mutations (byte flips, deletions, insertions
-- of the format's own tokens, repeated slices that nest deeply, splices of other seeds, interesting numbers).
-- A case passes when the input is accepted (and then works: a step after a checkpoint load must not fail,
-- or the load should have refused) or refused with a Lua error that names the problem; it fails on an
-- internal error ("attempt to index...", "stack overflow", a non-string error). A crash or a hang kills
-- the process, which the caller (tests/spec/fuzz_inputs_spec.lua) runs with a deadline.
--
-- Run:  lua5.4 tests/fuzz/inputs.lua [iterations=N] [seconds=S] [seed=N] [targets=yaml,csv,checkpoint]
--       (LUA_PATH / LUA_CPATH as busted's, see the spec) or ./build/bin/ddplua tests/fuzz/inputs.lua ...
-- Environment: SEED (or DDPLUA_FUZZ_SEED), DDPLUA_FUZZ_ITERATIONS (per target), DDPLUA_FUZZ_SECONDS (a
-- time budget per target instead). Case i of a seed is the same on every run: start=i replays from it.
-- Prints one line per target: "fuzz <target>: <n> cases (<accepted> accepted, <refused> refused), 0 failures".
local ddp = require "ddplua"
local core = require "ddplua.core"
local CSVImageDataset = require "ddplua.data.csv_image"
local T = require "ddplua.data.transforms"

local M = {}

-- xorshift64*: the cases of a seed are reproducible whatever else draws random numbers
local function rng_for(seed, case)
  local x = (seed * 0x9E3779B97F4A7C15 + case * 0xBF58476D1CE4E5B9) | 1
  return function(n)
    x = x ~ (x >> 12)
    x = x ~ (x << 25)
    x = x ~ (x >> 27)
    local v = (x * 0x2545F4914F6CDD1D) >> 1
    return n and (v % n + 1) or v
  end
end

local NUMBERS = { "0", "-1", "1e999", "-1e999", "2147483648", "9223372036854775807", "9223372036854775808",
  "-9223372036854775808", "0x7fffffff", "1.5", "nan", ".nan", "-0", "4294967296", "18446744073709551616" }

-- Applies 1..8 mutations to s.
local function mutate(r, s, dict, seeds)
  for _ = 1, ({ 1, 1, 1, 2, 2, 3, 4, 8 })[r(8)] do -- mostly few: most inputs stay close to valid
    local n = #s
    local op = n == 0 and 3 or r(9)
    local a = r(n + 1) -- a position 1..n+1
    local b = math.min(n, a + r(16) - 1)
    if op == 1 then -- flip a byte
      if a <= n then s = s:sub(1, a - 1) .. string.char(r(256) - 1) .. s:sub(a + 1) end
    elseif op == 2 then -- delete a range
      s = s:sub(1, a - 1) .. s:sub(b + 1)
    elseif op == 3 then -- insert one of the format's tokens
      s = s:sub(1, a - 1) .. dict[r(#dict)] .. s:sub(a)
    elseif op == 4 then -- insert random bytes
      local t = {}
      for i = 1, r(8) do t[i] = string.char(r(256) - 1) end
      s = s:sub(1, a - 1) .. table.concat(t) .. s:sub(a)
    elseif op == 5 then -- repeat a slice: nests deeply, grows lists
      local times = ({ 2, 10, 100, 3000 })[r(4)]
      s = s:sub(1, a - 1) .. string.rep(s:sub(a, b), times) .. s:sub(a)
    elseif op == 6 then -- splice a piece of another seed
      local o = seeds[r(#seeds)]
      local c = r(#o + 1)
      s = s:sub(1, a - 1) .. o:sub(c, c + r(64)) .. s:sub(b + 1)
    elseif op == 7 then -- an interesting number in place of a digit run
      local i, j = s:find("%-?%d+", a)
      if i then s = s:sub(1, i - 1) .. NUMBERS[r(#NUMBERS)] .. s:sub(j + 1) end
    elseif op == 8 then -- truncate
      s = s:sub(1, a - 1)
    else -- repeat one token many times
      s = s:sub(1, a - 1) .. string.rep(dict[r(#dict)], ({ 10, 200, 5000 })[r(3)]) .. s:sub(a)
    end
    if #s > 256 * 1024 then s = s:sub(1, 256 * 1024) end
  end
  return s
end

local function internal(err)
  if type(err) ~= "string" then return "a non-string error (" .. type(err) .. ")" end
  for _, p in ipairs { "attempt to ", "stack overflow", "bad argument", "internal error", "table index is" } do
    if err:find(p, 1, true) then return err end
  end
  return nil
end

local function write(path, s)
  local f = assert(io.open(path, "wb"))
  f:write(s)
  f:close()
end

-- ---- targets: each returns {seeds=, dict=, run(text, r) -> "accepted"|"refused", or error(<why>)} ----

local function yaml_target(dir)
  local seeds = {
    "epochs: 5\nlr: 0.05\nname: mlp\nlayers: [256, 128]\nmodel:\n  hidden: 128\n  act: relu\n",
    "ddplua:\n  nproc: 2\nscript: train.lua\nepochs: 3\nextra: {a: 1, b: [1, 2, {c: d}]}\n",
    "model: &m {hidden: 64, act: gelu}\nextra: {copy: *m, list: [*m, *m]}\nlr: 1e-3\namp: true\n",
    "layers:\n  - 1\n  - 2\nname: 'quoted: text'\nepochs: 0x10\nextra:\n  text: |\n    a\n    b\n",
  }
  for _, f in ipairs { "configs/fashion_mlp.yaml", "configs/csv_images.yaml" } do
    local h = io.open(f)
    if h then
      seeds[#seeds + 1] = h:read("a")
      h:close()
    end
  end
  local dict = { ":", ": ", "- ", "[", "]", "{", "}", ",", "\n", "\n  ", "  ", "#", "'", '"', "|", ">", "---",
    "...", "~", "null", "true", ".inf", "&a ", "*a", "&b ", "*b", "!!str ", "!!map", "? ", "%YAML 1.2\n", "\t", "\0",
    "\\", "\xef\xbb\xbf", "\xff", "ddplua:", "script:", "model:", "lr:", "extra:", "<<: *a" }
  local path = dir .. "/fuzz.yaml"
  local function defaults()
    return { epochs = 5, lr = 0.05, name = "mlp", amp = false, layers = { 256, 128 },
      model = { hidden = 128, act = "relu" }, extra = {} }
  end
  return {
    seeds = seeds,
    dict = dict,
    run = function(text)
      local ok, v = pcall(core.yaml_parse, text, "fuzz.yaml")
      if not ok then
        local bad = internal(v)
        if bad then error("yaml_parse: " .. bad, 0) end
        return "refused"
      end
      local okd, d = pcall(core.yaml_dump, v, "value")
      if not okd and internal(d) then error("yaml_dump: " .. internal(d), 0) end
      write(path, text)
      local okl, l = pcall(core.yaml_load, path)
      if not okl then error("yaml_load refused what yaml_parse accepted: " .. tostring(l), 0) end
      local okc, e = pcall(ddp.config, defaults(), { arg = { "config=" .. path }, print = false, save = false })
      if not okc then
        if internal(e) then error("ddp.config: " .. internal(e), 0) end
        return "refused"
      end
      return "accepted"
    end,
  }
end

local function csv_target(dir)
  local img = core.image
  img.write_png(dir .. "/a.png", ddp.zeros(6, 5, 3, { dtype = "uint8" }))
  img.write_png(dir .. "/b.png", ddp.full({ 4, 4, 1 }, 200, { dtype = "uint8" }))
  img.write_jpeg(dir .. "/c.jpg", ddp.full({ 8, 8, 3 }, 90, { dtype = "uint8" }), 90)
  local seeds = {
    "path,label\na.png,0\nb.png,1\nc.jpg,0\n",
    "file,kind\n\"a.png\",cat\nb.png,dog\n\"c.jpg\",\"cat\"\n",
    "\xef\xbb\xbfpath, label\r\na.png, 1\r\nc.jpg, 2\r\nb.png, 0\r\n",
    "label,path,extra\n0,a.png,x\n1,b.png,\"y,z\"\n2,c.jpg,\"multi\nline\"\n",
  }
  local dict = { ",", '"', '""', "\n", "\r\n", "\r", " ", "\t", "\0", "2147483648", "-1", "cat", "a.png", "c.jpg",
    "b.png", "./", "../", "/", "path", "label", "file", "kind", "\xef\xbb\xbf", "\xff\xfe", "1e9", "0" }
  local path = dir .. "/list.csv"
  local transform = { T.ToTensor() }
  return {
    seeds = seeds,
    dict = dict,
    run = function(text, r)
      write(path, text)
      local header = text:match("^[^\n]*") or ""
      local named = header:find("file", 1, true) and r(4) > 1
      local opts = { csv = path, path_column = named and "file" or "path", label_column = named and "kind" or "label",
        size = { 4, 4 },
        channels = r(2) == 1 and 1 or 3, num_workers = r(3) - 1, transform = transform }
      if r(3) == 1 then opts.split, opts.seed = ({ "train", "valid", "test" })[r(3)], r(5) end
      if r(4) == 1 then opts.num_classes = r(4) end
      local ok, ds = pcall(CSVImageDataset, opts)
      if not ok then
        if internal(ds) then error("CSVImageDataset: " .. internal(ds), 0) end
        return "refused"
      end
      local n = #ds
      for i = 1, math.min(n, 3) do
        local okg, e = pcall(ds.get, ds, i)
        if not okg and internal(e) then
          ds:close()
          error("get: " .. internal(e), 0)
        end
      end
      if n > 0 then
        local okb, e = pcall(ds.get_batch, ds, { n, 1 })
        if not okb and internal(e) then
          ds:close()
          error("get_batch: " .. internal(e), 0)
        end
      end
      ds:close()
      return "accepted"
    end,
  }
end

local function checkpoint_target(dir)
  local function objects()
    ddp.manual_seed(1)
    local w = ddp.randn(3, 2):requires_grad_()
    local opt = ddp.optim.SGD({ w }, { lr = 0.1, momentum = 0.9 })
    w.grad = ddp.ones(3, 2)
    opt:step()
    local sched = ddp.optim.lr_scheduler.StepLR(opt, { step_size = 2, gamma = 0.5 })
    local sampler = ddp.data.DistributedSampler(10, { num_replicas = 1, rank = 0 })
    return { model = { w = w }, optimizer = opt, scheduler = sched, sampler = sampler }
  end
  local base = dir .. "/base.safetensors"
  local src = objects()
  src.sampler:load_state_dict({ epoch = 3, position = 4 })
  src.epoch, src.step, src.rng = 3, 40, true
  src.extra = { best = 0.5, history = { 1, 2 }, w = ddp.ones(2), map = { [3] = "x", [true] = 1 } }
  src.config = { lr = 0.1, layers = { 4, 2 } }
  ddp.save_checkpoint(base, src)
  local tensors, meta = core.load(base)
  local keys = {}
  for k in pairs(meta) do keys[#keys + 1] = k end
  table.sort(keys)
  local seeds = {}
  for _, k in ipairs(keys) do seeds[#seeds + 1] = meta[k] end
  local dict = { "{", "}", "[", "]", ",", ":", '"__map__"', '"__tensor__"', "null", "true", "false", "1e400", "-1",
    '"x"', "[[", "]]", '"model.w"', '"optimizer.1.momentum_buffer"', '"lr"', '"params"', '"state"', '"epoch"',
    '"position"', '"last_epoch"', '"philox"', '"seed"', '"offset"', '"lua"', "0.5", "1.5", '""', "\\u0000", "NaN" }
  local path = dir .. "/fuzz.safetensors"
  local data = ddp.data.TensorDataset(ddp.arange(0, 10):float():view(10, 1))
  return {
    seeds = seeds,
    dict = dict,
    run = function(_, r, mutated)
      local m = {}
      for k, v in pairs(meta) do m[k] = v end
      local key = keys[r(#keys)]
      m[key] = mutated(m[key])
      if r(10) == 1 then m[keys[r(#keys)]] = nil end
      local t = tensors
      if r(10) == 1 then -- a tensor renamed or gone
        t = {}
        local dropped = false
        for k, v in pairs(tensors) do
          if not dropped and r(2) == 1 then dropped = true else t[k] = v end
        end
      end
      -- (safetensors metadata is UTF-8 text: a mutation that breaks that is written without its high bytes)
      if not pcall(core.save, t, path, { metadata = m }) then
        m[key] = m[key]:gsub("[\128-\255]", "?")
        core.save(t, path, { metadata = m })
      end
      local o = objects()
      local ok, e = pcall(ddp.load_checkpoint, path, o)
      if not ok then
        if internal(e) then error("load_checkpoint (" .. key .. "): " .. internal(e), 0) end
        if type(e) ~= "string" or not e:find("load_checkpoint: ", 1, true) then
          error("load_checkpoint (" .. key .. ") error names no file: " .. tostring(e), 0)
        end
        return "refused"
      end
      -- what load accepted must work: a step, a schedule step, an epoch of the sampler
      local okr, er = pcall(function()
        o.model.w.grad = ddp.ones(3, 2)
        o.optimizer:step()
        o.scheduler:step()
        o.sampler:set_epoch(o.sampler.epoch)
        local loader = ddp.data.DataLoader(data, { batch_size = 4, sampler = o.sampler })
        for _ in loader:iter() do end
      end)
      if not okr then error("accepted " .. key .. " = " .. m[key] .. " at load, then: " .. tostring(er), 0) end
      return "accepted"
    end,
  }
end

local TARGETS = { yaml = yaml_target, csv = csv_target, checkpoint = checkpoint_target }

--- A fresh directory for the cases' files: in /dev/shm when there is one
--- (every checkpoint save is fsync'ed; on tmpfs that costs nothing).
function M.tmpdir()
  local base = core.file_type("/dev/shm") == "directory" and "/dev/shm" or "/tmp"
  local dir = (io.popen("mktemp -d " .. base .. "/ddplua-fuzz.XXXXXX"):read("l"))
  assert(dir and core.file_type(dir) == "directory", "cannot make a directory under " .. base)
  return dir
end

--- run{targets=, iterations=, seconds=, seed=, start=, dir=, log=} -> {target = {cases, accepted, refused}};
--- raises with the seed, target and case of the first failure.
function M.run(opts)
  local seed, start = opts.seed or 1, opts.start or 1
  local results = {}
  for _, name in ipairs(opts.targets or { "yaml", "csv", "checkpoint" }) do
    local tg = assert(TARGETS[name], "unknown fuzz target " .. tostring(name))(opts.dir)
    local res = { cases = 0, accepted = 0, refused = 0 }
    local t_end = opts.seconds and os.time() + opts.seconds
    local case = start
    while (opts.iterations == nil or case < start + opts.iterations) and (t_end == nil or os.time() < t_end) do
      local r = rng_for(seed, case)
      local text = mutate(r, tg.seeds[r(#tg.seeds)], tg.dict, tg.seeds)
      local ok, outcome = pcall(tg.run, text, r, function(s) return mutate(r, s, tg.dict, tg.seeds) end)
      if not ok then
        error(string.format("fuzz %s: seed %d case %d failed: %s\ninput (%d bytes): %q", name, seed, case,
          tostring(outcome), #text, #text > 400 and text:sub(1, 400) .. "..." or text), 0)
      end
      res[outcome] = res[outcome] + 1
      res.cases = res.cases + 1
      case = case + 1
      if case % 20 == 0 then collectgarbage("step", 100) end
      if opts.log and case % 5000 == 0 then opts.log(string.format("fuzz %s: %d cases", name, res.cases)) end
    end
    results[name] = res
  end
  return results
end

-- as a script: key=value arguments, environment defaults
if arg and arg[0] and arg[0]:match("inputs%.lua$") and not package.loaded["busted"] then
  local o = {}
  for _, a in ipairs(arg) do
    local k, v = a:match("^(%w+)=(.*)$")
    if k then o[k] = v end
  end
  local function num(v) return v and math.tointeger(tonumber(v)) end
  local dir = M.tmpdir()
  local targets
  if o.targets then
    targets = {}
    for t in o.targets:gmatch("[^,]+") do targets[#targets + 1] = t end
  end
  local seconds = num(o.seconds or os.getenv("DDPLUA_FUZZ_SECONDS"))
  local iterations = num(o.iterations or os.getenv("DDPLUA_FUZZ_ITERATIONS")) or (not seconds and 1000 or nil)
  local seed = num(o.seed or os.getenv("SEED") or os.getenv("DDPLUA_FUZZ_SEED")) or 1
  local t0 = os.time()
  local ok, res = pcall(M.run, { targets = targets, iterations = iterations, seconds = seconds, seed = seed,
    start = num(o.start), dir = dir, log = function(l) io.stderr:write(l, "\n") end })
  os.execute("rm -rf '" .. dir .. "'")
  if not ok then
    io.stderr:write(tostring(res), "\n")
    os.exit(1)
  end
  for _, name in ipairs(targets or { "yaml", "csv", "checkpoint" }) do
    local r = res[name]
    print(string.format("fuzz %s: %d cases (%d accepted, %d refused), 0 failures", name, r.cases, r.accepted,
      r.refused))
  end
  print(string.format("fuzz: seed %d, %d s", seed, os.time() - t0))
end

return M
