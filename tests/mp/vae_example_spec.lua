-- examples/vae/train.lua (pytorch/examples' VAE on Fashion-MNIST) at reduced size, with 1 and 2 ranks, run in a
-- temporary directory (its runs/vae/ lands there): the average training loss per image falls from epoch to epoch and
-- stays finite, the test loss is finite, and rank 0 saves the model.
local U = require "helpers.io_util"

local function run(dir, nproc, args) return U.run_example(dir, nproc, "examples/vae/train.lua", args) end

local function finite(v) return v ~= nil and v == v and v > -math.huge and v < math.huge end

describe("examples/vae", function()
  for _, nproc in ipairs({ 1, 2 }) do
    it("trains with " .. nproc .. " rank(s): the loss falls and stays finite", function()
      local dir = U.tmpdir()
      local out = run(dir, nproc, { "epochs=3", "train_samples=2048", "test_samples=500", "batch_size=64" })
      assert.is_not_nil(out:find(nproc .. " process(es)", 1, true), out)
      local train, test = {}, {}
      for v in out:gmatch("Average loss: ([%d.naif%-]+)") do train[#train + 1] = tonumber(v) end
      for v in out:gmatch("Test set loss: ([%d.naif%-]+)") do test[#test + 1] = tonumber(v) end
      assert.are.equal(3, #train, out)
      assert.are.equal(3, #test, out)
      for e = 1, 3 do
        assert.is_true(finite(train[e]) and finite(test[e]), out)
        -- a 784-pixel image costs 543 nats at p = 0.5 everywhere; the model does better within an epoch
        assert.is_true(train[e] > 0 and train[e] < 543, out)
      end
      assert.is_true(train[2] < train[1] and train[3] < train[2], out)
      assert.is_true(test[3] < test[1], out)
      assert.is_true(U.exists(dir .. "/runs/vae/model.safetensors"), out)
      U.rm_rf(dir)
    end)
  end
end)
