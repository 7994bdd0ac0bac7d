-- ddp.save_checkpoint / ddp.load_checkpoint: what goes where in the file,
-- restoring model/optimizer/scheduler/sampler/RNG state, rank 0 writing
-- under a (fake) process group, errors, and kill -9 during a save.
local ddp = require "ddplua"
local core = require "ddplua.core"
local U = require "helpers.io_util"

local function same_values(a, b) return a:dtype() == b:dtype() and U.hex(core.tobytes(a)) == U.hex(core.tobytes(b)) end

-- A model object in the style of nn.Module: state_dict in registration
-- order, load_state_dict copying into its own tensors.
local function fake_model(seed)
  ddp.manual_seed(seed)
  local m = { w = ddp.randn(4, 3), b = ddp.randn(4), mean = ddp.randn(4, { dtype = "float64" }) }
  function m:state_dict() return { ["fc.weight"] = self.w, ["fc.bias"] = self.b, ["bn.running_mean"] = self.mean } end
  function m:parameters() return { self.w, self.b } end
  function m:load_state_dict(sd, strict)
    self.strict_arg = strict
    local own = self:state_dict()
    for k, t in pairs(own) do
      assert(sd[k], "missing " .. k)
      t:copy_(sd[k])
    end
    for k in pairs(sd) do assert(own[k], "unexpected " .. k) end
  end
  return m
end

-- An optimizer in the style of torch.optim: state keyed by parameter position.
local function fake_optimizer(seed, sparse)
  ddp.manual_seed(seed)
  local o = {
    state = { [1] = { momentum_buffer = ddp.randn(4, 3), step = 3 }, [2] = { exp_avg = ddp.randn(4), step = 3 } },
    param_groups = { { lr = 0.1, momentum = 0.9, nesterov = false, betas = { 0.9, 0.999 }, params = { 1, 2 } } },
  }
  if sparse then o.state = { [2] = o.state[2], [5] = { momentum_buffer = ddp.randn(2), step = 7 } } end
  function o:state_dict() return { state = self.state, param_groups = self.param_groups } end
  function o:load_state_dict(sd) self.loaded = sd end
  return o
end

local function fake_stateful(state)
  local s = { state = state }
  function s:state_dict() return self.state end
  function s:load_state_dict(x) self.loaded = x end
  return s
end

