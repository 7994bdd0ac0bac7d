-- pytorch/examples' word_language_model (RNNModel: Embedding, nn.LSTM, Linear
-- decoder, dropout; truncated BPTT with the hidden state carried over and
-- detached; clip_grad_norm_; plain SGD whose lr is divided by 4 when the
-- validation loss stops improving) on the fortunes corpus (examples/fortunes.lua),
-- word level: each line's whitespace-separated words plus <eos>, the
-- `vocab` most frequent words kept (the rest <unk>), 80/10/10 split.
--
--   ddplua examples/lstm_lm/train.lua                         # configs/lstm_lm.yaml's recipe
--   ddplua examples/lstm_lm/train.lua epochs=1 nhid=64 emsize=64 limit=20000
--   python3 examples/lstm_lm/torch_lm.py runs/lstm_lm/corpus.safetensors   # PyTorch on the same data
--
-- The tokenised corpus is written to <out>/corpus.safetensors (int64 ids of
-- train/valid/test) so the PyTorch script trains on exactly these tokens.
-- Under `ddplua --nproc N` every rank takes its share of the batch columns
-- (gradients averaged by DDP). Prints per epoch the validation loss and
-- perplexity, then the test perplexity.
local ddp = require "ddplua"
local nn, optim, dist = ddp.nn, ddp.optim, ddp.distributed
local here = (arg and arg[0] or "examples/lstm_lm/train.lua"):gsub("[^/]*$", "")
local fortunes = dofile(here .. "../fortunes.lua")

local cfg = ddp.config {
  model = "LSTM", -- LSTM | GRU | RNN_TANH | RNN_RELU
  emsize = 200,
  nhid = 200,
  nlayers = 2,
  lr = 20.0,
  clip = 0.25,
  epochs = 3,
  batch_size = 20,
  bptt = 35,
  dropout = 0.2,
  tied = false,
  seed = 1111,
  vocab = 10000,
  limit = 0, -- > 0: only the first `limit` words of the corpus (quick runs)
  log_interval = 200,
  out = "runs/lstm_lm",
}

dist.init_process_group()
local rank, world = dist.get_rank(), dist.get_world_size()
ddp.manual_seed(cfg.seed)

