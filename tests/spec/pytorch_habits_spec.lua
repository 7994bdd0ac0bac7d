-- PyTorch habits in one process (issue 14; the multi-rank ones are in
-- tests/mp/pytorch_habits_spec.lua): ddp.save_state / ddp.load_state for
-- any nested table (types kept exactly, atomic, its format checked), the
-- DistributedSampler warning only when two epochs really draw one order,
-- and init_process_group's PyTorch forms.
local ddp = require "ddplua"
local nn, data, dist = ddp.nn, ddp.data, ddp.distributed
local U = require "helpers.io_util"

local function fails(pattern, f, ...)
  local ok, err = pcall(f, ...)
  assert.is_false(ok, "expected an error matching " .. pattern)
  assert.matches(pattern, tostring(err))
end

describe("ddp.save_state / ddp.load_state", function()
  local dir
  before_each(function() dir = U.tmpdir() end)
  after_each(function() U.rm_rf(dir) end)

  it("keep a nested table of tensors, numbers, strings and booleans exactly", function()
    local m = nn.Linear(3, 2)
    local state = {
      model = m:state_dict(), epoch = 3, lr = 0.1, third = 1 / 3, big = math.maxinteger, best = math.huge,
      worst = -math.huge, ok = true, off = false, name = "run 1", bytes = "\255\0\1", empty = {},
      history = { 1.5, 0.5, 0.25 }, ids = ddp.tensor({ 1, 2, 3 }), f64 = ddp.randn(2, 2, { dtype = "float64" }),
      sparse = { [1] = "a", [10] = "b" }, mixed = { 7, 8, key = "v" }, [2] = "two", [true] = "yes",
      nested = { deeper = { t = ddp.ones(1), n = 4 } }, ["a.b"] = ddp.zeros(2), a = { b = ddp.ones(2) },
      __tensor__ = "not a tensor",
    }
    local path = dir .. "/s.safetensors"
    ddp.save_state(path, state, { metadata = { note = "from rank 0" } })
    local back, meta = ddp.load_state(path)
    assert.are.equal("from rank 0", meta.note)
    for _, k in ipairs { "epoch", "lr", "third", "big", "best", "worst", "ok", "off", "name", "bytes" } do
      assert.are.equal(state[k], back[k], k)
      assert.are.equal(math.type(state[k]), math.type(back[k]), k)
    end
    assert.are.same({}, back.empty)
    assert.are.same({ 1.5, 0.5, 0.25 }, back.history)
    assert.are.same({ [1] = "a", [10] = "b" }, back.sparse)
    assert.are.same({ 7, 8, key = "v" }, back.mixed)
    assert.are.equal("two", back[2])
    assert.are.equal("yes", back[true])
    assert.are.equal("not a tensor", back.__tensor__)
    assert.are.equal(4, back.nested.deeper.n)
    assert.are.same({ 1 }, back.nested.deeper.t:totable())
    assert.are.same({ 0, 0 }, back["a.b"]:totable())
    assert.are.same({ 1, 1 }, back.a.b:totable())
    assert.are.equal("int64", back.ids:dtype())
    assert.are.same(state.f64:totable(), back.f64:totable())
    local m2 = nn.Linear(3, 2)
    m2:load_state_dict(back.model)
    assert.are.same(m.weight:totable(), m2.weight:totable())
    -- plain safetensors underneath: ddp.load (and PyTorch) read the tensors by their paths
    local plain = ddp.load(path)
    assert.is_not_nil(plain["model.weight"])
    assert.is_not_nil(plain["nested.deeper.t"])
  end)

  it("is atomic: a state it cannot hold leaves the previous file as it was", function()
    local path = dir .. "/s.safetensors"
    ddp.save_state(path, { step = 1 })
    local before = U.read(path)
    fails("save_state: state.bad.fn is a function", ddp.save_state, path, { step = 2, bad = { fn = print } })
    assert.are.equal(before, U.read(path))
    assert.are.equal(1, ddp.load_state(path).step)
  end)

  it("names what it cannot save or load", function()
    local path = dir .. "/s.safetensors"
    local cyc = {}
    cyc.again = cyc
    fails("save_state: state.c.again refers back to a table that contains it", ddp.save_state, path, { c = cyc })
    fails("save_state: state.m is a module; save its state_dict%(%) instead", ddp.save_state, path,
      { m = nn.ReLU() })
    fails("save_state: the state has a table key", ddp.save_state, path, { [{}] = 1 })
    fails("save_state: expected a table to save, got a tensor", ddp.save_state, path, ddp.ones(1))
    fails("save_state: expected a file name, got nil", ddp.save_state, nil, {})
    fails("save_state: metadata must map strings to strings", ddp.save_state, path, {}, { metadata = { a = 1 } })
    fails("save_state: metadata key 'tree' is reserved", ddp.save_state, path, {}, { metadata = { tree = "x" } })
    fails("save_state: unknown option 'meta'", ddp.save_state, path, {}, { meta = {} })
    fails("load_state: .*cannot open", ddp.load_state, dir .. "/missing.safetensors")
    ddp.save({ w = ddp.ones(1) }, dir .. "/plain.safetensors")
    fails("load_state: .*plain.safetensors is not a file of ddp.save_state", ddp.load_state,
      dir .. "/plain.safetensors")
  end)
end)