-- A process group as ddplua.rank and checkpoint.lua use it.
local function fake_dist(rank, world, rank0_ok)
  local d = { calls = {} }
  function d.is_initialized() return true end
  function d.get_rank() return rank end
  function d.get_world_size() return world end
  function d.all_gather(list, t)
    d.calls[#d.calls + 1] = "all_gather"
    for r = 1, world do
      if r - 1 == rank then list[r]:copy_(t)
      else list[r]:copy_(ddp.tensor({ 1000 + r, 2000 + r, 0, 0, 0, 0, 0 })) end
    end
  end
  function d.broadcast(t, src)
    assert(src == 0)
    d.calls[#d.calls + 1] = "broadcast"
    if rank ~= 0 then t:fill_(rank0_ok and 1 or 0) end
    d.flag = t:item()
  end
  return d
end

local function with_dist(d, fn)
  local saved = package.loaded["ddplua.distributed"]
  package.loaded["ddplua.distributed"] = d
  local ok, err = pcall(fn)
  package.loaded["ddplua.distributed"] = saved
  if not ok then error(err, 0) end
end

describe("checkpoints", function()
  local dir
  before_each(function() dir = U.tmpdir() end)
  after_each(function() U.rm_rf(dir) end)

  it("stores model and optimizer tensors under PyTorch-like names and the rest as JSON metadata", function()
    local path = dir .. "/ckpt.safetensors"
    local m, o = fake_model(1), fake_optimizer(2)
    ddp.save_checkpoint(path, { model = m, optimizer = o, epoch = 3, step = 1200, config = { lr = 0.1 },
      sampler = fake_stateful({ epoch = 3, position = 128 }), extra = { best = { weights = ddp.ones(2) }, acc = 0.9 } })
    local t, meta = ddp.load(path)
    local names = {}
    for k in pairs(t) do names[#names + 1] = k end
    table.sort(names)
    assert.are.same({ "extra.best.weights", "model.bn.running_mean", "model.fc.bias", "model.fc.weight",
      "optimizer.1.momentum_buffer", "optimizer.2.exp_avg" }, names)
    assert.is_true(same_values(m.w, t["model.fc.weight"]))
    assert.is_true(same_values(o.state[1].momentum_buffer, t["optimizer.1.momentum_buffer"]))
    assert.are.equal("ddplua.checkpoint/1", meta.format)
    assert.are.equal("3", meta.epoch)
    assert.are.equal("1200", meta.step)
    assert.are.same({ epoch = 3, position = 128 }, core.json_decode(meta.sampler))
    assert.are.same({ lr = 0.1 }, core.json_decode(meta.config))
  end)

  it("restores every part into fresh objects and returns the info", function()
    local path = dir .. "/ckpt.safetensors"
    local m, o = fake_model(1), fake_optimizer(2)
    local sched = fake_stateful({ last_epoch = 4, base_lrs = { 0.1, 0.01 }, gamma = 0.5 })
    local sampler = fake_stateful({ epoch = 2, position = 64 })
    ddp.save_checkpoint(path, { model = m, optimizer = o, scheduler = sched, sampler = sampler, epoch = 2, step = 77,
      config = { lr = 0.1, layers = { 8, 4 } },
      extra = { best_acc = 0.875, history = { 1.5, 0.5 }, w = ddp.full({ 3 }, 2) } })

    local m2, o2, sched2, sampler2 = fake_model(10), fake_optimizer(11), fake_stateful({}), fake_stateful({})
    local info = ddp.load_checkpoint(path, { model = m2, optimizer = o2, scheduler = sched2, sampler = sampler2 })
    assert.is_true(same_values(m.w, m2.w) and same_values(m.b, m2.b) and same_values(m.mean, m2.mean))
    local st = o2.loaded.state
    assert.is_true(same_values(o.state[1].momentum_buffer, st[1].momentum_buffer))
    assert.is_true(same_values(o.state[2].exp_avg, st[2].exp_avg))
    assert.are.equal("integer", math.type(st[1].step))
    assert.are.same(o.param_groups, o2.loaded.param_groups)
    assert.are.same(sched.state, sched2.loaded)
    assert.are.same({ epoch = 2, position = 64 }, sampler2.loaded)
    assert.are.equal(2, info.epoch)
    assert.are.equal(77, info.step)
    assert.are.same({ lr = 0.1, layers = { 8, 4 } }, info.config)
    assert.are.equal(0.875, info.extra.best_acc)
    assert.are.same({ 1.5, 0.5 }, info.extra.history)
    assert.are.same({ 2, 2, 2 }, info.extra.w:totable())
    assert.are.equal(1, info.world_size)
  end)

  it("keeps integer keys of sparse optimizer state", function()
    local path = dir .. "/sparse.safetensors"
    local o = fake_optimizer(3, true)
    ddp.save_checkpoint(path, { optimizer = o })
    local o2 = fake_optimizer(4)
    ddp.load_checkpoint(path, { optimizer = o2 })
    assert.is_nil(o2.loaded.state[1])
    assert.is_true(same_values(o.state[5].momentum_buffer, o2.loaded.state[5].momentum_buffer))
    assert.are.equal(7, o2.loaded.state[5].step)
    assert.is_true(core.is_tensor(ddp.load(path)["optimizer.5.momentum_buffer"]))
  end)

  it("loads into a plain table of tensors and checks keys and shapes", function()
    local path = dir .. "/plain.safetensors"
    ddp.save_checkpoint(path, { model = { w = ddp.full({ 2, 2 }, 3), b = ddp.full({ 2 }, 4) } })
    local target = { w = ddp.zeros(2, 2), b = ddp.zeros(2) }
    ddp.load_checkpoint(path, { model = target })
    assert.are.same({ { 3, 3 }, { 3, 3 } }, target.w:totable())
    local ok, err = pcall(ddp.load_checkpoint, path, { model = { w = ddp.zeros(2, 3), b = ddp.zeros(2) } })
    assert.is_false(ok)
    assert.matches("model.w has shape [2, 2] in the file, [2, 3] in the model", err, 1, true)
    ok, err = pcall(ddp.load_checkpoint, path, { model = { w = ddp.zeros(2, 2), c = ddp.zeros(2) } })
    assert.is_false(ok)
    assert.matches("missing c; unexpected b", err, 1, true)
  end)

  it("loads a checkpoint saved through the DDP wrapper (module. keys) into the bare model", function()
    local path = dir .. "/ddp.safetensors"
    local m = fake_model(5)
    local wrapper = { state_dict = function()
      local sd = {}
      for k, t in pairs(m:state_dict()) do sd["module." .. k] = t end
      return sd
    end }
    ddp.save_checkpoint(path, { model = wrapper })
    assert.is_true(core.is_tensor(ddp.load(path)["model.module.fc.weight"]))
    local bare = fake_model(6)
    ddp.load_checkpoint(path, { model = bare, strict = false })
    assert.is_true(same_values(m.w, bare.w))
    assert.is_false(bare.strict_arg)
  end)

  it("restores the Philox generator and Lua's math.random", function()
    local path = dir .. "/rng.safetensors"
    ddp.manual_seed(42)
    math.randomseed(7)
    ddp.randn(10)
    math.random()
    ddp.save_checkpoint(path, { rng = true })
    local a, r = ddp.randn(5):totable(), { math.random(), math.random(1, 1000) }
    ddp.manual_seed(1)
    math.randomseed(1)
    local info = ddp.load_checkpoint(path)
    assert.is_true(info.rng_restored)
    assert.are.same(a, ddp.randn(5):totable())
    assert.are.same(r, { math.random(), math.random(1, 1000) })
    ddp.manual_seed(1)
    info = ddp.load_checkpoint(path, { rng = false })
    assert.is_false(info.rng_restored)
    assert.are_not.same(a, ddp.randn(5):totable())
  end)

  it("under a process group: rank 0 writes, every rank learns the outcome, RNG states per rank", function()
    local path = dir .. "/group.safetensors"
    local d0 = fake_dist(0, 2, true)
    with_dist(d0, function() ddp.save_checkpoint(path, { model = { w = ddp.ones(2) }, rng = true, step = 5 }) end)
    assert.are.same({ "all_gather", "broadcast" }, d0.calls)
    assert.are.equal(1, d0.flag)
    local _, meta = ddp.load(path)
    local rng = core.json_decode(meta.rng)
    assert.are.equal(2, #rng)
    assert.are.same({ seed = 1002, offset = 2002 }, rng[2].philox)
    assert.are.equal("2", meta.world_size)
    -- rank 1 restores its own generator state
    local d1 = fake_dist(1, 2, true)
    with_dist(d1, function()
      local info = ddp.load_checkpoint(path, { model = { w = ddp.zeros(2) } })
      assert.is_true(info.rng_restored)
      assert.are.same({ seed = 1002, offset = 2002 }, core.get_rng_state())
    end)
    -- rank 1 does not write; it fails when rank 0 reports a failure
    local other = dir .. "/other.safetensors"
    with_dist(fake_dist(1, 2, true), function() ddp.save_checkpoint(other, { step = 1 }) end)
    assert.is_false(U.exists(other))
    local ok, err = pcall(with_dist, fake_dist(1, 2, false), function() ddp.save_checkpoint(other, { step = 1 }) end)
    assert.is_false(ok)
    assert.matches("rank 0 failed to write " .. other, err, 1, true)
    -- rank 0's own failure is broadcast before it is raised
    local d = fake_dist(0, 2, true)
    ok, err = pcall(with_dist, d, function() ddp.save_checkpoint(dir .. "/no/dir/x.safetensors", { step = 1 }) end)
    assert.is_false(ok)
    assert.matches("no/dir/x.safetensors", err, 1, true)
    assert.are.equal(0, d.flag)
  end)

  it("does not restore RNG states saved by a different number of ranks", function()
    local path = dir .. "/two.safetensors"
    with_dist(fake_dist(0, 2, true), function() ddp.save_checkpoint(path, { rng = true }) end)
    ddp.manual_seed(3)
    local before = core.get_rng_state()
    local printed, real_print = {}, print
    _G.print = function(...) printed[#printed + 1] = table.concat({ ... }, " ") end
    local ok, info = pcall(ddp.load_checkpoint, path)
    _G.print = real_print
    assert.is_true(ok, tostring(info))
    assert.is_false(info.rng_restored)
    assert.matches("holds RNG states of 2 rank(s), this run has 1: RNG states not restored", printed[1], 1, true)
    assert.are.same(before, core.get_rng_state())
  end)

  it("names what is wrong", function()
    local plain = dir .. "/plain.safetensors"
    ddp.save({ w = ddp.ones(1) }, plain)
    local ckpt = dir .. "/c.safetensors"
    ddp.save_checkpoint(ckpt, { model = { w = ddp.ones(1) } })
    local cases = {
      { function() ddp.load_checkpoint(plain) end, "is not a ddplua checkpoint" },
      { function() ddp.load_checkpoint(ckpt, { optimizer = fake_optimizer(1) }) end, "holds no optimizer state" },
      { function() ddp.load_checkpoint(ckpt, { map = "cpu" }) end, "unknown option 'map'" },
      { function() ddp.load_checkpoint(ckpt, { sampler = {} }) end, "sampler must have a load_state_dict() method" },
      { function() ddp.save_checkpoint(ckpt, { modle = {} }) end, "unknown option 'modle'" },
      { function() ddp.save_checkpoint(ckpt, { extra = { f = print } }) end, "extra.f is a function" },
      { function() ddp.save_checkpoint(ckpt, { model = { w = 3 } }) end, "model state 'w' is a number" },
      { function() ddp.save_checkpoint(ckpt, { extra = { [print] = 1 } }) end, "extra has a function key" },
      { function() ddp.load_checkpoint(dir .. "/none.safetensors") end, "none.safetensors: cannot open" },
    }
    for _, c in ipairs(cases) do
      local ok, err = pcall(c[1])
      assert.is_false(ok)
      assert.matches(c[2], err, 1, true)
    end
    -- the failed saves left the earlier checkpoint intact
    local t = { w = ddp.zeros(1) }
    ddp.load_checkpoint(ckpt, { model = t })
    assert.are.same({ 1 }, t.w:totable())
  end)

  describe("malformed but valid metadata", function()
    -- A real checkpoint of an SGD optimizer, a StepLR schedule and a
    -- DistributedSampler, whose metadata each case then rewrites.
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
    local function rewrite(path, key, text)
      local tensors, meta = core.load(path)
      meta[key] = text
      core.save(tensors, path, { metadata = meta })
    end
    local cases = {
      -- the internal errors these gave are in the comments
      { "rng", "true", "rng is true, expected a list of per-rank generator states" }, -- attempt to get length of a boolean
      { "rng", '[{"philox": {"seed": "1", "offset": 0}}]', 'rng[1].philox.seed is the string "1", expected an integer' },
      { "rng", '[{"philox": {"seed": 1, "offset": 0}, "lua": [0, 0, 0, 0]}]', "rng[1].lua is not 4 integers, not all zero" },
      { "optimizer", '{"state": {"__map__": [[null, {}]]}, "param_groups": []}',
        "optimizer.state entry 1 of its map is not a [key, value] pair" }, -- table index is nil
      { "optimizer", '{"state": {"__map__": [[1, {}], [1, {}]]}, "param_groups": []}', "optimizer.state names key 1 twice" },
      { "optimizer", '{"state": {}, "param_groups": [{"params": [1], "lr": "0.1", "momentum": 0.9}]}',
        "optimizer: SGD: load_state_dict: param_groups[1]: invalid lr 0.1 (expected a number >= 0)" },
      { "optimizer", '{"state": {}, "param_groups": [{"params": ["1"]}]}',
        'optimizer.param_groups[1].params[1] is the string "1", expected a parameter position' },
      { "optimizer", '{"state": {"__map__": [[1, {"momentum_buffer": 2}]]}, "param_groups": [{"params": [1], ' ..
        '"lr": 0.1, "momentum": 0.9}]}', "optimizer: SGD: load_state_dict: state[1].momentum_buffer is 2, expected " ..
        "a tensor of the parameter's shape" },
      { "optimizer", '[1, 2]', "optimizer.state is nothing, expected a table keyed by parameter position" },
      { "optimizer", '{"state": {"__map__": [[1, {"momentum_buffer": {"__tensor__": 7}}]]}, "param_groups": []}',
        "optimizer.state[1].momentum_buffer is a malformed tensor reference" },
      { "optimizer", '{"state": {"__map__": [[1, {"momentum_buffer": {"__tensor__": "nope"}}]]}, "param_groups": []}',
        "optimizer.state[1].momentum_buffer refers to tensor 'nope', which the file does not hold" },
      { "sampler", '{"epoch": "3", "position": 0}',
        'sampler: DistributedSampler: load_state_dict: epoch is "3", expected a non-negative integer' },
      { "sampler", '{"epoch": 1, "position": 1000000000}',
        "sampler: DistributedSampler: load_state_dict: position is 1000000000, expected an integer in 0..10" },
      { "sampler", '{"epoch": 1.5, "position": 0}', "epoch is 1.5, expected a non-negative integer" },
      { "scheduler", '{"last_epoch": 1, "step": 5}', "scheduler: StepLR: load_state_dict: unknown field 'step'" },
      { "scheduler", '{"last_epoch": 1, "base_lrs": [0.1, 0.2]}',
        "scheduler: StepLR: load_state_dict: base_lrs has 2 entries, the scheduler's own has 1" },
      { "scheduler", '{"last_epoch": 1, "gamma": "0.5"}', 'gamma is "0.5", expected a number like the scheduler' },
      { "epoch", '"3"', 'epoch is the string "3", expected a non-negative integer' },
      { "step", "-1", "step is -1, expected a non-negative integer" },
      { "world_size", "0", "world_size is 0, expected a positive integer" },
      { "extra", '{"a": {"__map__": 5}}', "extra.a is a malformed map" },
      { "sampler", '{"epoch": 1', '(__metadata__ "sampler")' },
    }
    for _, c in ipairs(cases) do
      it(c[1] .. " = " .. c[2] .. ": an error at load naming the file and the field", function()
        local path = dir .. "/m.safetensors"
        ddp.save_checkpoint(path, objects())
        rewrite(path, c[1], c[2])
        local fresh = objects()
        local before = fresh.model.w:clone()
        fresh.model.w:detach():fill_(7)
        local ok, err = pcall(ddp.load_checkpoint, path, fresh)
        assert.is_false(ok, "loaded " .. c[1] .. " = " .. c[2])
        assert.matches("load_checkpoint: " .. path, err, 1, true)
        assert.matches(c[3], err, 1, true)
        assert.is_nil(err:match("attempt to"), err)
        -- the checks come first: a refused file restores nothing, not even the model
        if c[1] ~= "optimizer" and c[1] ~= "scheduler" and c[1] ~= "sampler" or c[3]:match("^optimizer%.") then
          assert.are.same({ 7, 7, 7, 7, 7, 7 }, U.flat(fresh.model.w:totable()))
        end
        assert.is_not_nil(before)
      end)
    end

    it("loads the unmodified file, and save_checkpoint refuses what load would", function()
      local path = dir .. "/ok.safetensors"
      local src = objects()
      src.sampler:load_state_dict({ epoch = 2, position = 4 })
      src.epoch, src.step = 2, 9
      ddp.save_checkpoint(path, src)
      local fresh = objects()
      local info = ddp.load_checkpoint(path, fresh)
      assert.are.same({ 2, 9 }, { info.epoch, info.step })
      assert.are.same({ epoch = 2, position = 4, offset = 0, num_replicas = 1 }, fresh.sampler:state_dict())
      assert.are.same(src.optimizer:state_dict().param_groups, fresh.optimizer:state_dict().param_groups)
      local ok, err = pcall(ddp.save_checkpoint, path, { epoch = "3" })
      assert.is_false(ok)
      assert.matches('save_checkpoint: epoch must be a non-negative integer, got the string "3"', err, 1, true)
    end)
  end)

  it("never leaves a truncated or corrupt file at the target when killed with -9 during saves", function()
    local path = dir .. "/big.safetensors"
    local n = 4000000 -- 16 MB of float32: a save takes long enough to be interrupted
    local writer = U.abspath("tests/helpers/checkpoint_writer.lua")
    local delays = { 0.05, 0.35, 0.2, 0.5, 0.15, 0.6, 0.25 }
    math.randomseed(os.time())
    local found, mid_write = 0, 0
    -- at least the 7 delays; then more rounds (up to 21) while too few kills have landed during a save: on a
    -- loaded machine a kill can land before the writer's first save, or between two
    for round = 1, 3 * #delays do
      if round > #delays and found >= 3 and mid_write >= 3 then break end
      local base = delays[(round - 1) % #delays + 1]
      local log = dir .. "/writer" .. round .. ".log"
      local cmd = string.format("%s %s %s %d >%s 2>&1", U.quote(U.abspath(U.ddplua)), U.quote(writer), U.quote(path), n,
        U.quote(log))
      local p = io.popen("unset LD_PRELOAD; sh -c " .. U.quote(cmd .. " & echo $!; wait"))
      local pid = assert(math.tointeger(tonumber(p:read("l"))), "no pid")
      os.execute(string.format("sleep %.3f", base + math.random() * 0.2))
      os.execute("kill -9 " .. pid)
      p:close() -- the shell reaps the killed writer
      local last = U.read(log):match("([^\n]*)\n$") or ""
      if last:match("^begin ") then mid_write = mid_write + 1 end
      os.remove(path .. ".tmp." .. pid) -- what a killed save leaves (under a name no reader looks at)
      if U.exists(path) then
        local target = { w = ddp.zeros(n), b = ddp.zeros(1000) }
        local ok, info = pcall(ddp.load_checkpoint, path, { model = target })
        assert.is_true(ok, "round " .. round .. ": " .. tostring(info))
        local step = info.step
        assert.are.equal("iteration " .. step, info.extra.tag)
        assert.are.same({ step, step }, { target.w:min():item(), target.w:max():item() })
        assert.are.same({ step, step }, { target.b:min():item(), target.b:max():item() })
        found = found + 1
      end
    end
    -- the check is not vacuous: checkpoints were there to validate, and kills hit saves in progress
    assert.is_true(found >= 3, "only " .. found .. " rounds found a checkpoint")
    assert.is_true(mid_write >= 3, "only " .. mid_write .. " kills landed during a save")
  end)
end)
