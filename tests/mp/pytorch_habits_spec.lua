-- PyTorch habits under several ranks (issue 14): a weight-tied model under
-- DDP averages its one shared gradient once (2 ranks x 16 = 1 process x
-- 32, float64); nanoGPT's `model.require_backward_grad_sync = false` skips
-- the all-reduce of that backward and the accumulated gradient is averaged
-- by the first synced one; ddp.save_state from rank 0 alone needs no other
-- rank; init_process_group("gloo") runs the cpu backend and says so once;
-- a collective mismatch (ddp.save_checkpoint called by rank 0 alone) names
-- on each rank the call it made and its line; `p.grad = nil` (or a tensor)
-- between steps, as PyTorch code clears gradients, still averages, also for
-- a parameter one rank leaves unused.
local ddp = require "ddplua"
local nn, optim, dist = ddp.nn, ddp.optim, ddp.distributed
local U = require "helpers.io_util"

local R, B, STEPS = 2, 16, 4

local Tied = nn.Module:extend("Tied")
function Tied:__init()
  ddp.manual_seed(5)
  self.wte = nn.Embedding(12, 6)
  self.mix = nn.Linear(6, 6)
  self.head = nn.Linear(6, 12, false)
  self.head.weight = self.wte.weight
  self:double()
end
function Tied:forward(ids) return self.head(self.mix(self.wte(ids)):tanh()) end

local function data(n)
  ddp.manual_seed(77)
  local x = (ddp.rand(n, 3, { dtype = "float64" }) * 12):long() + 1
  local y = (ddp.rand(n * 3, { dtype = "float64" }) * 12):long() + 1
  return x, y
end

local function loss_of(model, x, y) return ddp.cross_entropy(model(x):view(-1, 12), y) end

