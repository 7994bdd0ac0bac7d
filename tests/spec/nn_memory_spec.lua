-- Memory stays flat across training steps: after warm-up, the CPU tensor
-- bytes alive after a full collection do not grow, and between collections
-- the garbage the Lua GC has not yet seen stays within the pacer's bound.
local ddp = require "ddplua"
local nn, optim, data = ddp.nn, ddp.optim, ddp.data

describe("training memory", function()
  it("stays flat over 300 steps of a small MLP", function()
    ddp.manual_seed(0)
    local x, y = ddp.randn(512, 32), (ddp.rand(512) * 10):long() + 1
    local loader = data.DataLoader(data.TensorDataset(x, y), { batch_size = 32, shuffle = true })
    local model = nn.Sequential { nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 64), nn.Tanh(), nn.Linear(64, 10) }
    local opt = optim.SGD(model:parameters(), { lr = 0.05, momentum = 0.9 })
    local criterion = nn.CrossEntropyLoss()
    local step, live_warm, live_end, peak_after = 0, nil, nil, 0
    local function live()
      collectgarbage()
      collectgarbage()
      return ddp.memory_stats().live_bytes
    end
    while step < 300 do
      for bx, by in loader:iter() do
        opt:zero_grad()
        local loss = criterion(model(bx), by)
        loss:backward()
        opt:step()
        step = step + 1
        loss, bx, by = nil, nil, nil
        if step == 50 then live_warm = live() end
        if step > 50 then peak_after = math.max(peak_after, ddp.memory_stats().live_bytes) end
        if step == 300 then
          live_end = live()
          break
        end
      end
    end
    assert.are.equal(live_warm, live_end)
    -- uncollected garbage is bounded by the GC pacer (16 MiB, or the live set)
    assert.is_true(peak_after <= live_warm + (20 << 20), string.format("peak %d over a live set of %d", peak_after,
      live_warm))
  end)
end)
