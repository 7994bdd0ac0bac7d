"""PyTorch peer of examples/seq2seq/train.lua: the same model (the "Language Translation with nn.Transformer"
tutorial's: scaled token embeddings, sinusoidal positions, nn.Transformer, a linear generator), task (reverse
4-12 random digits), recipe and greedy exact-match evaluation, one process, for side-by-side runs:

  /usr/bin/python3 examples/seq2seq/torch_seq2seq.py epochs=4 lr=2e-3 dropout=0 [threads=1]

Prints one line per epoch: train loss, sequences/s and the share of test sequences reversed exactly. Tokens are
0-based here (pad 0, bos 1, eos 2, digits 3-12), ddplua's 1-based; the data come from torch's generator, so the
sequences differ from ddplua's, not their distribution."""
import math
import sys
import time

import torch
import torch.nn as nn

cfg = {"epochs": 10, "batch_size": 64, "lr": 2e-3, "d_model": 64, "nhead": 4, "layers": 2, "ffn": 128,
       "dropout": 0.0, "train_samples": 12000, "test_samples": 500, "seed": 1, "threads": 0}
for a in sys.argv[1:]:
    k, _, v = a.partition("=")
    if k not in cfg:
        sys.exit(f"unknown setting {k}")
    cfg[k] = type(cfg[k])(float(v)) if isinstance(cfg[k], float) else int(v)
if cfg["threads"] > 0:
    torch.set_num_threads(cfg["threads"])
PAD, BOS, EOS, DIGIT0, VOCAB, MIN_LEN, MAX_LEN = 0, 1, 2, 3, 13, 4, 12


def make_split(n, seed):
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(MIN_LEN, MAX_LEN + 1, (n,), generator=g)
    digits = torch.randint(0, 10, (n, MAX_LEN), generator=g)
    src = torch.full((n, MAX_LEN), PAD)
    tgt = torch.full((n, MAX_LEN + 2), PAD)
    for i in range(n):
        L = int(lens[i])
        src[i, :L] = digits[i, :L] + DIGIT0
        tgt[i, 0] = BOS
        tgt[i, 1:L + 1] = src[i, :L].flip(0)
        tgt[i, L + 1] = EOS
    return src, tgt


class PositionalEncoding(nn.Module):
    def __init__(self, d, p, max_len):
        super().__init__()
        pos = torch.arange(max_len).float().view(max_len, 1)
        div = torch.exp(torch.arange(0, d, 2).float() * (-math.log(10000) / d))
        pe = torch.zeros(max_len, d)
        pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * div), torch.cos(pos * div)
        self.register_buffer("pe", pe.unsqueeze(0))
        self.dropout = nn.Dropout(p)

    def forward(self, x):
        return self.dropout(x + self.pe[:, :x.size(1)])


class Seq2Seq(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.d = c["d_model"]
        self.src_tok, self.tgt_tok = nn.Embedding(VOCAB, self.d), nn.Embedding(VOCAB, self.d)
        self.positions = PositionalEncoding(self.d, c["dropout"], MAX_LEN + 2)
        self.transformer = nn.Transformer(self.d, c["nhead"], c["layers"], c["layers"], c["ffn"], c["dropout"],
                                          batch_first=True)
        self.generator = nn.Linear(self.d, VOCAB)

    def embed(self, tok, ids):
        return self.positions(tok(ids) * math.sqrt(self.d))

    def encode(self, src):
        return self.transformer.encoder(self.embed(self.src_tok, src), src_key_padding_mask=src == PAD)

    def decode(self, tgt_in, memory, src):
        mask = nn.Transformer.generate_square_subsequent_mask(tgt_in.size(1))
        return self.transformer.decoder(self.embed(self.tgt_tok, tgt_in), memory, tgt_mask=mask,
                                        tgt_key_padding_mask=tgt_in == PAD, memory_key_padding_mask=src == PAD)

    def forward(self, src, tgt_in):
        return self.generator(self.decode(tgt_in, self.encode(src), src))


torch.manual_seed(cfg["seed"])
model = Seq2Seq(cfg)
opt = torch.optim.Adam(model.parameters(), lr=cfg["lr"], betas=(0.9, 0.98), eps=1e-9)
crit = nn.CrossEntropyLoss(ignore_index=PAD)
total_steps = cfg["epochs"] * math.ceil(cfg["train_samples"] / cfg["batch_size"])
warmup = max(1, min(200, total_steps // 10))
sched = torch.optim.lr_scheduler.LambdaLR(
    opt, lambda step: min(1, (step + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * step / total_steps)))
train_src, train_tgt = make_split(cfg["train_samples"], cfg["seed"])
test_src, test_tgt = make_split(cfg["test_samples"], cfg["seed"] + 1000)
for epoch in range(1, cfg["epochs"] + 1):
    model.train()
    perm = torch.randperm(cfg["train_samples"])
    total, n, t0 = 0.0, 0, time.perf_counter()
    for b in range(0, cfg["train_samples"], cfg["batch_size"]):
        idx = perm[b:b + cfg["batch_size"]]
        src, tgt = train_src[idx], train_tgt[idx]
        opt.zero_grad()
        logits = model(src, tgt[:, :-1])
        loss = crit(logits.reshape(-1, VOCAB), tgt[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        sched.step()
        total, n = total + loss.item() * len(idx), n + len(idx)
    elapsed = time.perf_counter() - t0
    model.eval()
    with torch.no_grad():
        memory = model.encode(test_src)
        ys = torch.full((len(test_src), 1), BOS)
        for _ in range(MAX_LEN + 1):
            logits = model.generator(model.decode(ys, memory, test_src)[:, -1])
            ys = torch.cat([ys, logits.argmax(1, keepdim=True)], 1)
        ok = ((ys == test_tgt) | (test_tgt == PAD)).all(1).double().mean().item()
    print(f"epoch {epoch}: train loss {total / n:.4f}, {n / elapsed:.0f} sequences/s; test: {100 * ok:.1f}% "
          "reversed exactly", flush=True)
