-- examples/unet/train.lua (a U-Net segmenting scenes of two Fashion-MNIST garments into 11 classes: Conv2d,
-- BatchNorm2d, MaxPool2d, ConvTranspose2d, skip connections by cat, per-pixel cross entropy over [N, C, H, W]) at
-- reduced size, with 1 and 2 ranks, in a temporary directory: the training loss falls, the test pixel accuracy beats
-- labelling every pixel background, every test scene is counted once, and rank 0 saves the model.
local U = require "helpers.io_util"

describe("examples/unet", function()
  for _, nproc in ipairs({ 1, 2 }) do
    it("trains with " .. nproc .. " rank(s) through a U-Net's skip connections and per-pixel cross entropy", function()
      local dir = U.tmpdir()
      local out = U.run_example(dir, nproc, "examples/unet/train.lua",
        { "epochs=2", "train_samples=1280", "test_samples=100", "threads=1", "width=8", "lr=5e-3" })
      assert.is_not_nil(out:find(nproc .. " process(es)", 1, true), out)
      local train, acc, miou = {}, {}, {}
      for l, a, m, n in out:gmatch("train loss ([%d.naif%-]+), [%d.]+ scenes/s | test pixel accuracy ([%d.]+)%%, " ..
        "mean IoU ([%d.]+)%% %((%d+) scenes%)") do
        assert.are.equal("100", n, out) -- each test scene once, whatever the ranks' padding
        train[#train + 1], acc[#acc + 1], miou[#miou + 1] = tonumber(l), tonumber(a), tonumber(m)
      end
      assert.are.equal(2, #train, out)
      assert.is_true(train[2] < train[1], out)
      -- background is about 2/3 of the pixels: the model must find garments to beat it
      assert.is_true(acc[2] > 72 and miou[2] > 8, out)
      assert.is_true(U.exists(dir .. "/runs/unet/model.safetensors"), out)
      U.rm_rf(dir)
    end)
  end
end)
