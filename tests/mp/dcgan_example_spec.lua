-- examples/dcgan/train.lua (pytorch/examples' DCGAN on 28 x 28 Fashion-MNIST) at reduced size, with 1 and 2 ranks,
-- run in a temporary directory (its runs/dcgan/ lands there): the losses and D's outputs are finite, D tells real
-- images from generated ones (D(x) above D(G(z))), rank 0 writes each epoch's sample grid as a whole 224 x 224 PGM
-- and saves both models.
local U = require "helpers.io_util"

local function run(dir, nproc, args) return U.run_example(dir, nproc, "examples/dcgan/train.lua", args) end

local function finite(v) return v ~= nil and v == v and v > -math.huge and v < math.huge end
local NUM = "([%d.naif%-]+)"

describe("examples/dcgan", function()
  for _, nproc in ipairs({ 1, 2 }) do
    it("trains with " .. nproc .. " rank(s): finite losses, D tells real from generated, samples and models", function()
      local dir = U.tmpdir()
      local out = run(dir, nproc, { "epochs=2", "train_samples=1280", "batch_size=32", "ngf=16", "ndf=16" })
      assert.is_not_nil(out:find(nproc .. " process(es)", 1, true), out)
      local epochs = {}
      for d, g, dx, dgz in out:gmatch("Loss_D " .. NUM .. "  Loss_G " .. NUM .. "  D%(x%) " .. NUM .. "  D%(G%(z%)%) "
        .. NUM) do
        epochs[#epochs + 1] = { tonumber(d), tonumber(g), tonumber(dx), tonumber(dgz) }
      end
      assert.are.equal(2, #epochs, out)
      for _, e in ipairs(epochs) do
        for i = 1, 4 do assert.is_true(finite(e[i]), out) end
        assert.is_true(e[1] > 0 and e[2] > 0, out)
        assert.is_true(e[3] > 0 and e[3] < 1 and e[4] > 0 and e[4] < 1, out)
      end
      assert.is_true(epochs[2][3] > epochs[2][4], "D(x) above D(G(z)) after two epochs\n" .. out)
      for epoch = 1, 2 do
        local pgm = U.read(dir .. "/runs/dcgan/samples_" .. epoch .. ".pgm")
        local header = "P5\n224 224\n255\n"
        assert.are.equal(header, pgm:sub(1, #header))
        assert.are.equal(#header + 224 * 224, #pgm)
      end
      assert.is_true(U.exists(dir .. "/runs/dcgan/netG.safetensors") and U.exists(dir .. "/runs/dcgan/netD.safetensors"),
        out)
      U.rm_rf(dir)
    end)
  end
end)
