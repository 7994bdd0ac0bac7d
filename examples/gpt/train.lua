-- A byte-level GPT trained with nanoGPT's recipe on the text of Debian's
-- `fortunes` package: ../shared/peers/torch_gpt.py's model and recipe in
-- ddplua (pre-LayerNorm blocks, causal attention through the fused
-- scaled_dot_product_attention, GELU MLP, weight tying, AdamW with decay
-- on the matrices only, betas (0.9, 0.95), linear warmup then cosine,
-- clip_grad_norm_(1.0), gradient accumulation with no_sync, optional bf16
-- autocast, checkpoints and resume).
--
--   ddplua examples/gpt/train.lua steps=500                    # = python3 torch_gpt.py 1 500
--   ddplua --nproc 2 examples/gpt/train.lua steps=250          # = python3 torch_gpt.py 2 250
--   ddplua --config configs/gpt.yaml                           # the same, as a YAML run
--   ddplua examples/gpt/train.lua steps=1000 resume=runs/gpt/ckpt.safetensors
--   ddplua examples/gpt/sample.lua ckpt=runs/gpt/ckpt.safetensors prompt="Q: " tokens=200
--
-- Prints tokens/s over the timed steps (after 5 warm-up steps) and the
-- validation loss at the end, as the peer does, and writes a checkpoint
-- every ckpt_every steps and at the end (<out>/ckpt.safetensors).
local ddp = require "ddplua"
local optim, dist = ddp.optim, ddp.distributed
local here = (arg and arg[0] or "examples/gpt/train.lua"):gsub("[^/]*$", "")
local GPT = dofile(here .. "model.lua")
local fortunes = dofile(here .. "../fortunes.lua")

