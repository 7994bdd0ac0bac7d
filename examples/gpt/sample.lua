-- Text from a checkpoint of examples/gpt/train.lua: the prompt's bytes,
-- then `tokens` bytes sampled one at a time with temperature and top-k.
--
--   ddplua examples/gpt/sample.lua ckpt=runs/gpt/ckpt.safetensors prompt="Q: " tokens=300 temperature=0.8 top_k=40
local ddp = require "ddplua"
local here = (arg and arg[0] or "examples/gpt/sample.lua"):gsub("[^/]*$", "")
local GPT = dofile(here .. "model.lua")

local cfg = ddp.config({ ckpt = "runs/gpt/ckpt.safetensors", prompt = "\n", tokens = 300, temperature = 0.8,
  top_k = 40, seed = 1, samples = 1 }, { save = false, print = false })

local meta = ddp.load_checkpoint(cfg.ckpt, { rng = false }) -- the training run's configuration
local c = meta.config
if type(c) ~= "table" then error(cfg.ckpt .. " holds no training configuration (not a checkpoint of train.lua?)", 0) end
local model = GPT { n_layer = c.n_layer, n_head = c.n_head, n_embd = c.n_embd, block_size = c.block_size,
  vocab_size = 256, dropout = 0 }
ddp.load_checkpoint(cfg.ckpt, { model = model, rng = false })
model:eval()

local prompt = cfg.prompt ~= "" and cfg.prompt or "\n"
local ids = {}
for i = 1, #prompt do ids[i] = prompt:byte(i) + 1 end -- token = byte + 1
local g = ddp.Generator(cfg.seed)
for s = 1, cfg.samples do
  local out = model:generate(ddp.tensor({ ids }), cfg.tokens, cfg.temperature, cfg.top_k, g)
  local bytes = {}
  for i, t in ipairs(out[1]:totable()) do bytes[i] = string.char(t - 1) end
  if cfg.samples > 1 then io.write(string.format("---- sample %d\n", s)) end
  io.write(table.concat(bytes), "\n")
end
