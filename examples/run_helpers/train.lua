-- The run helpers in one small script: a YAML/command-line configuration,
-- a progress bar, metrics.jsonl, checkpoints every epoch with exact resume,
-- and curves drawn afterwards with `ddplua plot`.
--
--   ddplua examples/run_helpers/train.lua --config configs/run_helpers.yaml epochs=8
--   ddplua examples/run_helpers/train.lua resume=runs/<run>/last.safetensors epochs=12 run_name=<run>
--   ddplua plot runs/<run>
--
-- The task is deliberately tiny and self-contained (a 2-layer MLP telling
-- three rings of points apart, SGD with momentum written out with tensor
-- ops) so that it runs in seconds on one CPU core. Every epoch draws fresh
-- training points from ddplua's generator, so an exact resume needs the
-- generator state that the checkpoint restores.
local ddp = require "ddplua"

local cfg, run_dir = ddp.config {
  epochs = 6,
  batch_size = 64,
  lr = 0.02,
  momentum = 0.9,
  hidden = 32,
  samples = 4096,  -- training points per epoch (the validation set has as many)
  log_every = 8,   -- steps per metrics.jsonl record
  seed = 0,
  resume = "",     -- a checkpoint to continue from
  run_name = "",   -- runs/<run_name>, or a date-time name when empty
}

-- Points in [-3, 3]^2 labelled 1..3 by ring: radius^2 below 1.5, below 4, beyond.
local function rings(n)
  local x = ddp.rand(n, 2) * 6 - 3
  local r2 = (x * x):sum(2)
  return x, r2:gt(1.5):to("int64") + r2:gt(4):to("int64") + 1
end

ddp.manual_seed(cfg.seed)
local x_val, y_val = rings(cfg.samples)

-- Model and optimizer with state_dict / load_state_dict, as nn and optim have.
local names = { "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias" }
local shapes = { { cfg.hidden, 2 }, { cfg.hidden }, { 3, cfg.hidden }, { 3 } }
local model = { params = {} }
for i, name in ipairs(names) do model.params[name] = (ddp.randn(shapes[i]) * 0.5):requires_grad_() end
function model:forward(x)
  local p = self.params
  return ddp.linear(ddp.linear(x, p["fc1.weight"], p["fc1.bias"], "relu"), p["fc2.weight"], p["fc2.bias"])
end
function model:state_dict() return self.params end
function model:load_state_dict(sd)
  ddp.no_grad(function() for k, p in pairs(self.params) do p:copy_(sd[k]) end end)
end

local optimizer = { lr = cfg.lr, momentum = cfg.momentum, state = {} }
function optimizer:step()
  ddp.no_grad(function()
    for i, name in ipairs(names) do
      local p = model.params[name]
      local s = self.state[i]
      if not s then
        s = { momentum_buffer = ddp.zeros_like(p) }
        self.state[i] = s
      end
      s.momentum_buffer:mul_(self.momentum):add_(p.grad)
      p:add_(s.momentum_buffer, -self.lr)
      p.grad = nil
    end
  end)
end
function optimizer:state_dict()
  return { state = self.state, param_groups = { { lr = self.lr, momentum = self.momentum, params = { 1, 2, 3, 4 } } } }
end
function optimizer:load_state_dict(sd)
  self.state, self.lr, self.momentum = sd.state, sd.param_groups[1].lr, sd.param_groups[1].momentum
end

local start_epoch, step = 1, 0
if cfg.resume ~= "" then
  local info = ddp.load_checkpoint(cfg.resume, { model = model, optimizer = optimizer })
  start_epoch, step = info.epoch + 1, info.step
  print(string.format("resumed from %s: epoch %d, step %d", cfg.resume, info.epoch, info.step))
end

local function evaluate(x, y)
  return ddp.no_grad(function()
    local out = model:forward(x)
    return ddp.cross_entropy(out, y):item(), out:argmax(2):eq(y):sum():item() / y:size(1)
  end)
end

local log = ddp.metrics.open()
local steps_per_epoch = cfg.samples // cfg.batch_size
for epoch = start_epoch, cfg.epochs do
  local x_train, y_train = rings(cfg.samples)
  local bar = ddp.progress(steps_per_epoch, { desc = "epoch " .. epoch, batch_size = cfg.batch_size })
  local epoch_loss, window_loss, window_correct, window_steps = 0, 0, 0, 0
  for b = 1, steps_per_epoch do
    local first = (b - 1) * cfg.batch_size + 1
    local x, y = x_train:narrow(1, first, cfg.batch_size), y_train:narrow(1, first, cfg.batch_size)
    local out = model:forward(x)
    local loss = ddp.cross_entropy(out, y)
    loss:backward()
    optimizer:step()
    step = step + 1
    local l = loss:item()
    epoch_loss, window_loss, window_steps = epoch_loss + l, window_loss + l, window_steps + 1
    window_correct = window_correct + out:argmax(2):eq(y):sum():item()
    if window_steps == cfg.log_every then
      log:log { step = step, epoch = epoch, loss = window_loss / window_steps,
        acc = window_correct / (window_steps * cfg.batch_size) }
      window_loss, window_correct, window_steps = 0, 0, 0
    end
    bar:update(1, { loss = l })
  end
  bar:close()
  local val_loss, val_acc = evaluate(x_val, y_val)
  local _, train_acc = evaluate(x_train, y_train)
  log:log_epoch { epoch = epoch, loss = epoch_loss / steps_per_epoch, acc = train_acc, val_loss = val_loss,
    val_acc = val_acc }
  print(string.format("epoch %d: train loss %.4f acc %.3f, val loss %.4f acc %.3f", epoch,
    epoch_loss / steps_per_epoch, train_acc, val_loss, val_acc))
  ddp.save_checkpoint(run_dir .. "/last.safetensors", { model = model, optimizer = optimizer, epoch = epoch,
    step = step, rng = true, config = cfg })
end
log:close()
print("run directory: " .. run_dir)
