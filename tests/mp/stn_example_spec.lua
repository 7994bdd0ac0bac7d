-- examples/stn/train.lua (PyTorch's Spatial Transformer tutorial on Fashion-MNIST) at reduced size, with 1 and 2
-- ranks, in a temporary directory: the training loss falls, the test accuracy beats chance, the transforms move
-- off the identity they start from, and rank 0 saves the model.
local U = require "helpers.io_util"

local function run(dir, nproc, args) return U.run_example(dir, nproc, "examples/stn/train.lua", args) end

describe("examples/stn", function()
  for _, nproc in ipairs({ 1, 2 }) do
    it("trains with " .. nproc .. " rank(s) through affine_grid and grid_sample", function()
      local dir = U.tmpdir()
      local out = run(dir, nproc, { "epochs=2", "train_samples=3072", "test_samples=600", "lr=0.05" })
      assert.is_not_nil(out:find(nproc .. " process(es)", 1, true), out)
      local train, acc, moved = {}, {}, {}
      for l, a, m in out:gmatch("train loss ([%d.naif%-]+).-Accuracy: %d+/600 %(([%d.]+)%%%) | mean |theta %- I| ([%d.]+)") do
        train[#train + 1], acc[#acc + 1], moved[#moved + 1] = tonumber(l), tonumber(a), tonumber(m)
      end
      assert.are.equal(2, #train, out)
      assert.is_true(train[1] == train[1] and train[2] < train[1], out)
      assert.is_true(acc[2] > 25, out) -- chance is 10%
      assert.is_true(moved[2] > 0, out)
      assert.is_true(U.exists(dir .. "/runs/stn/model.safetensors"), out)
      U.rm_rf(dir)
    end)
  end
end)
