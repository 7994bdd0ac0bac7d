-- DistributedDataParallel: N ranks with batch B give the same parameters as
-- one process with batch N*B, and as one process accumulating N
-- micro-batches of B under no_sync (the seed's "DDP equals gradient
-- accumulation"), in float64 to 1e-10; every rank ends bitwise identical;
-- also after the model changed dtype or froze a layer after wrapping.
-- Ranks are forked with dist.spawn; the single-process references are
-- computed before the fork and compared inside each rank.
local ddp = require "ddplua"
local nn, optim, dist = ddp.nn, ddp.optim, ddp.distributed

local STEPS, B, R = 10, 32, 2

local function mlp()
  ddp.manual_seed(11)
  return nn.Sequential { nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 5) }:double()
end

local function cnn()
  ddp.manual_seed(12)
  return nn.Sequential {
    nn.Conv2d(1, 4, 3, { padding = 1 }), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
    nn.Flatten(), nn.Linear(4 * 4 * 4, 5),
  }:double()
end

local function data(kind, n)
  ddp.manual_seed(99)
  local x = kind == "cnn" and ddp.randn(n, 1, 8, 8, { dtype = "float64" }) or ddp.randn(n, 20, { dtype = "float64" })
  local y = (ddp.rand(n, { dtype = "float64" }) * 5):long() + 1
  return x, y
end

