-- Distributed work on the GPU, through the ddplua launcher: the nccl group at
-- world size 1, the cpu group carrying CUDA tensors for 2 ranks sharing the
-- GPU, DistributedDataParallel equal to single-process training on both
-- backends, and Fashion-MNIST reaching 88% test accuracy on one GPU.
-- Run with: busted --tags=gpu tests/gpu   (DDPLUA_BIN picks the binary)
local H = require("gpu.gpu_helper").setup(describe, it, pending)

local function ddplua(args)
  local ok, out = H.run(H.ddplua_bin() .. " " .. args)
  return ok, out
end

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

  it("DistributedDataParallel over nccl (world size 1) equals single-process training", function()
    local ok, out = ddplua("tests/gpu/scripts/ddp_equivalence.lua backend=nccl port=" .. port())
    assert(ok, out)
    assert.matches("ddp equivalence: ok %(max diff [^,]+, world 1, backend nccl%)", out)
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

  it("the Fashion-MNIST example reaches 88% with device=cuda", function()
    local f = io.open("examples/fashion_mnist/train.lua", "r")
    assert(f, "examples/fashion_mnist/train.lua is missing")
    f:close()
    local ok, out = ddplua("examples/fashion_mnist/train.lua device=cuda")
    assert(ok, out)
    -- the last accuracy the example prints, as a percentage or a fraction
    local acc
    for v, pct in out:lower():gmatch("acc[%a_ ]*[:=]?%s*([%d.]+)(%%?)") do
      acc = tonumber(v)
      if pct == "" and acc and acc <= 1 then acc = acc * 100 end
    end
    assert(acc, "no accuracy in the example's output:\n" .. out)
    assert(acc >= 88.0, string.format("test accuracy %.2f%% is below 88%%\n%s", acc, out))
  end)
end)