describe("DistributedSampler's same-order warning", function()
  local function run(body)
    local dir = U.tmpdir()
    U.write(dir .. "/s.lua", [[
local ddp = require "ddplua"
local data = ddp.data
local ds = data.TensorDataset(ddp.arange(1, 21))
local sampler = data.DistributedSampler(ds, { num_replicas = 1, rank = 0, shuffle = true })
local loader = data.DataLoader(ds, { batch_size = 4, sampler = sampler })
]] .. body .. "\nprint('DONE')\n")
    local ok, out = U.run_ddplua(dir .. "/s.lua")
    U.rm_rf(dir)
    assert.is_true(ok, out)
    assert.matches("DONE", out)
    local _, n = out:gsub("two epochs drew epoch %d+'s order", "")
    return n, out
  end

  it("is quiet when a script peeks at a batch and then calls set_epoch every epoch (epochs from 0)", function()
    local n, out = run([[
local x = loader:iter()()  -- a peek at the first batch, as scripts do to print shapes
for epoch = 0, 3 do
  sampler:set_epoch(epoch)
  for xb in loader:iter() do end
end]])
    assert.are.equal(0, n, out)
  end)

  it("warns once when two epochs really train on the same order (no set_epoch)", function()
    local n, out = run([[
for epoch = 1, 3 do
  for xb in loader:iter() do end
end]])
    assert.are.equal(1, n, out)
    assert.matches("call sampler:set_epoch%(epoch%) at the start of every epoch", out)
  end)

  it("warns when set_epoch is called with the same epoch every time", function()
    local n, out = run([[
for epoch = 1, 2 do
  sampler:set_epoch(7)
  for xb in loader:iter() do end
end]])
    assert.are.equal(1, n, out)
  end)
end)

describe("init_process_group's PyTorch forms", function()
  it("names conflicting or surplus arguments before touching the environment", function()
    fails('init_process_group: backend "gloo" given twice, differently %("nccl" in the options%)',
      dist.init_process_group, "gloo", { backend = "nccl" })
    fails("init_process_group: too many arguments %(backend, init_method, timeout, world_size, rank%)",
      dist.init_process_group, "gloo", "env://", 30, 2, 0, "extra")
    fails('init_process_group: unknown backend "glooo" %(expected "cpu" %(or PyTorch\'s "gloo"%)',
      dist.init_process_group, "glooo")
    fails("init_process_group: expected a backend name or an options table, got number", dist.init_process_group, 3)
    assert.is_false(dist.is_initialized())
  end)

  it("accepts a positional backend with init_method, world_size and rank as PyTorch orders them", function()
    local port = dist.find_free_port()
    dist.init_process_group("gloo", "tcp://127.0.0.1:" .. port, 30, 1, 0)
    assert.are.equal("cpu", dist.get_backend())
    assert.are.equal(1, dist.get_world_size())
    dist.destroy_process_group()
    dist.init_process_group("cpu", { init_method = "tcp://127.0.0.1:" .. dist.find_free_port(), world_size = 1,
      rank = 0 })
    assert.are.equal(0, dist.get_rank())
    dist.destroy_process_group()
    assert.is_not_nil(data) -- the module stays loaded
  end)
end)

describe("FashionMNIST's transform=", function()
  local T = data.transforms
  local plain = data.FashionMNIST { split = "test" }

  it("applies a Lua function or a transforms list per sample, and target_transform to the label", function()
    local f = data.FashionMNIST { split = "test", transform = function(x) return x:flatten() * 2 end,
      target_transform = function(y) return y - 1 end }
    local x0, y0 = plain:get(3)
    local x, y = f:get(3)
    assert.are.same({ 784 }, x:size())
    assert.are.same((x0:flatten() * 2):totable(), x:totable())
    assert.are.equal(y0 - 1, y)
    local flip = data.FashionMNIST { split = "test", transform = { T.RandomHorizontalFlip(1), T.ToTensor() } }
    local xf = flip:get(3)
    assert.are.same({ 1, 28, 28 }, xf:size())
    for c = 1, 28 do -- mirrored columns
      assert.is_true(math.abs(xf[1][5][c]:item() - x0[1][5][29 - c]:item()) < 1e-6)
    end
    -- batches go item by item (and through the collate_fn), not the fast gather
    local xb, yb = data.DataLoader(f, { batch_size = 3 }):iter()()
    assert.are.same({ 3, 784 }, xb:size())
    assert.are.same({ 3 }, yb:size())
    assert.is_false(f.get_batch)
    assert.is_function(plain.get_batch) -- without a transform, the C gather
  end)

  it("names a transform it cannot use", function()
    fails("FashionMNIST: transform: entry 1 is a number, not a data.transforms object", data.FashionMNIST,
      { split = "test", transform = { 5 } })
    fails("FashionMNIST: target_transform must be a function of the label, got table", data.FashionMNIST,
      { split = "test", target_transform = {} })
  end)
end)
