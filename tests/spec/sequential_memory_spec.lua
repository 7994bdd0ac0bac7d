-- nn.Sequential under no_grad frees each big intermediate output once the
-- next module has consumed it, before later modules allocate (the
-- collector alone runs after an allocation: a batch-1000 evaluation of the
-- Fashion-MNIST CNN held three layers' outputs at once).
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
end)