-- the state a run ends with: parameters then buffers, flattened, float64
local function state_of(model)
  local parts = {}
  for _, p in ipairs(model:parameters()) do parts[#parts + 1] = p:detach():reshape(-1) end
  for _, b in ipairs(model:buffers()) do parts[#parts + 1] = b:reshape(-1):double() end
  return ddp.cat(parts)
end

local function sgd(model) return optim.SGD(model:parameters(), { lr = 0.1, momentum = 0.9 }) end

-- one process, batch R*B (rows of step s: s*R*B + 1 .. (s+1)*R*B)
local function reference_full(make, kind)
  local model = make()
  local opt = sgd(model)
  local x, y = data(kind, STEPS * R * B)
  for s = 0, STEPS - 1 do
    opt:zero_grad()
    local loss = ddp.cross_entropy(model(x:narrow(1, s * R * B + 1, R * B)), y:narrow(1, s * R * B + 1, R * B))
    loss:backward()
    opt:step()
  end
  return state_of(model)
end

local function max_diff(a, b) return (a - b):abs():max():item() end

-- One rank's STEPS SGD steps on its batch of B rows of each global batch.
local function train_rank(model, opt, kind, rank)
  local x, y = data(kind, STEPS * R * B)
  for s = 0, STEPS - 1 do
    local first = s * R * B + rank * B + 1
    opt:zero_grad()
    local loss = ddp.cross_entropy(model(x:narrow(1, first, B)), y:narrow(1, first, B))
    loss:backward()
    opt:step()
  end
end

-- The rank's final state equals the single-process reference, and every
-- rank holds bitwise the same state.
local function check_against(module, ref, what)
  local mine = state_of(module)
  assert(max_diff(mine, ref) < 1e-10, what .. " differs from the single process by " .. max_diff(mine, ref))
  local all = ddp.zeros({ R, mine:numel() }, { dtype = "float64" })
  dist.all_gather(all, mine)
  assert(max_diff(all[1], all[2]) == 0, "ranks are not bitwise identical")
end

describe("DistributedDataParallel", function()
  local ref_mlp = reference_full(mlp, "mlp")

  it("2 ranks x batch 32 equal 1 process x batch 64 (MLP, SGD momentum, 10 steps), ranks bitwise equal", function()
    dist.spawn(function(rank)
      dist.init_process_group { backend = "cpu" }
      local model = dist.DistributedDataParallel(mlp())
      train_rank(model, sgd(model), "mlp", rank)
      check_against(model.module, ref_mlp, "DDP")
      local st = model:reducer_stats()
      assert(st.synced_passes == STEPS, "expected " .. STEPS .. " synced backward passes, got " .. st.synced_passes)
      dist.destroy_process_group()
    end, R)
  end)

  -- The reducer's buckets hold the gradients of the parameters as they were
  -- when it was built; these changes after wrapping must still average.
  it("changed after wrapping (model:double(), a frozen layer), 2 ranks still equal 1 process", function()
    local function frozen_first()
      local m = mlp()
      m[1]:requires_grad_(false)
      return m
    end
    local ref_frozen = reference_full(frozen_first, "mlp")
    dist.spawn(function(rank)
      dist.init_process_group { backend = "cpu" }
      ddp.manual_seed(11)
      local f32 = nn.Sequential { nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 5) } -- mlp() before its :double()
      local model = dist.DistributedDataParallel(f32)
      assert(model:double() == model, "double() returns the wrapper")
      assert(model.module[1].weight:dtype() == "float64", "double() did not convert the wrapped module")
      train_rank(model, sgd(model), "mlp", rank)
      check_against(model.module, ref_mlp, "DDP converted to float64 after wrapping")

      local frozen = dist.DistributedDataParallel(mlp())
      frozen.module[1]:requires_grad_(false) -- on the wrapped module: the next forward sees it
      local opt = sgd(frozen)
      train_rank(frozen, opt, "mlp", rank)
      check_against(frozen.module, ref_frozen, "DDP with a layer frozen after wrapping")
      assert(frozen:reducer_stats().params == 2, "the reducer should hold the 2 trainable parameters")
      dist.destroy_process_group()
    end, R)
  end)

  -- A reducer made again for the same shapes gets its predecessor's bucket
  -- memory back from the group's pool (shm.c keeps freed ranges, pages and
  -- last gradients included): nothing of the old gradients may reach the
  -- new model's.
  it("a model wrapped again in the same group (its buckets' memory reused) still equals 1 process", function()
    dist.spawn(function(rank)
      dist.init_process_group { backend = "cpu" }
      for round = 1, 3 do
        local model = dist.DistributedDataParallel(mlp())
        train_rank(model, sgd(model), "mlp", rank)
        check_against(model.module, ref_mlp, "DDP wrapped for the " .. round .. ". time")
        model = nil
        collectgarbage()
        collectgarbage()
      end
      dist.destroy_process_group()
    end, R)
  end)

  -- Wrapping broadcasts rank 0's parameters and buffers: large contiguous ones in place, the rest coalesced
  -- (distributed_data_parallel.lua's broadcast_tensors); a frozen weight, a non-contiguous one and a buffer too
  it("copies rank 0's parameters and buffers to every rank (large ones in place, small ones coalesced)", function()
    dist.spawn(function(rank)
      dist.init_process_group { backend = "cpu" }
      ddp.manual_seed(500 + rank) -- a different model on each rank
      local m = nn.Sequential { nn.Linear(256, 512), nn.BatchNorm1d(512), nn.Linear(512, 300), nn.Linear(300, 7) }
      m[3]:requires_grad_(false)                               -- frozen, 600 KB: broadcast alone
      ddp.no_grad(function() m[2].running_mean:uniform_() end) -- a buffer that differs per rank
      m[4].weight = nn.Parameter(ddp.randn(7, 300):t():contiguous():t()) -- a non-contiguous weight
      local before = state_of(m):float()
      local model = dist.DistributedDataParallel(m)
      local after = state_of(model.module):float()
      local all = ddp.zeros({ R, after:numel() })
      dist.all_gather(all, after)
      for r = 2, R do assert(max_diff(all[1], all[r]) == 0, "rank " .. (r - 1) .. " does not hold rank 0's model") end
      if rank == 0 then assert(max_diff(before, after) == 0, "rank 0's values changed") end
      if rank == 1 then assert(max_diff(before, after) > 0, "the ranks began alike: nothing was tested") end
      assert(not model.module[4].weight:is_contiguous(), "the non-contiguous weight was replaced")
      dist.destroy_process_group()
    end, R)
  end)

  it("1 process accumulating 2 micro-batches of 32 under no_sync equals batch 64", function()
    dist.spawn(function()
      dist.init_process_group { backend = "cpu" }
      local model = dist.DistributedDataParallel(mlp())
      local opt = sgd(model)
      local x, y = data("mlp", STEPS * R * B)
      for s = 0, STEPS - 1 do
        opt:zero_grad()
        for m = 0, R - 1 do
          local first = s * R * B + m * B + 1
          local function micro()
            local loss = ddp.cross_entropy(model(x:narrow(1, first, B)), y:narrow(1, first, B)) / R
            loss:backward()
          end
          if m < R - 1 then
            local _ <close> = model:no_sync()
            micro()
          else
            micro()
          end
        end
        opt:step()
      end
      local mine = state_of(model.module)
      assert(max_diff(mine, ref_mlp) < 1e-10, "accumulation differs from batch 64 by " .. max_diff(mine, ref_mlp))
      dist.destroy_process_group()
    end, 1)
  end)

  it("a CNN with BatchNorm converted to SyncBatchNorm: 2 ranks x 32 equal 1 process x 64 (buffers too)", function()
    local ref = reference_full(cnn, "cnn")
    dist.spawn(function(rank)
      dist.init_process_group { backend = "cpu" }
      local model = nn.SyncBatchNorm.convert_sync_batchnorm(cnn())
      assert(tostring(model):find("SyncBatchNorm"), "convert_sync_batchnorm did not convert")
      model = dist.DistributedDataParallel(model)
      train_rank(model, sgd(model), "cnn", rank)
      check_against(model.module, ref, "DDP+SyncBN")
      dist.destroy_process_group()
    end, R)
  end)

  it("SyncBatchNorm, ReLU, MaxPool2d in a Sequential run fused: the unfused modules' bits, and one process's values",
    function()
    -- float32 planes of 16x16 take the fused kernels (ops/norm_pool.c); the 2x2 window has its own kernel, 3x3 / 2 / 1
    -- the generic one. Each rank gets 3 samples of a global batch of 6.
    for _, win in ipairs { { 2, 2, 0 }, { 3, 2, 1 } } do
      local function block()
        ddp.manual_seed(21)
        return nn.Sequential { nn.Conv2d(2, 5, 3, { padding = 1 }), nn.SyncBatchNorm(5), nn.ReLU(),
          nn.MaxPool2d(win[1], win[2], win[3]) }
      end
      ddp.manual_seed(22)
      local X, G = ddp.randn(6, 2, 16, 16), nil
      local one = block()
      local y1 = one(X) -- no process group here: plain batch norm over the whole batch
      G = ddp.randn(y1:size())
      ;(y1 * G):sum():backward()
      dist.spawn(function(rank)
        dist.init_process_group { backend = "cpu" }
        local x, g = X:narrow(1, rank * 3 + 1, 3), G:narrow(1, rank * 3 + 1, 3)
        local fused, plain = block(), block()
        local xf, xp = x:clone():requires_grad_(), x:clone():requires_grad_()
        local yf = fused(xf)
        local yp = plain[4](plain[3](plain[2](plain[1](xp)))) -- the modules one by one: no fusion
        ;(yf * g):sum():backward()
        ;(yp * g):sum():backward()
        local function same(a, b, what)
          assert(a:ne(b):sum():item() == 0, string.format("window %d: %s differs from the unfused modules'", win[1], what))
        end
        assert(tostring(yf.grad_fn):find("SyncBatchNormReluMaxPoolBackward", 1, true), tostring(yf.grad_fn))
        assert(not tostring(yp.grad_fn):find("BatchNorm", 1, true), tostring(yp.grad_fn))
        same(yf, yp, "the output")
        same(xf.grad, xp.grad, "the input's gradient")
        for _, k in ipairs { "weight", "bias" } do
          same(fused[1][k].grad, plain[1][k].grad, "conv " .. k .. " gradient")
          same(fused[2][k].grad, plain[2][k].grad, "batch norm " .. k .. " gradient")
        end
        same(fused[2].running_mean, plain[2].running_mean, "running_mean")
        same(fused[2].running_var, plain[2].running_var, "running_var")
        -- against one process over the global batch: the output and the input's gradient are this rank's rows
        local function close(a, b, what)
          local d = (a:double() - b:double()):abs():max():item()
          assert(d < 2e-5, string.format("window %d: %s differs from one process by %g", win[1], what, d))
        end
        close(yf, y1:narrow(1, rank * 3 + 1, 3), "the output")
        close(fused[2].running_var, one[2].running_var, "running_var")
        -- conv's gradient here is this rank's share; summed over the ranks it is one process's
        local gw = fused[1].weight.grad:clone()
        dist.all_reduce(gw, "sum")
        close(gw, one[1].weight.grad, "the summed conv weight gradient")
        -- evaluation mode: running statistics, no collective
        fused:eval()
        plain:eval()
        same(fused(x), plain[4](plain[3](plain[2](plain[1](x)))), "the eval-mode output")
        fused:train()
        -- bad input through the fused block (training again): the module's own errors, every rank alike
        local ok, err = pcall(function() return fused[2]:forward_relu_max_pool2d(ddp.randn(3, 4, 16, 16), fused[4]) end)
        assert(not ok and tostring(err):find("expected input with 5 channels in dimension 2", 1, true), tostring(err))
        ok, err = pcall(function() return fused[2]:forward_relu_max_pool2d(ddp.randn(3, 5), fused[4]) end)
        assert(not ok and tostring(err):find("max_pool2d: expected a 3- or 4-dimensional input", 1, true), tostring(err))
        dist.destroy_process_group()
      end, R)
    end
  end)

  it("SyncBatchNorm under a process group names a wrong input and counts batches (cumulative momentum)", function()
    dist.spawn(function()
      dist.init_process_group { backend = "cpu" }
      local sbn = nn.SyncBatchNorm(3, { momentum = false }):double()
      local ok, err = pcall(function() return sbn(ddp.randn(2, 4, 3, 3, { dtype = "float64" })) end)
      assert(not ok and tostring(err):find("SyncBatchNorm%(3.-expected input with 3 channels in dimension 2"),
        "wrong channels: " .. tostring(err))
      ok, err = pcall(function() return sbn(ddp.randn(3, { dtype = "float64" })) end)
      assert(not ok and tostring(err):find("at least 2%-D input"), "1-D input: " .. tostring(err))
      assert(sbn.num_batches_tracked:item() == 0, "a rejected input was counted")
      -- momentum=false: the running mean is the plain average of the batch means so far
      for i = 1, 3 do
        local x = ddp.full({ 2, 3, 2, 2 }, i, { dtype = "float64" })
        sbn(x)
      end
      assert(sbn.num_batches_tracked:item() == 3, "batches counted: " .. sbn.num_batches_tracked:item())
      assert(math.abs(sbn.running_mean[1]:item() - 2) < 1e-12, "cumulative mean " .. sbn.running_mean[1]:item())
      dist.destroy_process_group()
    end, R)
  end)

  it("SyncBatchNorm under bfloat16 autocast normalises in float32, as BatchNorm does (fused with ReLU and pooling too)",
    function()
    -- values near 20: a mean or variance kept in bfloat16 (spacing 0.125 there) moves the output by ~0.05
    ddp.manual_seed(7)
    local xall = (ddp.randn(8, 3, 8, 8) + 20):to("bfloat16")
    local bn, seq = nn.BatchNorm2d(3), nn.Sequential { nn.BatchNorm2d(3), nn.ReLU(), nn.MaxPool2d(2) }
    local ref, ref_seq = bn(xall:float()), seq(xall:float())
    local ref_mean, ref_seq_mean = bn.running_mean:clone(), seq[1].running_mean:clone()
    dist.spawn(function(rank)
      dist.init_process_group { backend = "cpu" }
      local rows = function(t) return t:narrow(1, rank * 4 + 1, 4) end
      local x = rows(xall):contiguous():requires_grad_()
      local sbn = nn.SyncBatchNorm(3)
      local sseq = nn.Sequential { nn.SyncBatchNorm(3), nn.ReLU(), nn.MaxPool2d(2) }
      local y, ys
      do
        local _ <close> = ddp.autocast("bfloat16")
        y, ys = sbn(x), sseq(x)
      end
      for what, got in pairs({ plain = y, fused = ys }) do
        assert(got:dtype() == "float32", what .. ": SyncBatchNorm under autocast gave " .. got:dtype())
      end
      local d = (y - rows(ref)):abs():max():item()
      assert(d < 1e-5, "SyncBatchNorm differs from BatchNorm over the global batch by " .. d)
      d = (ys - rows(ref_seq)):abs():max():item()
      assert(d < 1e-5, "SyncBatchNorm, ReLU, MaxPool2d differ from the one-process modules by " .. d)
      d = math.max((sbn.running_mean - ref_mean):abs():max():item(),
        (sseq[1].running_mean - ref_seq_mean):abs():max():item())
      assert(d < 1e-5, "running_mean differs by " .. d)
      local total = y:sum() + ys:sum()
      total:backward()
      assert(x.grad:dtype() == "bfloat16", "the bfloat16 input's gradient is " .. x.grad:dtype())
      dist.destroy_process_group()
    end, R)
  end)

  it("a global batch that does not divide evenly (33 + 30) matches one process when the loss is scaled " ..
    "by the global batch", function()
    local sizes = { 33, 30 }
    local total = 63
    local model0 = mlp()
    local opt0 = sgd(model0)
    local x, y = data("mlp", STEPS * total)
    for s = 0, STEPS - 1 do
      opt0:zero_grad()
      local loss = ddp.cross_entropy(model0(x:narrow(1, s * total + 1, total)), y:narrow(1, s * total + 1, total))
      loss:backward()
      opt0:step()
    end
    local ref = state_of(model0)
    dist.spawn(function(rank)
      dist.init_process_group { backend = "cpu" }
      local model = dist.DistributedDataParallel(mlp())
      local opt = sgd(model)
      local first_off = rank == 0 and 0 or sizes[1]
      for s = 0, STEPS - 1 do
        local first = s * total + first_off + 1
        opt:zero_grad()
        -- sum over the local rows / global count * world size: DDP's average
        -- of these gradients is the gradient of the global mean
        local out = model(x:narrow(1, first, sizes[rank + 1]))
        local loss = ddp.cross_entropy(out, y:narrow(1, first, sizes[rank + 1]), { reduction = "sum" }) * (R / total)
        loss:backward()
        opt:step()
      end
      local mine = state_of(model.module)
      assert(max_diff(mine, ref) < 1e-10, "uneven DDP differs by " .. max_diff(mine, ref))
      dist.destroy_process_group()
    end, R)
  end)

  it("starts early buckets' all-reduce while backward is still running", function()
    dist.spawn(function()
      dist.init_process_group { backend = "cpu" }
      ddp.manual_seed(1)
      local layers = {}
      for i = 1, 6 do
        layers[#layers + 1] = nn.Linear(256, 256)
        layers[#layers + 1] = nn.ReLU()
      end
      local model = dist.DistributedDataParallel(nn.Sequential(layers), { bucket_cap_mb = 0.25 })
      local x = ddp.randn(64, 256)
      for _ = 1, 3 do
        model:zero_grad()
        model(x):sum():backward()
      end
      local st = model:reducer_stats()
      assert(st.buckets >= 4, "expected several buckets, got " .. st.buckets)
      assert(st.launched_in_backward >= st.buckets - 1,
        string.format("only %d of %d buckets started during backward", st.launched_in_backward, st.buckets))
      assert(st.first_launch_before_end_ms > 0, "the first bucket did not start before backward ended")
      dist.destroy_process_group()
    end, 2)
  end)

  it("names parameters that got no gradient, and accepts them with find_unused_parameters", function()
    dist.spawn(function()
      dist.init_process_group { backend = "cpu" }
      local Two = nn.Module:extend("Two")
      function Two:__init()
        self.used = nn.Linear(4, 2)
        self.unused = nn.Linear(4, 2)
      end
      function Two:forward(x) return self.used(x) end
      ddp.manual_seed(3)
      local model = dist.DistributedDataParallel(Two())
      local ok, err = pcall(function() model(ddp.randn(3, 4)):sum():backward() end)
      assert(not ok, "expected an error for unused parameters")
      assert(tostring(err):find("unused.weight", 1, true) and tostring(err):find("find_unused_parameters", 1, true),
        "error does not name the parameter: " .. tostring(err))
      ddp.manual_seed(3)
      local model2 = dist.DistributedDataParallel(Two(), { find_unused_parameters = true })
      model2(ddp.randn(3, 4)):sum():backward()
      -- unused on both ranks: no gradient, as PyTorch leaves it (its optimizers then skip the parameter)
      assert(model2.module.unused.weight.grad == nil, "a parameter no rank used must have no gradient")
      assert(model2.module.used.weight.grad ~= nil, "the used one has its gradient")
      dist.destroy_process_group()
    end, 2)
  end)

  it("wrapping before init_process_group is a clear error", function()
    local ok, err = pcall(dist.DistributedDataParallel, mlp())
    assert.is_false(ok)
    assert.matches("init_process_group", err)
  end)

  it("different models on the ranks are named", function()
    local ok, err = pcall(dist.spawn, function(rank)
      dist.init_process_group { backend = "cpu" }
      local model = rank == 0 and nn.Linear(4, 3) or nn.Sequential { nn.Linear(4, 3), nn.Linear(3, 3) }
      dist.DistributedDataParallel(model)
    end, 2)
    assert.is_false(ok)
    assert.matches("ranks hold different models", tostring(err))
  end)

  it("an optimizer built from the unwrapped module's parameters after wrapping trains the same", function()
    dist.spawn(function(rank)
      dist.init_process_group { backend = "cpu" }
      local inner = mlp()
      local model = dist.DistributedDataParallel(inner)
      train_rank(model, sgd(inner), "mlp", rank) -- the same tensors: works, as in PyTorch
      check_against(inner, ref_mlp, "an optimizer on the unwrapped module")
      dist.destroy_process_group()
    end, R)
  end)

  it("gather_for_metrics covers every test item exactly once (5 items on 2 ranks, one padding duplicate)", function()
    dist.spawn(function(rank)
      dist.init_process_group { backend = "cpu" }
      local ds = ddp.data.TensorDataset(ddp.arange(1, 6), ddp.arange(1, 6) * 10)
      local sampler = ddp.data.DistributedSampler(ds, { shuffle = true, seed = 4 })
      local loader = ddp.data.DataLoader(ds, { batch_size = 2, sampler = sampler })
      local ids, labels = {}, {}
      for x, y in loader:iter() do
        ids[#ids + 1], labels[#labels + 1] = x, y
      end
      local all_ids = dist.gather_for_metrics(ddp.cat(ids), sampler)
      local all_labels = dist.gather_for_metrics(ddp.cat(labels), sampler)
      local seen = {}
      for i, id in ipairs(all_ids:totable()) do
        assert(not seen[id], "item " .. id .. " counted twice")
        seen[id] = true
        assert(all_labels:totable()[i] == id * 10, "predictions and labels are not aligned")
      end
      for id = 1, 5 do assert(seen[id], "item " .. id .. " missing") end
      local ok, err = pcall(dist.gather_for_metrics, ddp.cat(ids):narrow(1, 1, 2), sampler)
      assert(not ok and tostring(err):find("has 2 rows but the sampler gives this rank 3"), tostring(err))
      ok, err = pcall(dist.gather_for_metrics, ddp.cat(ids), {})
      assert(not ok and tostring(err):find("DistributedSampler"), tostring(err))
      dist.destroy_process_group()
    end, 2)
  end)

  it("state_dict keys carry the module. prefix and load back", function()
    dist.spawn(function()
      dist.init_process_group { backend = "cpu" }
      local model = dist.DistributedDataParallel(mlp())
      local sd = model:state_dict()
      assert(sd["module.0.weight"] and sd["module.2.bias"], "missing module. prefix")
      local other = dist.DistributedDataParallel(mlp())
      other:load_state_dict(sd)
      other.module:load_state_dict(mlp():state_dict())
      dist.destroy_process_group()
    end, 2)
  end)
end)