local cfg = ddp.config {
  steps = 500,
  accum = 1,          -- micro-batches per step; all but the last under no_sync
  n_layer = 4, n_head = 4, n_embd = 128, block_size = 128, batch_size = 16, dropout = 0.0,
  lr = 1e-3, min_lr = 1e-4, warmup = 50, weight_decay = 0.1, beta1 = 0.9, beta2 = 0.95, clip = 1.0,
  seed = 0,
  eval_batches = 20,
  attention = "fused", -- fused (F.self_attention_qkv) | manual (the peer's ops one by one)
  autocast = "none",  -- none | bfloat16 (matmul/linear in bf16, float32 master weights)
  out = "runs/gpt",
  ckpt_every = 0,     -- > 0: a checkpoint every so many steps (and one at the end when > 0 or resuming)
  resume = "",        -- a checkpoint to continue from
  stop_after = 0,     -- > 0: stop (with a checkpoint) after this step, as a preempted job would
  limit = 0,          -- > 0: only the first `limit` bytes of the corpus (tests)
  device = "auto",    -- auto (ddp.device(): this rank's GPU, else the cpu) | cpu | cuda:N
}

dist.init_process_group()
local rank, world = dist.get_rank(), dist.get_world_size()
ddp.manual_seed(cfg.seed)
local device = cfg.device == "auto" and ddp.device() or cfg.device

-- the corpus as bytes, 90% train / 10% validation (token = byte + 1, 1-based like every Lua position)
local text = fortunes.read()
if cfg.limit > 0 then text = text:sub(1, cfg.limit) end
local all = ddp.core.frombuffer(text, { dtype = "uint8" }):long() + 1
local n = math.floor(0.9 * all:size(1))
local train_data, val_data = all:narrow(1, 1, n), all:narrow(1, n + 1, all:size(1) - n)
local B, T = cfg.batch_size, cfg.block_size

-- B random windows of T + 1 tokens: inputs and next-token targets (torch_gpt.py's batch)
local offsets = ddp.arange(0, T)
local function batch(data, g)
  local ix = ddp.randint(1, data:size(1) - T, { B }, { generator = g }) -- window starts, 1-based
  local pos = (ix:view(B, 1) + offsets:view(1, T)):reshape(-1)
  return data:index_select(1, pos):view(B, T):to(device), data:index_select(1, pos + 1):view(B, T):to(device)
end

local model = GPT { n_layer = cfg.n_layer, n_head = cfg.n_head, n_embd = cfg.n_embd, block_size = T,
  vocab_size = 256, dropout = cfg.dropout, attention = cfg.attention }:to(device)
local ddp_model = dist.DistributedDataParallel(model)
local opt = optim.AdamW(model:param_groups(cfg.weight_decay), { lr = cfg.lr, betas = { cfg.beta1, cfg.beta2 } })
local g = ddp.Generator(1 + rank)

local function lr_at(step) -- 0-based step, as the peer's
  if step < cfg.warmup then return cfg.lr * (step + 1) / cfg.warmup end
  local r = (step - cfg.warmup) / math.max(1, cfg.steps - cfg.warmup)
  return cfg.min_lr + 0.5 * (1 + math.cos(math.pi * r)) * (cfg.lr - cfg.min_lr)
end

-- the model under autocast when asked (training and evaluation alike, as nanoGPT's ctx)
local function forward(x, y, m)
  m = m or ddp_model
  if cfg.autocast == "none" then return m(x, y) end
  return ddp.autocast(cfg.autocast, function() return m(x, y) end)
end

local start = 0
if cfg.resume ~= "" then
  local info = ddp.load_checkpoint(cfg.resume, { model = model, optimizer = opt })
  start = info.step
  g.offset = info.extra.generator_offsets[rank + 1] -- where this rank's batches stopped
  ddp.print(string.format("resumed %s at step %d", cfg.resume, start))
end

local function checkpoint(step)
  ddp.core.mkdir(cfg.out)
  local offs = ddp.tensor({ g.offset }, { dtype = "int64", device = device }) -- nccl takes CUDA tensors
  local all_offs = {}
  dist.all_gather(all_offs, offs)
  local list = {}
  for i, t in ipairs(all_offs) do list[i] = t:item() end
  ddp.save_checkpoint(cfg.out .. "/ckpt.safetensors", { model = model, optimizer = opt, step = step, rng = true,
    extra = { generator_offsets = list }, config = cfg })
end

local t0
for step = start, cfg.steps - 1 do
  if step == start + 5 then
    ddp.synchronize() -- the GPU's queued work (nothing on the cpu)
    dist.barrier()
    t0 = ddp.clock()
  end
  for _, pg in ipairs(opt.param_groups) do pg.lr = lr_at(step) end
  for micro = 1, cfg.accum do
    local x, y = batch(train_data, g)
    if micro < cfg.accum then
      local _ <close> = ddp_model:no_sync() -- accumulate locally, no all-reduce
      local loss = forward(x, y) / cfg.accum
      loss:backward()
    else
      local loss = forward(x, y) / cfg.accum
      loss:backward()
    end
  end
  ddp.nn.utils.clip_grad_norm_(model:parameters(), cfg.clip)
  opt:step()
  opt:zero_grad()
  if cfg.ckpt_every > 0 and (step + 1) % cfg.ckpt_every == 0 then checkpoint(step + 1) end
  if cfg.stop_after > 0 and step + 1 == cfg.stop_after then
    checkpoint(step + 1)
    ddp.print(string.format("stopped after step %d: %s/ckpt.safetensors", step + 1, cfg.out))
    dist.destroy_process_group()
    os.exit(0)
  end
end
ddp.synchronize()
dist.barrier()
local dt = t0 and ddp.clock() - t0 or 0
if cfg.ckpt_every > 0 or cfg.resume ~= "" then checkpoint(cfg.steps) end

model:eval()
local gv, losses = ddp.Generator(1234), 0
ddp.no_grad(function()
  for _ = 1, cfg.eval_batches do
    local x, y = batch(val_data, gv)
    losses = losses + forward(x, y, model):item()
  end
end)
local timed = cfg.steps - start - 5
local tokens = world * timed * cfg.accum * B * T
ddp.print(string.format("gpt nproc=%d steps=%d accum=%d tokens/s=%.0f val_loss=%.4f (%.17g)", world, cfg.steps,
  cfg.accum, dt > 0 and tokens / dt or 0, losses / cfg.eval_batches, losses / cfg.eval_batches))
dist.destroy_process_group()
