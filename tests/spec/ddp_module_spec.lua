-- DistributedDataParallel as an nn.Module, in one process (a world of one
-- rank over tcp://, the cpu group): every Module method on the wrapper, the
-- names PyTorch's DDP gives ("module.0.weight" in named_parameters and in
-- state_dict, checked against torch 1.13 over a gloo group of one where
-- /usr/bin/python3 imports torch), the options it refuses, and the reducer
-- following changes made after wrapping. That training at 2 ranks still
-- equals one process is tests/mp/ddp_spec.lua.
local ddp = require "ddplua"
local U = require "helpers.io_util"
local nn, dist = ddp.nn, ddp.distributed
local DDP = dist.DistributedDataParallel

local function names_of(iter)
  local out = {}
  for name in iter do out[#out + 1] = name end
  return out
end

local function keys_of(sd)
  local out = {}
  for k in pairs(sd) do out[#out + 1] = k end
  return out
end

local function class_names(list)
  local out = {}
  for i, m in ipairs(list) do out[i] = m:_class_name() end
  return out
end

local function err_of(f, ...)
  local ok, err = pcall(f, ...)
  assert.is_false(ok, "expected an error")
  return tostring(err)
end

-- PyTorch's features/head model: a Sequential with a conv and a batch norm
-- (parameters and buffers), then a Linear.
local Net = nn.Module:extend("Net")
function Net:__init()
  self.features = nn.Sequential { nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.ReLU() }
  self.head = nn.Linear(8, 3)
end
function Net:forward(x) return self.head(self.features(x):flatten(2)) end

local function mlp()
  ddp.manual_seed(5)
  return nn.Sequential { nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 3) }
end

local function step(model, x)
  model:zero_grad()
  model(x or ddp.randn(5, 4, { dtype = model.module[1].weight:dtype() })):sum():backward()
end

local TORCH_NAMES = [==[
import json, os, sys, torch, torch.distributed as dist
os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", sys.argv[1]
dist.init_process_group("gloo", rank=0, world_size=1)
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.features = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.BatchNorm2d(2), torch.nn.ReLU())
        self.head = torch.nn.Linear(8, 3)
model = torch.nn.parallel.DistributedDataParallel(Net())
print(json.dumps({
    "named_parameters": [n for n, _ in model.named_parameters()],
    "state_dict": list(model.state_dict().keys()),
    "named_buffers": [n for n, _ in model.named_buffers()],
    "named_modules": [n for n, _ in model.named_modules()],
    "named_children": [n for n, _ in model.named_children()],
}))
dist.destroy_process_group()
]==]