local function flat(model)
  local parts = {}
  for _, p in ipairs(model:parameters()) do parts[#parts + 1] = p:detach():reshape(-1) end
  return ddp.cat(parts)
end

local function max_diff(a, b) return (a - b):abs():max():item() end

-- one process, the whole global batch per step
local function reference()
  local model = Tied()
  local opt = optim.SGD(model:parameters(), { lr = 0.5, momentum = 0.9 })
  local x, y = data(STEPS * R * B)
  for s = 0, STEPS - 1 do
    opt:zero_grad()
    loss_of(model, x:narrow(1, s * R * B + 1, R * B), y:narrow(1, s * R * B * 3 + 1, R * B * 3)):backward()
    opt:step()
  end
  return flat(model)
end

-- Two float64 layers: a, which every rank uses, and b, which uses_b(rank, step) says; SGD with hp over `steps`
-- steps in one process on the mean of the two ranks' losses (what the DDP runs must end at)
local function ab_net()
  ddp.manual_seed(9)
  local m = nn.ModuleDict { a = nn.Linear(4, 3), b = nn.Linear(4, 3) }
  m:double()
  return m
end
local function ab_loss(m, rank, s, uses_b)
  ddp.manual_seed(100 + 10 * s + rank)
  local x, y = ddp.randn({ B, 4 }, { dtype = "float64" }), ddp.randn({ B, 3 }, { dtype = "float64" })
  local out = m.a(x)
  if uses_b(rank, s) then out = out + m.b(x) end
  return ((out - y) ^ 2):mean()
end
local function ab_one_process(hp, uses_b, steps)
  local one = ab_net()
  local opt = optim.SGD(one:parameters(), hp)
  for s = 1, steps do
    opt:zero_grad()
    local both = (ab_loss(one, 0, s, uses_b) + ab_loss(one, 1, s, uses_b)) / 2
    both:backward()
    opt:step()
  end
  return flat(one)
end
local function ab_check(rank, m, want)
  local mine = flat(m)
  assert(max_diff(mine, want) < 1e-12, "rank " .. rank .. " differs from one process by " .. max_diff(mine, want))
end

local function script(dir, name, text)
  local path = dir .. "/" .. name
  U.write(path, text)
  return path
end

describe("PyTorch habits under DDP", function()
  local ref = reference()

  it("a tied weight is one gradient, averaged once: 2 ranks x 16 equal 1 process x 32", function()
    dist.spawn(function(rank)
      dist.init_process_group { backend = "cpu" }
      local model = dist.DistributedDataParallel(Tied())
      assert(model:reducer_stats().params == 3, "the reducer holds the tied weight once (wte, mix.w, mix.b)")
      local opt = optim.SGD(model:parameters(), { lr = 0.5, momentum = 0.9 })
      local x, y = data(STEPS * R * B)
      for s = 0, STEPS - 1 do
        local first = s * R * B + rank * B
        opt:zero_grad()
        loss_of(model, x:narrow(1, first + 1, B), y:narrow(1, first * 3 + 1, B * 3)):backward()
        opt:step()
      end
      local mine = flat(model.module)
      assert(max_diff(mine, ref) < 1e-10, "tied DDP differs from one process by " .. max_diff(mine, ref))
      assert(model.module.head.weight == model.module.wte.weight, "the tie survived")
      dist.destroy_process_group()
    end, R)
  end)

  -- PyTorch's `for p in model.parameters(): p.grad = None` (and assigning .grad) between steps: the next backward
  -- accumulates into a fresh tensor, which DDP must still average (it used to keep each rank's own gradient and
  -- send its stale bucket slot to the others: a silent 1.4x gradient with 2 ranks)
  for _, how in ipairs({ "nil", "zeros", "view" }) do
    it("p.grad = " .. how .. " between steps still averages: 2 ranks x 16 equal 1 process x 32", function()
      dist.spawn(function(rank)
        dist.init_process_group { backend = "cpu" }
        local model = dist.DistributedDataParallel(Tied())
        local opt = optim.SGD(model:parameters(), { lr = 0.5, momentum = 0.9 })
        local x, y = data(STEPS * R * B)
        for s = 0, STEPS - 1 do
          for _, p in ipairs(model:parameters()) do
            if how == "nil" then p.grad = nil
            elseif how == "zeros" then p.grad = ddp.zeros(p:size(), { dtype = "float64" })
            else p.grad = ddp.zeros(p:size(), { dtype = "float64" }):narrow(1, 1, p:size(1)) end -- a view
          end
          local first = s * R * B + rank * B
          loss_of(model, x:narrow(1, first + 1, B), y:narrow(1, first * 3 + 1, B * 3)):backward()
          opt:step()
        end
        local mine = flat(model.module)
        assert(max_diff(mine, ref) < 1e-10, "DDP after p.grad = " .. how .. " differs from one process by " ..
          max_diff(mine, ref))
        dist.destroy_process_group()
      end, R)
    end)
  end

  -- more ways PyTorch code drives a backward, each 2 ranks x 8 against 1 process x 16 (float64 MLP, SGD momentum)
  for _, how in ipairs({ "zero_grad(false)", "retain_graph twice", "two forwards, one backward", "grad:mul_ before step" }) do
    it(how .. " under DDP equals one process", function()
      local HB = 8
      local function mlp()
        ddp.manual_seed(3)
        local m = nn.Sequential { nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3) }
        m:double()
        return m
      end
      local function run_steps(model, params, first, n)
        local opt = optim.SGD(params, { lr = 0.3, momentum = 0.9 })
        for s = 1, STEPS do
          ddp.manual_seed(1000 + s)
          local x = ddp.randn({ R * HB, 5 }, { dtype = "float64" }):narrow(1, first + 1, n)
          local y = ddp.randn({ R * HB, 3 }, { dtype = "float64" }):narrow(1, first + 1, n)
          local function mse(a, b) return ((model(a) - b) ^ 2):mean() end
          opt:zero_grad(how ~= "zero_grad(false)")
          if how == "retain_graph twice" then
            local l = mse(x, y)
            l:backward { retain_graph = true }
            l:backward()
          elseif how == "two forwards, one backward" then
            local h = n // 2
            local l = (mse(x:narrow(1, 1, h), y:narrow(1, 1, h)) + mse(x:narrow(1, h + 1, n - h),
              y:narrow(1, h + 1, n - h))) / 2
            l:backward()
          else
            mse(x, y):backward()
            if how == "grad:mul_ before step" then
              for _, p in ipairs(params) do p.grad:mul_(0.5) end
            end
          end
          opt:step()
        end
      end
      local one = mlp()
      run_steps(one, one:parameters(), 0, R * HB)
      local want = flat(one)
      dist.spawn(function(rank)
        dist.init_process_group { backend = "cpu" }
        local model = dist.DistributedDataParallel(mlp())
        run_steps(model, model:parameters(), rank * HB, HB)
        local mine = flat(model.module)
        assert(max_diff(mine, want) < 1e-12, how .. ": rank " .. rank .. " differs by " .. max_diff(mine, want))
        dist.destroy_process_group()
      end, R)
    end)
  end

  it("a parameter no rank uses has no gradient and is not stepped (momentum, weight decay), as in PyTorch", function()
    -- b is unused by every rank in steps 1 and 3, and by rank 0 alone in step 2
    local function uses_b(rank, s) return s == 2 and rank == 0 end
    local hp = { lr = 0.1, momentum = 0.9, weight_decay = 0.01 }
    local want = ab_one_process(hp, uses_b, 3)
    dist.spawn(function(rank)
      dist.init_process_group { backend = "cpu" }
      local model = dist.DistributedDataParallel(ab_net(), { find_unused_parameters = true })
      local opt = optim.SGD(model:parameters(), hp)
      local b0 = model.module.b.weight:clone()
      for s = 1, 3 do
        opt:zero_grad()
        ab_loss(model.module, rank, s, uses_b):backward()
        if s ~= 2 then
          assert(model.module.b.weight.grad == nil, "rank " .. rank .. ", step " .. s .. ": b has a gradient")
        else
          assert(model.module.b.weight.grad ~= nil, "rank " .. rank .. ": step 2 averages b's gradient")
        end
        opt:step()
        if s == 1 then assert(max_diff(model.module.b.weight, b0) == 0, "b moved without a gradient") end
      end
      ab_check(rank, model.module, want)
      dist.destroy_process_group()
    end, R)
  end)

  it("wrapping a model in DDP keeps the gradients it had; the next backward adds to them and averages", function()
    dist.spawn(function(rank)
      dist.init_process_group { backend = "cpu" }
      local m = nn.Linear(2, 1, false)
      m:double()
      m.weight.grad = ddp.full({ 1, 2 }, 3.0 + rank, { dtype = "float64" })
      local model = dist.DistributedDataParallel(m)
      assert(max_diff(m.weight.grad, ddp.full({ 1, 2 }, 3.0 + rank, { dtype = "float64" })) == 0,
        "rank " .. rank .. ": the gradient after wrapping is " .. tostring(m.weight.grad))
      -- d/dw of sum(w . x) with x = (rank + 1) * (1, 2): averaged with what each rank had, ((3 + 4) + (1 + 2)) / 2 etc.
      model(ddp.tensor({ { 1.0, 2.0 } }, { dtype = "float64" }) * (rank + 1)):sum():backward()
      local want = ddp.tensor({ { (3 + 1 + 4 + 2) / 2, (3 + 2 + 4 + 4) / 2 } }, { dtype = "float64" })
      assert(max_diff(m.weight.grad, want) == 0, "rank " .. rank .. ": " .. tostring(m.weight.grad))
      dist.destroy_process_group()
    end, R)
  end)

  it("a parameter only rank 0 uses, its .grad set to nil, averages to half its gradient (find_unused)", function()
    local function uses_b(rank) return rank == 0 end
    local want = ab_one_process({ lr = 0.1 }, uses_b, STEPS)
    dist.spawn(function(rank)
      dist.init_process_group { backend = "cpu" }
      local model = dist.DistributedDataParallel(ab_net(), { find_unused_parameters = true })
      local opt = optim.SGD(model:parameters(), { lr = 0.1 })
      for s = 1, STEPS do
        for _, p in ipairs(model:parameters()) do p.grad = nil end
        ab_loss(model.module, rank, s, uses_b):backward()
        opt:step()
      end
      ab_check(rank, model.module, want)
      dist.destroy_process_group()
    end, R)
  end)

  it("require_backward_grad_sync = false skips the all-reduce; the synced backward averages the sum", function()
    dist.spawn(function(rank)
      dist.init_process_group { backend = "cpu" }
      local model = dist.DistributedDataParallel(Tied())
      local opt = optim.SGD(model:parameters(), { lr = 0.5, momentum = 0.9 })
      local x, y = data(STEPS * R * B)
      local half = B // 2
      for s = 0, STEPS - 1 do
        opt:zero_grad()
        for micro = 1, 2 do -- two micro-batches of B/2 per rank, nanoGPT's gradient accumulation
          model.require_backward_grad_sync = micro == 2
          local first = s * R * B + rank * B + (micro - 1) * half
          local loss = loss_of(model, x:narrow(1, first + 1, half), y:narrow(1, first * 3 + 1, half * 3)) / 2
          loss:backward()
          if micro == 1 then -- not averaged: each rank's own gradient
            local g = model.module.mix.weight.grad:reshape(-1)
            local all = ddp.zeros({ R, g:numel() }, { dtype = "float64" })
            dist.all_gather(all, g:contiguous())
            assert(max_diff(all[1], all[2]) > 1e-6, "the backward with the flag false was averaged")
          end
        end
        opt:step()
      end
      local mine = flat(model.module)
      assert(max_diff(mine, ref) < 1e-10, "accumulation with the flag differs from one process by " ..
        max_diff(mine, ref))
      local st = model:reducer_stats()
      assert(st.synced_passes == STEPS, "expected " .. STEPS .. " synced backward passes, got " .. st.synced_passes)
      model.require_backward_grad_sync = "yes"
      local ok, err = pcall(model, x:narrow(1, 1, 2))
      assert(not ok and err:find("require_backward_grad_sync must be true or false, got yes", 1, true), tostring(err))
      dist.destroy_process_group()
    end, R)
  end)

  it("ddp.save_state from rank 0 alone, as the tutorials' torch.save, then every rank reads it", function()
    local dir = U.tmpdir()
    local path = dir .. "/state.safetensors"
    dist.spawn(function(rank)
      dist.init_process_group { backend = "cpu" }
      local model = dist.DistributedDataParallel(Tied())
      if rank == 0 then
        ddp.save_state(path, { model = model.module:state_dict(), epoch = 3, note = "best", loss = 0.25 })
      end
      dist.barrier() -- the only collective; rank 1 made no other
      local st = ddp.load_state(path)
      assert(st.epoch == 3 and st.note == "best" and st.loss == 0.25, "metadata values")
      assert(max_diff(st.model["wte.weight"], model.module.wte.weight) == 0, "tensors")
      assert(st.model["head.weight"] ~= nil, "both names of the tied weight")
      dist.destroy_process_group()
    end, R)
    U.rm_rf(dir)
  end)

  it("init_process_group(\"gloo\") runs the cpu backend and says so in one line", function()
    local dir = U.tmpdir()
    local s = script(dir, "gloo.lua", [[
local ddp = require "ddplua"
local dist = ddp.distributed
dist.init_process_group("gloo")
local t = ddp.ones(3) * (dist.get_rank() + 1)
dist.all_reduce(t)
print("BACKEND", dist.get_backend(), t:sum():item())
dist.destroy_process_group()
]])
    local ok, out = U.run(U.quote(U.ddplua) .. " --nproc 2 " .. U.quote(s))
    U.rm_rf(dir)
    assert.is_true(ok, out)
    local _, lines = out:gsub("backend 'gloo' %(PyTorch's CPU backend%) runs as ddplua's 'cpu' backend", "")
    assert.are.equal(1, lines, out)
    assert.matches("%[rank 0%] BACKEND\tcpu\t9", out)
    assert.matches("%[rank 1%] BACKEND\tcpu\t9", out)
  end)

  it("a collective mismatch names, on each rank, the call it made and the line", function()
    local dir = U.tmpdir()
    local s = script(dir, "mismatch.lua", [[
local ddp = require "ddplua"
local dist = ddp.distributed
dist.init_process_group { backend = "cpu" }
local ok, err
if dist.get_rank() == 0 then
  ok, err = pcall(ddp.save_checkpoint, "]] .. dir .. [[/ck.safetensors", { epoch = 1 }) -- line 6
else
  ok, err = pcall(dist.all_reduce, ddp.ones(4)) -- line 8
end
print("ERROR", err)
]])
    local _, out = U.run(U.quote(U.ddplua) .. " --nproc 2 --timeout 20 " .. U.quote(s))
    U.rm_rf(dir)
    assert.matches("%[rank 0%] ERROR\t[^\n]*mismatch.lua:6: collective mismatch: rank 0 called broadcast%(int64, 1, " ..
      "src 0%) but rank 1 called all_reduce%(sum, float32, 4%)", out)
    assert.matches("%[rank 0%]   rank 0 was in dist.broadcast %(inside a ddplua call%) at [^\n]*mismatch.lua:6", out)
    assert.matches("%[rank 1%]   rank 1 was in dist.all_reduce at [^\n]*mismatch.lua:8", out)
    assert.matches("%[rank 1%]   every rank must make the same collective calls in the same order " ..
      "%(ddp.save_checkpoint is one: call it on every rank; to save from one rank, use ddp.save_state%)", out)
  end)
end)
