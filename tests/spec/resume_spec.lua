-- A run interrupted after some epochs and resumed from its checkpoint ends
-- exactly where the uninterrupted run ends (examples/run_helpers/train.lua:
-- model, optimizer state, step counter and the generator that draws each
-- epoch's data all come back).
local ddp = require "ddplua"
local core = require "ddplua.core"
local U = require "helpers.io_util"

describe("resume from a checkpoint", function()
  local dir
  before_each(function() dir = U.tmpdir() end)
  after_each(function() U.rm_rf(dir) end)

  it("gives the same parameters, optimizer state and metrics as the uninterrupted run", function()
    local script = U.abspath("examples/run_helpers/train.lua")
    local ok, straight_out = U.run_ddplua(script, { "epochs=4", "run_name=straight", "samples=1024" }, {}, dir)
    assert.is_true(ok, straight_out)
    local out
    ok, out = U.run_ddplua(script, { "epochs=2", "run_name=resumed", "samples=1024" }, {}, dir)
    assert.is_true(ok, out)
    local resumed_out
    ok, resumed_out = U.run_ddplua(script, { "epochs=4", "run_name=resumed", "samples=1024",
      "resume=runs/resumed/last.safetensors" }, {}, dir)
    assert.is_true(ok, resumed_out)
    assert.matches("resumed from runs/resumed/last.safetensors: epoch 2, step 32", resumed_out, 1, true)

    local a, meta_a = ddp.load(dir .. "/runs/straight/last.safetensors")
    local b, meta_b = ddp.load(dir .. "/runs/resumed/last.safetensors")
    local n = 0
    for name, t in pairs(a) do
      assert.is_true(core.is_tensor(b[name]), name)
      assert.are.equal(U.hex(core.tobytes(t)), U.hex(core.tobytes(b[name])), name)
      n = n + 1
    end
    assert.are.equal(8, n) -- 4 parameters, 4 momentum buffers
    assert.are.equal(meta_a.step, meta_b.step)
    -- the data generator is where the straight run's was (Lua's math.random, which the script
    -- never seeds, differs between processes and is not compared)
    assert.are.same(core.json_decode(meta_a.rng)[1].philox, core.json_decode(meta_b.rng)[1].philox)
    -- epochs 3 and 4 print the same losses and accuracies as in the straight run
    local lines = 0
    for line in resumed_out:gmatch("epoch [34]: train[^\n]*") do
      assert.matches(line, straight_out, 1, true)
      lines = lines + 1
    end
    assert.are.equal(2, lines)
  end)
end)