describe("DistributedDataParallel as an nn.Module (world of one rank)", function()
  lazy_setup(function()
    dist.init_process_group { backend = "cpu", init_method = "tcp://127.0.0.1:" .. dist.find_free_port(),
                              world_size = 1, rank = 0 }
  end)
  lazy_teardown(function() dist.destroy_process_group() end)

  it("is a Module subclass whose one child, module, is the wrapped module", function()
    local inner = mlp()
    local model = DDP(inner)
    assert.are.equal(nn.Module, DDP.super)
    assert.is_true(nn.Module.is_module(model))
    assert.are.equal("DistributedDataParallel", model:_class_name())
    assert.are.equal(DDP, dist.DDP)
    assert.are.equal(inner, model.module)
    assert.are.same({ inner }, model:children())
    assert.are.same({ "module" }, names_of(model:named_children()))
    assert.are.equal("DistributedDataParallel(\n  (module): " .. tostring(inner):gsub("\n", "\n  ") .. "\n)",
      tostring(model))
    -- calling it runs the wrapped forward
    local x = ddp.randn(2, 4)
    assert.are.same(inner(x):totable(), model(x):totable())
  end)

  it("names parameters, buffers, modules and state_dict keys as PyTorch's DDP: module.<name> everywhere", function()
    local model = DDP(Net())
    local got = {
      named_parameters = names_of(model:named_parameters()),
      state_dict = keys_of(model:state_dict()),
      named_buffers = names_of(model:named_buffers()),
      named_modules = names_of(model:named_modules()),
      named_children = names_of(model:named_children()),
    }
    assert.are.same({ "module.features.0.weight", "module.features.0.bias", "module.features.1.weight",
      "module.features.1.bias", "module.head.weight", "module.head.bias" }, got.named_parameters)
    assert.are.same({ "module.features.0.weight", "module.features.0.bias", "module.features.1.weight",
      "module.features.1.bias", "module.features.1.running_mean", "module.features.1.running_var",
      "module.features.1.num_batches_tracked", "module.head.weight", "module.head.bias" }, got.state_dict)
    assert.are.same({ "", "module", "module.features", "module.features.0", "module.features.1",
      "module.features.2", "module.head" }, got.named_modules)
    -- the same tensors as the wrapped module's, in its order
    assert.are.same(model.module:parameters(), model:parameters())
    assert.are.same(model.module:buffers(), model:buffers())
    assert.are.same(class_names(model.module:modules()), { table.unpack(class_names(model:modules()), 2) })
    if not U.have_torch() then
      pending("/usr/bin/python3 cannot import torch: the names above were not compared with PyTorch's")
      return
    end
    local dir = U.tmpdir()
    U.write(dir .. "/names.py", TORCH_NAMES)
    local ok, out = U.run(U.python .. " " .. U.quote(dir .. "/names.py") .. " " .. dist.find_free_port())
    U.rm_rf(dir)
    assert.is_true(ok, out)
    local torch = ddp.core.json_decode(out:match("[^\n]*{[^\n]*"))
    for what, names in pairs(torch) do assert.are.same(names, got[what], what) end
  end)

  it("train, eval, apply, zero_grad and requires_grad_ reach the wrapped module and return the wrapper", function()
    local model = DDP(mlp())
    assert.are.equal(model, model:eval())
    for _, m in ipairs(model:modules()) do assert.is_false(m.training) end
    assert.are.equal(model, model:train())
    for _, m in ipairs(model:modules()) do assert.is_true(m.training) end
    model:train(false)
    assert.is_false(model.module[3].training)
    model:train()

    local visited = {}
    assert.are.equal(model, model:apply(function(m) visited[#visited + 1] = m:_class_name() end))
    assert.are.same({ "Linear", "ReLU", "Linear", "Sequential", "DistributedDataParallel" }, visited)

    -- alone (collectives not forced) the buckets hold nothing: the gradients are plain tensors, which zero_grad
    -- drops as without DDP (with more ranks, or DDPLUA_FORCE_COLLECTIVES, they are views into the buckets:
    -- tests/mp/ddp_spec.lua, distributed_spec.lua)
    local x = ddp.randn(5, 4)
    step(model, x)
    local w = model.module[1].weight
    assert.is_false(ddp.core.keep_grad_buf(w))
    assert.are.equal(0, model:reducer_stats().bucket_bytes)
    local g1 = w.grad:clone()
    model:zero_grad()
    assert.is_nil(w.grad)
    step(model, x)
    assert.are.same(g1:totable(), w.grad:totable()) -- same step, same gradient

    assert.are.equal(4, model:reducer_stats().params)
    assert.are.equal(model, model:requires_grad_(false))
    for _, p in ipairs(model:parameters()) do assert.is_false(p.requires_grad) end
    assert.are.equal(0, model:reducer_stats().params)
    model:requires_grad_()
    assert.are.equal(4, model:reducer_stats().params)
    step(model) -- every parameter gets its gradient again: no "received no gradient" error
    assert.is_true(w.grad:abs():sum():item() > 0)
  end)

  it("to, double, float and cpu convert in place and rebuild the reducer only when something changed", function()
    local inner = mlp()
    local model = DDP(inner, { bucket_cap_mb = 0.0001 })
    local params = model:parameters()
    local reducer = model.reducer
    assert.are.equal(model, model:cpu())
    assert.are.equal(model, model:to("cpu"))
    assert.are.equal(model, model:float())
    step(model)
    assert.are.equal(reducer, model.reducer, "nothing changed: the reducer stays")

    local function stats_of_fresh(dtype)
      local fresh = DDP(mlp():to(dtype), { bucket_cap_mb = 0.0001 })
      local st = fresh:reducer_stats()
      return { st.buckets, st.params, st.bucket_bytes }
    end
    local function stats(m)
      local st = m:reducer_stats()
      return { st.buckets, st.params, st.bucket_bytes }
    end
    assert.are.equal(model, model:double())
    assert.are.same(params, model:parameters()) -- the same tensor objects, now float64
    for _, p in ipairs(params) do assert.are.equal("float64", p:dtype()) end
    assert.are_not.equal(reducer, model.reducer)
    assert.are.same(stats_of_fresh("float64"), stats(model))
    step(model)
    for _, p in ipairs(params) do assert.are.equal("float64", p.grad:dtype()) end
    model:to({ dtype = "float32" })
    assert.are.same(stats_of_fresh("float32"), stats(model))
    -- bypassing the wrapper: the next forward notices
    inner:double()
    step(model)
    assert.are.same(stats_of_fresh("float64"), stats(model))
    -- values are untouched by the rebuild (rank 0's broadcast to itself)
    local before = model.module[1].weight:clone()
    model:float()
    assert.is_true((model.module[1].weight:double() - before):abs():max():item() < 1e-7)

    if ddp.cuda_is_available() then
      assert.are.equal(model, model:cuda())
      for _, p in ipairs(params) do assert.matches("^cuda", p:device()) end
      step(model, ddp.randn(5, 4, { device = params[1]:device() }))
      model:cpu()
      for _, p in ipairs(params) do assert.are.equal("cpu", p:device()) end
    else
      assert.matches("cuda", err_of(function() model:cuda() end):lower())
      for _, p in ipairs(params) do assert.are.equal("cpu", p:device()) end
      step(model) -- still usable
    end
  end)

  it("a submodule added to the wrapped module after wrapping joins the reducer at the next forward", function()
    local Grow = nn.Module:extend("Grow")
    function Grow:__init() self.a = nn.Linear(4, 4) end
    function Grow:forward(x)
      x = self.a(x)
      if self.b then x = self.b(x) end
      return x
    end
    local model = DDP(Grow())
    step(model, ddp.randn(2, 4))
    assert.are.equal(2, model:reducer_stats().params)
    model.module.b = nn.Linear(4, 2)
    step(model, ddp.randn(2, 4))
    assert.are.equal(4, model:reducer_stats().params)
    assert.are.same({ "module.a.weight", "module.a.bias", "module.b.weight", "module.b.bias" },
      names_of(model:named_parameters()))
    -- on the wrapper itself they would be outside the reducer: refused, pointing at model.module
    assert.matches("cannot add the submodule 'c' to the wrapper; add it to model.module",
      err_of(function() model.c = nn.Linear(2, 2) end), 1, true)
    assert.matches("cannot add the parameter 'w' to the wrapper",
      err_of(function() model.w = ddp.ones(2):requires_grad_() end), 1, true)
    assert.matches("cannot add the buffer 'steps' to the wrapper",
      err_of(function() model:register_buffer("steps", ddp.zeros(1)) end), 1, true)
    assert.matches("cannot add the submodule 'module2'",
      err_of(function() model:register_module("module2", nn.ReLU()) end), 1, true)
    assert.are.same({ "module" }, names_of(model:named_children()))
    model.note = "plain fields are fine"
    -- replacing the wrapped module is a change like any other
    local other = Grow()
    model.module = other
    step(model, ddp.randn(2, 4))
    assert.are.equal(other, model.module)
    assert.are.same({ "module.a.weight", "module.a.bias" }, names_of(model:named_parameters()))
    assert.are.equal(2, model:reducer_stats().params)
  end)

  it("state_dict shares memory; load_state_dict takes module. keys (or the wrapped module's own)", function()
    local model = DDP(mlp())
    local sd = model:state_dict()
    assert.are.equal(model.module[1].weight:data_ptr(), sd["module.0.weight"]:data_ptr())

    ddp.manual_seed(9)
    local other = nn.Sequential { nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 3) }
    local from_ddp = DDP(other):state_dict()
    local missing, unexpected = model:load_state_dict(from_ddp)
    assert.are.same({}, missing)
    assert.are.same({}, unexpected)
    assert.are.same(other[1].weight:totable(), model.module[1].weight:totable())

    local fresh = mlp()
    model:load_state_dict(fresh:state_dict()) -- the wrapped module's keys
    assert.are.same(fresh[3].bias:totable(), model.module[3].bias:totable())

    local bad = {}
    for k, v in pairs(model:state_dict()) do bad[k] = v end
    bad["module.0.weight"], bad["module.9.weight"] = nil, ddp.zeros(1)
    local err = err_of(function() model:load_state_dict(bad) end)
    assert.matches("Error(s) in loading state_dict for DistributedDataParallel", err, 1, true)
    assert.matches('Missing key(s) in state_dict: "module.0.weight"', err, 1, true)
    assert.matches('Unexpected key(s) in state_dict: "module.9.weight"', err, 1, true)
    missing, unexpected = model:load_state_dict(bad, false)
    assert.are.same({ "module.0.weight" }, missing)
    assert.are.same({ "module.9.weight" }, unexpected)
  end)

  it("refuses options it does not implement, naming each; the ones it implements keep working", function()
    assert.matches("gradient_as_bucket_view=false is not implemented",
      err_of(DDP, mlp(), { gradient_as_bucket_view = false }), 1, true)
    assert.matches("static_graph=true is not implemented", err_of(DDP, mlp(), { static_graph = true }), 1, true)
    local err = err_of(DDP, mlp(), { static_graph = true, gradient_as_bucket_view = false, dim = 0, check = 1 })
    assert.matches("unknown options 'check', 'dim' (valid: bucket_cap_mb, ", err, 1, true)
    assert.matches("gradient_as_bucket_view=false", err, 1, true)
    assert.matches("static_graph=true", err, 1, true)
    assert.matches("bucket_cap_mb must be a positive number, got 0", err_of(DDP, mlp(), { bucket_cap_mb = 0 }), 1,
      true)
    assert.matches("find_unused_parameters must be a boolean, got yes",
      err_of(DDP, mlp(), { find_unused_parameters = "yes" }), 1, true)
    assert.matches("expected an options table, got string", err_of(DDP, mlp(), "fast"), 1, true)
    assert.matches("expected an nn.Module, got a table", err_of(DDP, { named_parameters = print }), 1, true)
    err = err_of(DDP, mlp(), { device_ids = { 0 } })
    assert.matches("device_ids is {cuda:0}, but the module's parameters are on cpu", err, 1, true)
    assert.matches("output_device is cuda:1, but the module's parameters are on cpu",
      err_of(DDP, mlp(), { output_device = 1 }), 1, true)
    -- PyTorch's defaults, spelled out, are fine
    DDP(mlp(), { gradient_as_bucket_view = true, static_graph = false, device_ids = nil })

    local few = DDP(mlp(), { bucket_cap_mb = 25 }):reducer_stats().buckets
    local many = DDP(mlp(), { bucket_cap_mb = 0.0001 }):reducer_stats().buckets
    assert.are.equal(1, few)
    assert.are.equal(4, many)
    assert.is_false(DDP(mlp(), { broadcast_buffers = false }).broadcast_buffers)

    local Two = nn.Module:extend("Two")
    function Two:__init()
      self.used = nn.Linear(4, 2)
      self.unused = nn.Linear(4, 2)
    end
    function Two:forward(x) return self.used(x) end
    assert.matches("received no gradient in this backward: unused.weight, unused.bias",
      err_of(function() DDP(Two())(ddp.randn(3, 4)):sum():backward() end), 1, true)
    local ok = DDP(Two(), { find_unused_parameters = true })
    ok(ddp.randn(3, 4)):sum():backward()
    -- unused on every rank: no gradient, as in PyTorch (its optimizers then skip it)
    assert.is_nil(ok.module.unused.weight.grad)
    assert.is_not_nil(ok.module.used.weight.grad)
  end)

  it("no_sync: backward passes inside it are not reduced, the next one outside is", function()
    local model = DDP(mlp())
    step(model)
    assert.are.equal(1, model:reducer_stats().synced_passes)
    do
      local _ <close> = model:no_sync()
      model(ddp.randn(5, 4)):sum():backward()
      model:double() -- a rebuild inside no_sync keeps it
      model(ddp.randn(5, 4, { dtype = "float64" })):sum():backward()
    end
    assert.are.equal(0, model:reducer_stats().synced_passes) -- the new reducer counts from zero
    model(ddp.randn(5, 4, { dtype = "float64" })):sum():backward()
    assert.are.equal(1, model:reducer_stats().synced_passes)
  end)

  -- A reducer's hook slot is given back when its wrapper is collected; the
  -- 17th wrap collects dropped ones first (it failed with "at most 16" when
  -- the collector had not run yet, e.g. in a long spec suite).
  it("wrapping models in a loop: dropped instances give back their post-backward hook slots", function()
    collectgarbage("stop")
    local ok, err = pcall(function()
      for _ = 1, 40 do step(DDP(mlp())) end
    end)
    collectgarbage("restart")
    assert.is_true(ok, tostring(err))
    local live = {} -- live instances still meet the limit, with its message
    local ok2, err2 = pcall(function()
      for i = 1, 17 do live[i] = DDP(mlp()) end
    end)
    assert.is_false(ok2)
    assert.matches("at most 16 post-backward hooks", tostring(err2), 1, true)
    assert.is_true(#live <= 16)
    live = nil
    collectgarbage()
    step(DDP(mlp()))
  end)
end)
