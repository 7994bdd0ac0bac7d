-- examples/video3d/train.lua (a 3-d ResNet on moving Fashion-MNIST clips) at reduced size, with 1 and 2 ranks, in a
-- temporary directory: the training loss falls, the test accuracy beats chance, every test clip is counted once,
-- and rank 0 saves the model.
local U = require "helpers.io_util"

describe("examples/video3d", function()
  for _, nproc in ipairs({ 1, 2 }) do
    it("trains with " .. nproc .. " rank(s) through Conv3d, BatchNorm3d and AdaptiveAvgPool3d", function()
      local dir = U.tmpdir()
      local out = U.run_example(dir, nproc, "examples/video3d/train.lua",
        { "epochs=2", "train_samples=1024", "test_samples=300", "width=8", "batch_size=16", "threads=1" })
      assert.is_not_nil(out:find(nproc .. " process(es)", 1, true), out)
      local train, acc = {}, {}
      for l, a in out:gmatch("train loss ([%d.naif%-]+), [%d.]+ clips/s | test loss [%d.]+, accuracy %d+/300 %(([%d.]+)%%%)") do
        train[#train + 1], acc[#acc + 1] = tonumber(l), tonumber(a)
      end
      assert.are.equal(2, #train, out)
      assert.is_true(train[1] == train[1] and train[2] < train[1], out)
      assert.is_true(acc[2] > 25, out) -- chance is 10%
      assert.is_true(U.exists(dir .. "/runs/video3d/model.safetensors"), out)
      U.rm_rf(dir)
    end)
  end
end)
