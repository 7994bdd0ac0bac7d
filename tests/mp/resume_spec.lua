-- Resuming the Fashion-MNIST example (examples/fashion_mnist/train.lua):
-- 2 epochs straight vs 1 epoch + checkpoint + a new process + resume + 1
-- epoch, with 1 and with 2 ranks, give bitwise identical per-step losses
-- and final parameters (model, optimizer, scheduler, sampler epoch and the
-- generators all come back from the checkpoint).
local ddp = require "ddplua"
local core = require "ddplua.core"

local BIN = os.getenv("DDPLUA_BIN") or "./build/bin/ddplua"
local ROOT = io.popen("pwd"):read("l")

local function q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

local function run(dir, nproc, args)
  local cmd = string.format("cd %s && %s/%s --nproc %d %s/examples/fashion_mnist/train.lua %s 2>&1", q(dir), ROOT,
    BIN:gsub("^%./", ""), nproc, ROOT, table.concat(args, " "))
  local p = io.popen(cmd)
  local out = p:read("a")
  local ok = p:close()
  assert(ok, "run failed: " .. cmd .. "\n" .. out)
  return out
end

-- per-step losses from metrics.jsonl, by step
local function step_losses(path)
  local out = {}
  for line in io.lines(path) do
    local rec = core.json_decode(line)
    if rec.kind == "step" then out[rec.step] = rec.loss end
  end
  return out
end

local common = { "epochs=2", "train_samples=768", "log_every=1", "batch_size=32", "model=mlp" }
local function with(extra, base)
  local t = { table.unpack(base or common) }
  for _, a in ipairs(extra) do t[#t + 1] = a end
  return t
end

for _, nproc in ipairs({ 1, 2 }) do
  describe("resume with " .. nproc .. " rank(s)", function()
    it("continues the same loss curve, bitwise", function()
      local dir = os.tmpname()
      os.remove(dir)
      assert(os.execute("mkdir -p " .. q(dir)))
      run(dir, nproc, with { "run_name=straight" })
      local first = run(dir, nproc, with { "run_name=resumed", "stop_after=1" })
      assert.matches("stopping after epoch 1", first, 1, true)
      local second = run(dir, nproc, with { "run_name=resumed", "resume=runs/resumed/last.safetensors" })
      assert.matches("resumed from runs/resumed/last.safetensors after epoch 1", second, 1, true)

      local a = step_losses(dir .. "/runs/straight/metrics.jsonl")
      local b = step_losses(dir .. "/runs/resumed/metrics.jsonl")
      local steps = 0
      for step, loss in pairs(a) do
        assert.is_not_nil(b[step], "step " .. step .. " missing from the resumed run")
        assert.are.equal(string.format("%.17g", loss), string.format("%.17g", b[step]), "loss at step " .. step)
        steps = steps + 1
      end
      assert.are.equal(2 * 768 // (32 * nproc), steps)

      local ma = ddp.load(dir .. "/runs/straight/model.safetensors")
      local mb = ddp.load(dir .. "/runs/resumed/model.safetensors")
      local n = 0
      for name, t in pairs(ma) do
        assert.are.equal(core.tobytes(t), core.tobytes(mb[name]), name)
        n = n + 1
      end
      assert.are.equal(6, n)
      os.execute("rm -rf " .. q(dir))
    end)
  end)
end

describe("the CNN's batch norm under DDP", function()
  it("is SyncBatchNorm by default and each rank's own with sync_bn=false (the losses differ)", function()
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. q(dir)))
    local args = { "epochs=1", "train_samples=256", "log_every=1", "batch_size=32", "model=cnn" }
    local function with_args(extra) return with(extra, args) end
    assert.matches(", SyncBatchNorm\n", run(dir, 2, with_args { "run_name=sync" }), 1, true)
    assert.matches(", BatchNorm per rank\n", run(dir, 2, with_args { "run_name=local", "sync_bn=false" }), 1, true)
    local a = step_losses(dir .. "/runs/sync/metrics.jsonl")
    local b = step_losses(dir .. "/runs/local/metrics.jsonl")
    assert.is_not_nil(a[2])
    assert.are_not.equal(string.format("%.17g", a[2]), string.format("%.17g", b[2]))
    os.execute("rm -rf " .. q(dir))
  end)
end)
