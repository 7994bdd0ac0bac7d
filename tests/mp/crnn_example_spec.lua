-- examples/crnn/train.lua (a CRNN read with CTC: strips of Fashion-MNIST images, the label their class sequence)
-- at reduced size, with 1 and 2 ranks, in a temporary directory: the training and test losses fall, one rank's
-- greedy decoding already gets whole sequences right, every test strip is counted once, and rank 0 saves the model.
local U = require "helpers.io_util"

describe("examples/crnn", function()
  for _, nproc in ipairs({ 1, 2 }) do
    it("trains with " .. nproc .. " rank(s) through Conv2d, a bidirectional LSTM and CTCLoss", function()
      local dir = U.tmpdir()
      local out = U.run_example(dir, nproc, "examples/crnn/train.lua",
        { "epochs=2", "train_samples=3000", "test_samples=300", "threads=1" })
      assert.is_not_nil(out:find(nproc .. " process(es)", 1, true), out)
      local train, test, acc = {}, {}, {}
      for l, t, a in out:gmatch("train loss ([%d.naif%-]+), [%d.]+ strips/s | test loss ([%d.naif%-]+), sequence " ..
        "accuracy %d+/300 %(([%d.]+)%%%)") do
        train[#train + 1], test[#test + 1], acc[#acc + 1] = tonumber(l), tonumber(t), tonumber(a)
      end
      assert.are.equal(2, #train, out)
      assert.is_true(train[2] < train[1] and test[2] < test[1], out)
      if nproc == 1 then assert.is_true(acc[2] > 5, out) end -- chance is 0
      assert.is_true(U.exists(dir .. "/runs/crnn/model.safetensors"), out)
      U.rm_rf(dir)
    end)
  end
end)
