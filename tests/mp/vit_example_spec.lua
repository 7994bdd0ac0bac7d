-- examples/vit/train.lua (a Vision Transformer on Fashion-MNIST: a patch Conv2d, a class token, pre-norm
-- nn.TransformerEncoder layers, AdamW with two parameter groups, label smoothing) at reduced size, with 1 and 2 ranks,
-- in a temporary directory: the training and test losses fall, the test accuracy is well above chance, every test
-- image is counted once, and rank 0 saves a model whose state_dict loads (strictly) into a fresh ViT of the same size,
-- which then classifies test images well above chance.
local U = require "helpers.io_util"

describe("examples/vit", function()
  for _, nproc in ipairs({ 1, 2 }) do
    it("trains with " .. nproc .. " rank(s) through TransformerEncoder layers and AdamW", function()
      local dir = U.tmpdir()
      local out = U.run_example(dir, nproc, "examples/vit/train.lua",
        { "epochs=2", "train_samples=3000", "test_samples=500", "threads=1", "depth=2", "warmup=10" })
      assert.is_not_nil(out:find(nproc .. " process(es)", 1, true), out)
      local train, test, acc = {}, {}, {}
      for l, t, a in out:gmatch("train loss ([%d.naif%-]+), [%d.]+ images/s | test loss ([%d.naif%-]+), accuracy " ..
        "%d+/500 %(([%d.]+)%%%)") do
        train[#train + 1], test[#test + 1], acc[#acc + 1] = tonumber(l), tonumber(t), tonumber(a)
      end
      assert.are.equal(2, #train, out)
      assert.is_true(train[2] < train[1] and test[2] < test[1], out)
      assert.is_true(acc[2] > 40, out) -- chance is 10%
      assert.is_true(U.exists(dir .. "/runs/vit/model.safetensors"), out)
      U.write(dir .. "/check.lua", string.format([[
local ddp = require "ddplua"
local ViT = dofile(%q)
local net = ViT { image = 28, patch = 4, channels = 1, dim = 64, depth = 2, heads = 4, mlp = 128, num_classes = 10,
  dropout = 0 }
net:load_state_dict(ddp.load("runs/vit/model.safetensors"))
net:eval()
local test = ddp.data.FashionMNIST { split = "test" }
local x, y = ddp.data.DataLoader(test, { batch_size = 500 }):iter()()
local pred = net(((x:view(500, 1, 28, 28) - 0.2860) / 0.3530)):argmax(2)
print(string.format("reloaded accuracy %%.3f", pred:eq(y):to("float32"):mean():item()))
]], U.abspath("examples/vit/model.lua")))
      local ok, res = U.run_ddplua("check.lua", {}, nil, dir)
      assert(ok, res)
      local racc = tonumber(res:match("reloaded accuracy ([%d.]+)"))
      assert.is_not_nil(racc, res)
      assert.is_true(racc > 0.4, res)
      U.rm_rf(dir)
    end)
  end
end)
