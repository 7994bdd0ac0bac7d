-- The model examples at reduced size, as the host runs them: examples/gpt
-- (2 ranks, gradient accumulation with no_sync; a run stopped and resumed
-- from its checkpoint ends bitwise where the straight run ends; sample.lua
-- writes text from the checkpoint), examples/resnet (resnet18 on a
-- generated CSV image set, 2 ranks, with and without SyncBatchNorm) and
-- examples/lstm_lm (word-level LSTM on the fortunes corpus; 2 ranks train as
-- one process). They need Debian's fortunes package.
local U = require "helpers.io_util"

local function have_fortunes() return U.exists("/usr/share/games/fortunes/fortunes") end

local function run(script, args, nproc)
  local parts = { U.ddplua }
  if nproc then parts[#parts + 1] = "--nproc " .. nproc end
  parts[#parts + 1] = script
  for _, a in ipairs(args) do parts[#parts + 1] = U.quote(a) end
  local ok, out = U.run(table.concat(parts, " "))
  assert(ok, table.concat(parts, " ") .. "\n" .. out)
  return out
end

describe("examples/gpt", function()
  it("trains on 2 ranks with accumulation, resumes bitwise, and samples from its checkpoint", function()
    if not have_fortunes() then return pending("skipped: Debian's fortunes package is not installed") end
    local dir = U.tmpdir()
    local common = { "steps=10", "limit=300000", "n_layer=1", "n_embd=32", "n_head=2", "block_size=32",
      "batch_size=4", "accum=2", "warmup=3", "eval_batches=2", "out=" .. dir }
    local straight = run("examples/gpt/train.lua", common, 2)
    local full = straight:match("val_loss=[%d.]+ %(([^)]+)%)")
    assert.is_not_nil(full, straight)
    assert.is_true(tonumber(full) < math.log(256), straight) -- it learnt something
    local args = { table.unpack(common) }
    args[#args + 1] = "stop_after=4"
    assert.is_not_nil(run("examples/gpt/train.lua", args, 2):find("stopped after step 4", 1, true))
    args[#args] = "resume=" .. dir .. "/ckpt.safetensors"
    local resumed = run("examples/gpt/train.lua", args, 2)
    assert.are.equal(full, resumed:match("val_loss=[%d.]+ %(([^)]+)%)"), resumed)
    local text = run("examples/gpt/sample.lua", { "ckpt=" .. dir .. "/ckpt.safetensors", "prompt=Q: ",
      "tokens=40" })
    assert.is_not_nil(text:find("Q: ", 1, true), text)
    assert.is_true(#text >= 43)
    U.rm_rf(dir)
  end)
end)

describe("examples/resnet", function()
  it("trains resnet18 on a generated CSV image set with 2 ranks", function()
    local dir = U.tmpdir()
    run("examples/csv_images/make_dataset.lua", { "out=" .. dir, "n=200" })
    local out = run("examples/resnet/train.lua", { "data=" .. dir, "epochs=1", "width=8", "batch_size=16",
      "num_workers=1" }, 2)
    assert.is_not_nil(out:find("resnet18 (width 8)", 1, true), out)
    assert.is_not_nil(out:find("2 process(es), SyncBatchNorm", 1, true), out)
    local acc = tonumber(out:match("test acc ([%d.]+)"))
    assert.is_true(acc ~= nil and acc >= 0 and acc <= 1, out)
    assert.is_true(U.exists(dir .. "/resnet18.safetensors"))
    -- sync_bn=false: plain BatchNorm under DDP (the bench's 2-process row, as PyTorch 1.13 on the CPU)
    out = run("examples/resnet/train.lua", { "data=" .. dir, "epochs=1", "width=8", "batch_size=16",
      "num_workers=0", "sync_bn=false" }, 2)
    assert.is_not_nil(out:find("2 process(es), BatchNorm per rank", 1, true), out)
    assert.is_not_nil(out:match("test acc [%d.]+"), out)
    U.rm_rf(dir)
  end)

  it("trains under bf16 autocast (autocast=bfloat16) and refuses an unknown autocast", function()
    local dir = U.tmpdir()
    run("examples/csv_images/make_dataset.lua", { "out=" .. dir, "n=200" })
    local args = { "data=" .. dir, "epochs=3", "width=8", "batch_size=16", "num_workers=0", "autocast=bfloat16" }
    local out = run("examples/resnet/train.lua", args)
    local l1, l3 = out:match("epoch 1  loss ([%d.]+)"), out:match("epoch 3  loss ([%d.]+)")
    -- finite, and it learns (here 2.38-2.60 -> 1.57-1.72 with bf16 convolutions, widened ones, or no oneDNN)
    assert.is_true(l1 ~= nil and l3 ~= nil and tonumber(l3) < tonumber(l1) - 0.2, out)
    assert.is_not_nil(out:match("test acc [%d.]+"), out)
    args[#args] = "autocast=float16x"
    local ok, bad = U.run(U.ddplua .. " examples/resnet/train.lua " .. table.concat(args, " "))
    assert.is_false(ok, bad)
    assert.is_not_nil(bad:find("autocast must be none or bfloat16, got float16x", 1, true), bad)
    U.rm_rf(dir)
  end)
end)

describe("examples/lstm_lm", function()
  it("trains the word-level LSTM language model and reports perplexities", function()
    if not have_fortunes() then return pending("skipped: Debian's fortunes package is not installed") end
    local dir = U.tmpdir()
    local out = run("examples/lstm_lm/train.lua", { "epochs=1", "limit=20000", "nhid=32", "emsize=32", "vocab=500",
      "bptt=20", "out=" .. dir })
    local v1 = out:match("end of epoch   1 | valid loss%s+([%d.]+)")
    assert.is_true(v1 ~= nil and tonumber(v1) < math.log(500) - 1, out) -- well below a uniform guess
    assert.is_not_nil(out:match("test ppl%s+[%d.]+"), out)
    assert.is_true(U.exists(dir .. "/corpus.safetensors"))
    U.rm_rf(dir)
  end)

  it("under 2 ranks (each its share of the batch columns) trains as one process does", function()
    if not have_fortunes() then return pending("skipped: Debian's fortunes package is not installed") end
    -- no dropout and a small learning rate: the runs differ only by rounding (lr 20 amplifies that chaotically)
    local dir = U.tmpdir()
    local args = { "epochs=1", "limit=20000", "nhid=32", "emsize=32", "vocab=500", "bptt=20", "dropout=0", "lr=2",
      "batch_size=8", "out=" .. dir }
    local function ppl(out)
      local v = tonumber(out:match("end of epoch   1 | valid loss%s+[%d.]+ | valid ppl%s+([%d.]+)"))
      assert.is_not_nil(v, out)
      return v
    end
    local one, two = ppl(run("examples/lstm_lm/train.lua", args)), ppl(run("examples/lstm_lm/train.lua", args, 2))
    assert.is_true(math.abs(one - two) <= 1e-3 * one, string.format("valid ppl %.2f (1 rank) vs %.2f (2 ranks)", one,
      two))
    U.rm_rf(dir)
  end)
end)
