-- nn.SyncBatchNorm without a process group (plain batch norm) and
-- convert_sync_batchnorm; the multi-rank behaviour is in tests/mp/ddp_spec.lua.
local ddp = require "ddplua"
local nn = ddp.nn

describe("nn.SyncBatchNorm", function()
  it("without a process group computes what BatchNorm2d computes, running statistics included", function()
    ddp.manual_seed(2)
    local x = ddp.randn(4, 3, 5, 5, { dtype = "float64" })
    local bn = nn.BatchNorm2d(3):double()
    local sbn = nn.SyncBatchNorm(3):double()
    local a, b = bn(x), sbn(x)
    assert.is_true((a - b):abs():max():item() < 1e-12)
    assert.is_true((bn.running_var - sbn.running_var):abs():max():item() < 1e-12)
    assert.are.equal(1, sbn.num_batches_tracked:item())
  end)

  it("names the module and the expected channels on a wrong input", function()
    local sbn = nn.SyncBatchNorm(3)
    local ok, err = pcall(function() return sbn(ddp.randn(2, 4, 3, 3)) end)
    assert.is_false(ok)
    assert.matches("expected input with 3 channels", err)
    ok, err = pcall(function() return sbn(ddp.randn(3)) end)
    assert.is_false(ok)
    assert.matches("at least 2%-D input", err)
  end)

  it("convert_sync_batchnorm replaces nested batch norms, sharing their tensors", function()
    local inner = nn.Sequential { nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2) }
    local model = nn.Sequential { inner, nn.ReLU(), nn.Flatten(), nn.BatchNorm1d(8) }
    local w = inner[2].weight
    local converted = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    assert.are.equal(model, converted)
    assert.are.equal("SyncBatchNorm", getmetatable(inner[2]).__name)
    assert.are.equal("SyncBatchNorm", getmetatable(model[4]).__name)
    assert.are.equal(w, inner[2].weight)
    local names = {}
    for name in model:named_parameters() do names[#names + 1] = name end
    -- PyTorch's names (Sequential positions count from 0 in state dicts)
    assert.are.same({ "0.0.weight", "0.0.bias", "0.1.weight", "0.1.bias", "3.weight", "3.bias" }, names)
    assert.are.equal("SyncBatchNorm", getmetatable(nn.SyncBatchNorm.convert_sync_batchnorm(nn.BatchNorm2d(2))).__name)
    local ok, err = pcall(nn.SyncBatchNorm.convert_sync_batchnorm, 42)
    assert.is_false(ok)
    assert.matches("expected an nn.Module", err)
  end)
end)
