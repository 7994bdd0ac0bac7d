-- The byte-level GPT of examples/gpt (nanoGPT's model, as
-- ../shared/peers/torch_gpt.py writes it): token and position embeddings,
-- pre-LayerNorm blocks of causal self-attention (one fused
-- F.self_attention_qkv: scaled_dot_product_attention over the packed qkv) and a GELU MLP, a final LayerNorm, and a
-- head tied to the token embedding. The parameter names are the peer's
-- (wte, wpe, blocks.0.ln1, blocks.0.qkv, ..., ln_f, head), so its
-- state_dict loads (tests/spec/gpt_parity_spec.lua).
--
--   local GPT = dofile("examples/gpt/model.lua")
--   local model = GPT { n_layer = 4, n_head = 4, n_embd = 128, block_size = 128, vocab_size = 256, dropout = 0 }
--   (attention = "manual": the attention written op by op as the peer writes it: split, view, transpose, q @ k^T,
--   a causal mask buffer, softmax, @ v, transpose back and contiguous; the same function, more ops)
--   local loss = model(idx, targets)     -- idx, targets int64 [B, T], 1-based token ids
--   local logits = model(idx)            -- [B, T, vocab]
local ddp = require "ddplua"
local nn = ddp.nn
local F = nn.F

local Block = nn.Module:extend("Block")

function Block:__init(c)
  self.n_head, self.n_embd, self.dropout = c.n_head, c.n_embd, c.dropout or 0
  -- one assignment per line: a multiple assignment registers in no fixed order, and the order is the state_dict's
  self.ln1 = nn.LayerNorm(c.n_embd)
  self.ln2 = nn.LayerNorm(c.n_embd)
  self.qkv = nn.Linear(c.n_embd, 3 * c.n_embd)
  self.proj = nn.Linear(c.n_embd, c.n_embd)
  self.fc = nn.Linear(c.n_embd, 4 * c.n_embd)
  self.out = nn.Linear(4 * c.n_embd, c.n_embd)
  self.manual = c.attention == "manual"
  if self.manual then -- not in the state_dict (the peer's "mask" buffers are skipped when it loads)
    self:register_buffer("mask", ddp.ones(c.block_size, c.block_size):tril():view(1, 1, c.block_size, c.block_size),
      false)
  end
end

-- nanoGPT's attention line by line (the peer's Block.forward)
function Block:attention(x)
  local B, T, C = x:size(1), x:size(2), x:size(3)
  local H = self.n_head
  local q, k, v = self.qkv(x):split(C, 3)
  q = q:view(B, T, H, C // H):transpose(2, 3)
  k = k:view(B, T, H, C // H):transpose(2, 3)
  v = v:view(B, T, H, C // H):transpose(2, 3)
  local att = (q:matmul(k:transpose(-2, -1))) * (1.0 / math.sqrt(C // H))
  local mask = self.mask:narrow(3, 1, T):narrow(4, 1, T)
  att = F.softmax(att:masked_fill(mask:eq(0), -math.huge), -1)
  att = F.dropout(att, self.training and self.dropout or 0, self.training)
  return att:matmul(v):transpose(2, 3):contiguous():view(B, T, C)
end

function Block:forward(x)
  local p = self.training and self.dropout or 0
  -- the split of qkv into heads, the causal scaled_dot_product_attention and the heads' merge back to [B, T, C]
  -- as one op (the peer's q, k, v = qkv.split(...); ...; y.transpose(1, 2).contiguous() without the copies)
  local y = self.manual and self:attention(self.ln1(x))
    or F.self_attention_qkv(self.qkv(self.ln1(x)), self.n_head, { is_causal = true, dropout_p = p })
  x = x + F.dropout(self.proj(y), p, self.training)
  return x + F.dropout(self.out(F.gelu(self.fc(self.ln2(x)))), p, self.training)
end

local GPT = nn.Module:extend("GPT")

function GPT:__init(c)
  self.config = c
  self.wte = nn.Embedding(c.vocab_size, c.n_embd)
  self.wpe = nn.Embedding(c.block_size, c.n_embd)
  local blocks = {}
  for i = 1, c.n_layer do blocks[i] = Block(c) end
  self.blocks = (nn.ModuleList or nn.Sequential)(blocks) -- names blocks.0, blocks.1, ... either way
  self.ln_f = nn.LayerNorm(c.n_embd)
  self.head = nn.Linear(c.n_embd, c.vocab_size, { bias = false })
  self.head.weight = self.wte.weight -- weight tying
  ddp.no_grad(function() -- nanoGPT's init: N(0, 0.02) matrices, zero biases, unit LayerNorm gains
    for name, p in self:named_parameters() do
      if p:dim() >= 2 then nn.init.normal_(p, 0, 0.02)
      elseif name:match("weight$") then nn.init.ones_(p)
      else nn.init.zeros_(p) end
    end
  end)
end

function GPT:forward(idx, targets)
  local T = idx:size(2)
  if T > self.config.block_size then
    error(string.format("GPT: sequence of %d tokens, the block size is %d", T, self.config.block_size), 2)
  end
  local x = self.wte(idx) + self.wpe(ddp.arange(1, T + 1, { device = idx:device() }))
  for i = 1, #self.blocks do x = self.blocks[i](x) end
  local logits = self.head(self.ln_f(x))
  if targets == nil then return logits end
  return ddp.cross_entropy(logits:view(-1, self.config.vocab_size), targets:reshape(-1))
end

--- AdamW's parameter groups as nanoGPT makes them: weight decay on the
--- matrices (dim >= 2), none on biases and LayerNorm gains.
function GPT:param_groups(weight_decay)
  local decay, no_decay = {}, {}
  for _, p in ipairs(self:parameters()) do
    if p:dim() >= 2 then decay[#decay + 1] = p else no_decay[#no_decay + 1] = p end
  end
  return { { params = decay, weight_decay = weight_decay }, { params = no_decay, weight_decay = 0.0 } }
end

--- n new tokens after idx [B, T] (1-based byte ids + 1), sampled with
--- temperature and, when top_k > 0, from the top_k most likely only.
function GPT:generate(idx, n, temperature, top_k, generator)
  local V = self.config.vocab_size
  return ddp.no_grad(function()
    for _ = 1, n do
      local T = idx:size(2)
      local ctx = T > self.config.block_size and idx:narrow(2, T - self.config.block_size + 1, self.config.block_size)
        or idx
      local logits = self(ctx):select(2, -1) / temperature -- [B, V]
      if top_k and top_k > 0 and top_k < V then
        local v = logits:topk(top_k, 2)
        logits = logits:masked_fill(logits:lt(v:narrow(2, top_k, 1)), -math.huge)
      end
      local nxt = ddp.multinomial(logits:softmax(2), 1, { generator = generator })
      idx = ddp.cat({ idx, nxt }, 2)
    end
    return idx
  end)
end

return GPT
