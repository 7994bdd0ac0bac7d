-- examples/seq2seq/train.lua (an nn.Transformer learning to reverse digit sequences) at reduced size, with 1 and 2
-- ranks, run in a temporary directory (its runs/seq2seq/ lands there): the training loss falls from epoch to epoch
-- below the uniform guess, the exact-match share is a percentage of the test sequences counted once each, and rank 0
-- saves the model.
local U = require "helpers.io_util"

local function run(dir, nproc, args) return U.run_example(dir, nproc, "examples/seq2seq/train.lua", args) end

describe("examples/seq2seq", function()
  for _, nproc in ipairs({ 1, 2 }) do
    it("trains with " .. nproc .. " rank(s): the loss falls, the decoded share is a percentage", function()
      local dir = U.tmpdir()
      local out = run(dir, nproc, { "epochs=3", "train_samples=1536", "test_samples=200", "lr=2e-3" })
      assert.is_not_nil(out:find(nproc .. " process(es)", 1, true), out)
      local loss, exact = {}, {}
      for l, e in out:gmatch("train loss ([%d.naif%-]+), [%d.]+ sequences/s; test: ([%d.]+)%% reversed exactly") do
        loss[#loss + 1], exact[#exact + 1] = tonumber(l), tonumber(e)
      end
      assert.are.equal(3, #loss, out)
      for e = 1, 3 do
        -- log(13) = 2.56 nats is the uniform guess over the vocabulary
        assert.is_true(loss[e] > 0 and loss[e] < math.log(13), out)
        -- 200 sequences counted once each: a multiple of 0.5%
        assert.is_true(exact[e] >= 0 and exact[e] <= 100 and (exact[e] * 2) % 1 == 0, out)
      end
      assert.is_true(loss[2] < loss[1] and loss[3] < loss[2], out)
      assert.is_true(U.exists(dir .. "/runs/seq2seq/model.safetensors"), out)
      U.rm_rf(dir)
    end)
  end
end)
