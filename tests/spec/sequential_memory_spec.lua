-- nn.Sequential under no_grad frees each big intermediate output once the
-- next module has consumed it, before later modules allocate (the
-- collector alone runs after an allocation: a batch-1000 evaluation of the
-- Fashion-MNIST CNN held three layers' outputs at once). Between two of the
-- library's own modules it frees the output in either mode, so with grad
-- enabled backward gives each activation's storage back as soon as it has
-- used it, without a collection; an output a module of the user's own made
-- or read, or one a module returned as it came, stays.
local ddp = require "ddplua"
local nn = ddp.nn

describe("nn.Sequential memory", function()
  local N = 1 << 22 -- elements: 16 MiB of float32, the size Sequential frees between modules
  local MiB = 1 << 20
  local Probe = nn.Module:extend("SequentialMemoryProbe")
  function Probe:forward(x)
    self.live = ddp.core.memory_stats().live_bytes
    return x
  end

  local function run(grad)
    local probe = Probe()
    local model = nn.Sequential { nn.ReLU(), nn.ReLU(), nn.ReLU(), probe }
    local x = ddp.randn(N)
    collectgarbage()
    collectgarbage()
    -- no cached blocks: a 16 MiB request may take a cached block of up to
    -- twice that (alloc_cpu.c), counted live at its own size, and which
    -- blocks earlier specs left depends on what ran before
    ddp.core.empty_cache()
    local before = ddp.core.memory_stats().live_bytes
    local y
    if grad then
      y = model(x)
    else
      y = ddp.no_grad(function() return model(x) end)
    end
    return (probe.live - before) / MiB, y, x
  end

  it("holds only the live output under no_grad (the dead ones are freed first)", function()
    local extra, y, x = run(false)
    -- the third ReLU's output is live; the first two outputs are dead
    assert(extra <= 16.5, string.format("%.1f MiB beyond the input at the last module, expected 16", extra))
    assert.equal(0, (y - ddp.relu(x)):abs():max():item())
  end)

  it("computes the same with grad enabled", function()
    local _, y, x = run(true)
    assert.equal(0, (y - ddp.relu(x)):abs():max():item())
  end)

  -- live tensor bytes now, after the collector could not have run (it is stopped)
  local function live() return ddp.core.memory_stats().live_bytes end

  it("gives the activations back during backward, without a collection", function()
    local model = nn.Sequential { nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 8) }
    local x = ddp.randn(4096, 256)
    collectgarbage()
    collectgarbage("stop")
    local ok, err = pcall(function()
      local before = live()
      local loss = model(x):sum()
      local held = live() - before
      loss:backward()
      local after = live() - before
      -- the fused Linear + ReLU's and Tanh's outputs (4 MiB each) are what backward reads; the second Linear's
      -- output went as soon as Tanh had read it; after backward only the parameters' gradients (~0.5 MiB) and the
      -- loss remain
      assert(held >= 8 * MiB and held <= 9 * MiB, string.format("%.1f MiB held for backward", held / MiB))
      assert(after <= 2 * MiB, string.format("%.1f MiB still held after backward without a collection", after / MiB))
    end)
    collectgarbage("restart")
    assert(ok, err)
  end)

  it("keeps what a module of the user's own holds, and what a module returns as it came", function()
    local Keep = nn.Module:extend("KeepInput")
    function Keep:forward(x)
      self.input = x
      return x * 2
    end
    local MyReLU = nn.ReLU:extend("MyReLU") -- a subclass: not the library's own
    function MyReLU:forward(x)
      self.input = x
      return x:relu()
    end
    local keep, mine = Keep(), MyReLU()
    local patched = nn.Tanh()
    function patched.forward(_, x) -- an instance's forward replaced
      patched.input = x
      return x:tanh()
    end
    for _, grad in ipairs({ true, false }) do
      local inner = Keep() -- inside a library container: the container hands its input on
      local model = nn.Sequential { nn.Linear(8, 8), keep, nn.ReLU(), mine, nn.Linear(8, 8), nn.Identity(),
        nn.Dropout(0.5):eval(), nn.Sigmoid(), patched, nn.ReLU(), nn.Sequential { inner, nn.ReLU() } }
      local x = ddp.randn(4, 8)
      local y = grad and model(x) or ddp.no_grad(function() return model(x) end)
      -- each held input is still a tensor with its values (using a freed one raises an error)
      for _, m in ipairs({ keep, mine, patched, inner }) do
        assert.equal(32, m.input:isfinite():sum():item())
      end
      assert.equal(0, (mine.input - (keep.input * 2):relu()):abs():max():item())
      assert.equal(4, y:size(1))
      if grad then y:sum():backward() end
    end
  end)
end)
