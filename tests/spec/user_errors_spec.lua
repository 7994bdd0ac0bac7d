-- A bad argument to a public function is reported at the caller's line
-- (this file's), not at the library line that noticed it (issue 14: they
-- said lua/ddplua/nn/module.lua:79 and the like). Each case calls one
-- function with a bad argument on the line that records the line number.
local ddp = require "ddplua"
local nn, optim, data, dist = ddp.nn, ddp.optim, ddp.data, ddp.distributed

local function here() return debug.getinfo(2, "l").currentline end

local function check(line, pattern, ok, err)
  assert.is_false(ok, "expected an error matching " .. pattern)
  local where = "user_errors_spec.lua:" .. line .. ": "
  assert.is_not_nil(tostring(err):find(where, 1, true), "expected the error at " .. where .. " got: " .. tostring(err))
  assert.matches(pattern, tostring(err))
end

describe("argument errors", function()
  local model = nn.Linear(4, 2)
  local opt = optim.SGD(model:parameters(), { lr = 0.1 })
  local ds = data.TensorDataset(ddp.randn(10, 4), ddp.ones(10):long())

  it("name the caller's file and line", function()
    local l
    l = here(); check(l, "Linear: out_features must be a positive integer", pcall(function() nn.Linear(3, "x") end))
    l = here(); check(l, "Conv2d: kernel_size must be a positive", pcall(function() nn.Conv2d(1, 2, 0) end))
    l = here(); check(l, "Conv2d: dilation=2 is not supported yet", pcall(function() nn.Conv2d(1, 2, 3, 1, 0, 2) end))
    l = here(); check(l, "Sequential: element 2 is a number", pcall(function() nn.Sequential { nn.ReLU(), 3 } end))
    l = here(); check(l, "ModuleList: index 5 out of range", pcall(function() return nn.ModuleList()[5] end))
    l = here(); check(l, "BatchNorm2d: unknown option 'eps2'", pcall(function() nn.BatchNorm2d(3, { eps2 = 1 }) end))
    l = here(); check(l, "Dropout: probability p", pcall(function() nn.Dropout(5) end))
    l = here(); check(l, "load_state_dict: expected a table", pcall(function() model:load_state_dict(5) end))
    local x3 = ddp.randn(2, 3)
    l = here(); check(l, "Linear%(in_features=4.*expected input with 4 features", pcall(function() model(x3) end))
    l = here(); check(l, "SGD: unknown option 'lrr'", pcall(function() optim.SGD(model:parameters(), { lrr = 1 }) end))
    l = here(); check(l, "Adam: parameter 1 of group 1 is a number", pcall(function() optim.Adam({ 3 }) end))
    local S = optim.lr_scheduler
    l = here(); check(l, "StepLR: step_size must be a positive integer", pcall(function() S.StepLR(opt, 0) end))
    l = here(); check(l, "OneCycleLR: max_lr is required", pcall(function() S.OneCycleLR(opt, { total_steps = 3 }) end))
    l = here(); check(l, "DataLoader: batch_size must be", pcall(function() data.DataLoader(ds, { batch_size = 0 }) end))
    l = here(); check(l, "TensorDataset: argument 1 is a number", pcall(function() data.TensorDataset(1) end))
    l = here(); check(l, "TensorDataset: index 11 out of range", pcall(function() ds:get(11) end))
    local bad = { num_replicas = 2, rank = 5 }
    l = here(); check(l, "DistributedSampler: invalid rank 5", pcall(function() data.DistributedSampler(ds, bad) end))
    l = here(); check(l, "random_split: the lengths sum to 3", pcall(function() data.random_split(ds, { 1, 2 }) end))
    l = here(); check(l, "init_process_group: unknown option 'bakend'", pcall(dist.init_process_group, { bakend = 1 }))
    l = here(); check(l, "init_process_group: backend \"mpi\" is not available", pcall(dist.init_process_group, "mpi"))
    l = here(); check(l, "seed_everything: expected an integer seed", pcall(function() ddp.seed_everything("x") end))
    local path = os.tmpname()
    l = here(); check(l, "save_state: state.f is a function", pcall(function() ddp.save_state(path, { f = print }) end))
    os.remove(path)
    l = here(); check(l, "RandomRotation: expected degrees", pcall(function() data.transforms.RandomRotation("x") end))
  end)

  it("name the line holding a pcall of the function itself", function()
    local l = here(); check(l, "Linear: out_features must be a positive integer", pcall(nn.Linear, 3, "x"))
    l = here(); check(l, "ModuleDict: key \"keys\" is the name", pcall(nn.ModuleDict, { keys = nn.ReLU() }))
  end)
end)
