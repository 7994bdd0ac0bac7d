-- Distributed work on the GPU, through the ddplua launcher: the nccl group at
-- world size 1, the cpu group carrying CUDA tensors for 2 ranks sharing the
-- GPU (chosen by backend "auto" too), DistributedDataParallel equal to
-- single-process training on both backends with its bucket all-reduces and
-- SyncBatchNorm's collectives forced through nccl at world size 1
-- (DDPLUA_FORCE_COLLECTIVES), and Fashion-MNIST reaching 88% test accuracy
-- on one GPU.
-- Run with: busted --tags=gpu tests/gpu   (DDPLUA_BIN picks the binary)
local ddp = require "ddplua"
local H = require("gpu.gpu_helper").setup(describe, it, pending)

local function ddplua(args)
  local ok, out = H.run(H.ddplua_bin() .. " " .. args)
  return ok, out
end

local function ddplua_env(env, args) return H.run(env .. " " .. H.ddplua_bin() .. " " .. args) end

-- a port per run, so reruns do not collide with a socket in TIME_WAIT
local function port() return 20000 + (os.time() % 20000) + math.random(0, 999) end

H.describe("cuda distributed", function()
  it("the nccl process group works at world size 1", function()
    local ok, out = ddplua("tests/gpu/scripts/nccl_world1.lua port=" .. port())
    assert(ok, out)
    assert.matches("nccl world 1: ok", out)
  end)

  it("the cpu process group carries CUDA tensors for 2 ranks on one GPU", function()
    local ok, out = ddplua("--nproc 2 --backend cpu tests/gpu/scripts/cpu_pg_cuda.lua")
    assert(ok, out)
    local _, n = out:gsub("cpu pg with cuda tensors: ok", "")
    assert.are.equal(2, n, out)
  end)

  it("DistributedDataParallel on the GPU equals single-process training (cpu group, 2 ranks)", function()
    local ok, out = ddplua("--nproc 2 --backend cpu tests/gpu/scripts/ddp_equivalence.lua backend=cpu")
    assert(ok, out)
    assert.matches("ddp equivalence: ok %(max diff [^,]+, world 2, backend cpu%)", out)
  end)

  it("backend auto falls back to cpu, with a note, when 2 ranks share fewer GPUs", function()
    local ok, out = H.run(H.ddplua_bin() .. " --nproc 2 tests/gpu/scripts/cpu_pg_cuda.lua auto")
    if ddp.cuda_device_count() >= 2 then
      assert(not ok, "with a GPU per rank, auto is nccl (the script asserts cpu):\n" .. out)
      return
    end
    assert(ok, out)
    local _, n = out:gsub("cpu pg with cuda tensors: ok", "")
    assert.are.equal(2, n, out)
    local _, notes = out:gsub("backend auto: 2 ranks on this node share 1 GPU, and nccl needs one per rank: using " ..
                              "the cpu group", "")
    assert.are.equal(1, notes, out) -- one note per node
  end)

  it("DistributedDataParallel over nccl (world size 1, all-reduces forced) equals single-process training", function()
    local ok, out = ddplua_env("DDPLUA_FORCE_COLLECTIVES=1",
                               "tests/gpu/scripts/ddp_equivalence.lua backend=nccl port=" .. port())
    assert(ok, out)
    assert.matches("ddp equivalence: ok %(max diff [^,]+, world 1, backend nccl%)", out)
  end)

  it("DDPLUA_FORCE_COLLECTIVES sends the bucket all-reduces and SyncBatchNorm's collectives through nccl", function()
    local function per_step(env)
      local ok, out = ddplua_env(env, "tests/gpu/scripts/ddp_world1_collectives.lua backend=nccl port=" .. port())
      assert(ok, out)
      local n, buckets = out:match("world1 collectives: ([%d.]+) per step, (%d+) bucket")
      assert(n, out)
      return tonumber(n), tonumber(buckets)
    end
    local plain, buckets = per_step("")
    local forced = per_step("DDPLUA_FORCE_COLLECTIVES=1")
    assert.are.equal(buckets + 2, forced - plain)
  end)
end)

H.describe("cuda training", function()
  it("an MLP reaches 88% test accuracy on Fashion-MNIST", function()
    local ok, out = ddplua("tests/gpu/scripts/fashion_mnist_mlp.lua epochs=8")
    assert(ok, out)
    local acc = tonumber(out:match("fashion%-mnist test accuracy: ([%d.]+)%%"))
    assert(acc, "no accuracy line in:\n" .. out)
    assert(acc >= 88.0, string.format("test accuracy %.2f%% is below 88%%", acc))
  end)

  it("the Fashion-MNIST example trains on the GPU by itself and reaches 88%", function()
    -- the example takes ddp.device(): no key selects the GPU (an unknown key is an error)
    local ok, out = ddplua("examples/fashion_mnist/train.lua run_name=gpu_suite_fashion_mnist")
    assert(ok, out)
    assert.matches("on 1 process%(es%) %(cuda:0%)", out)
    local acc = tonumber(out:match("final test accuracy ([%d.]+)%%"))
    assert(acc, "no final accuracy in the example's output:\n" .. out)
    -- 88.5% on the CPU (README); the GPU's summation order differs a little
    assert(acc >= 87.5, string.format("test accuracy %.2f%% is below 87.5%%\n%s", acc, out))
  end)
end)