-- ---- the corpus, tokenised once (every rank computes the same) ----
local function tokenize()
  local text = fortunes.read()
  local lines, count, first = {}, {}, {}
  local n = 0
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    local words = {}
    for w in line:gmatch("%S+") do words[#words + 1] = w end
    words[#words + 1] = "<eos>"
    for _, w in ipairs(words) do
      n = n + 1
      if cfg.limit > 0 and n > cfg.limit then break end
      if not count[w] then count[w], first[w] = 0, n end
      count[w] = count[w] + 1
      lines[#lines + 1] = w
    end
    if cfg.limit > 0 and n > cfg.limit then break end
  end
  local words = {}
  for w in pairs(count) do words[#words + 1] = w end
  -- most frequent first, ties by first appearance: a deterministic vocabulary
  table.sort(words, function(a, b) return count[a] > count[b] or (count[a] == count[b] and first[a] < first[b]) end)
  local id, itos = { ["<unk>"] = 1 }, { "<unk>" }
  for _, w in ipairs(words) do
    if #itos >= cfg.vocab then break end
    if w ~= "<unk>" then itos[#itos + 1], id[w] = w, #itos + 1 end
  end
  local ids = {}
  for i, w in ipairs(lines) do ids[i] = id[w] or 1 end
  local all = ddp.tensor(ids)
  local N = all:size(1)
  local ntrain, nvalid = N * 8 // 10, N // 10
  return all:narrow(1, 1, ntrain), all:narrow(1, ntrain + 1, nvalid),
    all:narrow(1, ntrain + nvalid + 1, N - ntrain - nvalid), itos
end
local train_ids, valid_ids, test_ids, itos = tokenize()
local ntokens = #itos
ddp.core.mkdir(cfg.out)
if ddp.is_main() then
  ddp.save({ train = train_ids:contiguous(), valid = valid_ids:contiguous(), test = test_ids:contiguous() },
    cfg.out .. "/corpus.safetensors", { metadata = { vocab = tostring(ntokens) } })
end
ddp.print(string.format("%d / %d / %d tokens (train / valid / test), vocabulary %d, %d process(es)",
  train_ids:size(1), valid_ids:size(1), test_ids:size(1), ntokens, world))

-- [T / bsz, bsz] columns, as batchify; this rank's share of the columns
local function batchify(d, bsz, share)
  local nb = d:size(1) // bsz
  local cols = d:narrow(1, 1, nb * bsz):view(bsz, nb):t()
  if share and world > 1 then
    local per = bsz // world
    cols = cols:narrow(2, rank * per + 1, per)
  end
  return cols:contiguous()
end
local eval_bsz = 10
local train_data = batchify(train_ids, cfg.batch_size, true)
local val_data, test_data = batchify(valid_ids, eval_bsz), batchify(test_ids, eval_bsz)

-- ---- the model: model.py's RNNModel ----
local RNNModel = nn.Module:extend("RNNModel")
function RNNModel:__init()
  self.drop = nn.Dropout(cfg.dropout)
  self.encoder = nn.Embedding(ntokens, cfg.emsize)
  if cfg.model == "LSTM" or cfg.model == "GRU" then
    self.rnn = nn[cfg.model](cfg.emsize, cfg.nhid, cfg.nlayers, { dropout = cfg.dropout })
  else
    local nl = ({ RNN_TANH = "tanh", RNN_RELU = "relu" })[cfg.model]
    if not nl then error("model must be LSTM, GRU, RNN_TANH or RNN_RELU, got " .. cfg.model, 0) end
    self.rnn = nn.RNN(cfg.emsize, cfg.nhid, cfg.nlayers, { nonlinearity = nl, dropout = cfg.dropout })
  end
  self.decoder = nn.Linear(cfg.nhid, ntokens)
  if cfg.tied then
    if cfg.nhid ~= cfg.emsize then error("when using tied, nhid must equal emsize", 0) end
    self.decoder.weight = self.encoder.weight
  end
  ddp.no_grad(function() -- init_weights
    nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
    nn.init.zeros_(self.decoder.bias)
    nn.init.uniform_(self.decoder.weight, -0.1, 0.1)
  end)
end
function RNNModel:forward(input, hidden)
  local emb = self.drop(self.encoder(input))
  local output, h = self.rnn(emb, hidden)
  return self.decoder(self.drop(output)):view(-1, ntokens), h
end
function RNNModel:init_hidden(bsz)
  local z = function() return ddp.zeros(cfg.nlayers, bsz, cfg.nhid) end
  if cfg.model == "LSTM" then return { z(), z() } end
  return z()
end

local function repackage(h)
  if ddp.is_tensor(h) then return h:detach() end
  return { h[1]:detach(), h[2]:detach() }
end

local net = RNNModel()
local model = dist.DistributedDataParallel(net) -- alone it keeps plain gradients: nothing to average
local lr = cfg.lr
local opt = optim.SGD(model:parameters(), { lr = lr }) -- p -= lr * g, the example's manual update

local function get_batch(source, i) -- i 1-based
  local len = math.min(cfg.bptt, source:size(1) - i)
  return source:narrow(1, i, len), source:narrow(1, i + 1, len):reshape(-1)
end

local function evaluate(source)
  model:eval()
  local total, hidden = 0, net:init_hidden(eval_bsz)
  ddp.no_grad(function()
    for i = 1, source:size(1) - 1, cfg.bptt do
      local x, y = get_batch(source, i)
      local out
      out, hidden = net(x, hidden)
      total = total + x:size(1) * ddp.cross_entropy(out, y):item()
    end
  end)
  return total / (source:size(1) - 1)
end

local best
local t_all, tokens_all = ddp.clock(), 0
for epoch = 1, cfg.epochs do
  model:train()
  local t0, total, hidden = ddp.clock(), 0, net:init_hidden(train_data:size(2))
  local batch = 0
  for i = 1, train_data:size(1) - 1, cfg.bptt do
    local x, y = get_batch(train_data, i)
    opt:zero_grad()
    hidden = repackage(hidden)
    local out
    out, hidden = model(x, hidden)
    local loss = ddp.cross_entropy(out, y) -- = NLLLoss of log_softmax
    loss:backward()
    nn.utils.clip_grad_norm_(model:parameters(), cfg.clip)
    opt:step()
    total, batch, tokens_all = total + loss:item(), batch + 1, tokens_all + y:size(1) * world
    if batch % cfg.log_interval == 0 then
      local cur = total / cfg.log_interval
      ddp.print(string.format("| epoch %3d | %5d/%5d batches | lr %.2f | ms/batch %6.1f | loss %5.2f | ppl %8.2f",
        epoch, batch, train_data:size(1) // cfg.bptt, lr, (ddp.clock() - t0) * 1000 / cfg.log_interval, cur,
        math.exp(cur)))
      total, t0 = 0, ddp.clock()
    end
  end
  local val = evaluate(val_data)
  ddp.print(string.format("| end of epoch %3d | valid loss %5.2f | valid ppl %8.2f", epoch, val, math.exp(val)))
  if not best or val < best then
    best = val
    if ddp.is_main() then ddp.save(net:state_dict(), cfg.out .. "/model.safetensors") end
  else
    lr = lr / 4
    for _, g in ipairs(opt.param_groups) do g.lr = lr end
  end
end
local secs = ddp.clock() - t_all
local test = evaluate(test_data)
ddp.print(string.format("| end of training | test loss %5.2f | test ppl %8.2f | %.0f tokens/s", test, math.exp(test),
  tokens_all / secs))
dist.destroy_process_group()
