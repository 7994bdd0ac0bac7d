# The PyTorch side of examples/vit/train.lua: the same ViT (patches of 4 x 4 by a strided Conv2d, a class token,
# learned position embeddings, pre-norm nn.TransformerEncoder layers with GELU, batch_first, a final LayerNorm, the
# head on the class token), AdamW lr 1e-3 with weight decay 0.05 on the matrices, 100 warm-up steps then cosine,
# label smoothing 0.1, batch 128, one process; prints each epoch's train loss, images/s and test accuracy in the
# same form.
#   /usr/bin/python3 examples/vit/torch_vit.py [epochs] [train_samples] [test_samples] [threads]
import math, os, sys, time
import torch
import torch.nn as nn
import torch.nn.functional as F

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "bench"))
from torch_fashion_mnist import load  # noqa: E402 (the IDX files as uint8 images and int64 labels)

args = sys.argv[1:]
epochs = int(args[0]) if len(args) > 0 else 2
train_n = int(args[1]) if len(args) > 1 else 20000
test_n = int(args[2]) if len(args) > 2 else 10000
threads = int(args[3]) if len(args) > 3 else 1
DIM, DEPTH, HEADS, MLP, PATCH, BATCH, LR, WD, WARMUP = 64, 4, 4, 128, 4, 128, 1e-3, 0.05, 100


class ViT(nn.Module):
    def __init__(self):
        super().__init__()
        n = (28 // PATCH) ** 2
        self.patch_embed = nn.Conv2d(1, DIM, PATCH, stride=PATCH)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, DIM))
        self.pos_embed = nn.Parameter(torch.randn(1, n + 1, DIM) * 0.02)
        layer = nn.TransformerEncoderLayer(DIM, HEADS, dim_feedforward=MLP, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, DEPTH, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, 10)

    def forward(self, x):
        t = self.patch_embed(x).flatten(2).transpose(1, 2)
        t = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), t], 1) + self.pos_embed
        return self.head(self.norm(self.encoder(t)[:, 0]))


torch.set_num_threads(threads)
torch.manual_seed(1)
xtr, ytr = load("train")
xtr, ytr = xtr[:train_n], ytr[:train_n]
xte, yte = load("t10k")
xte, yte = xte[:test_n], yte[:test_n]
model = ViT()
decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "_token" not in n and "pos_embed" not in n]
no_decay = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "_token" not in n and "pos_embed" not in n)]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": no_decay, "weight_decay": 0.0}], lr=LR)
steps = epochs * math.ceil(len(ytr) / BATCH)


def lr_at(s):
    if s < WARMUP:
        return LR * (s + 1) / WARMUP
    return LR * 0.5 * (1 + math.cos(math.pi * (s - WARMUP) / max(1, steps - WARMUP)))


def images(x):
    return (x.float() / 255.0 - 0.2860) / 0.3530


print(f"ViT (dim {DIM}, depth {DEPTH}, heads {HEADS}, patch {PATCH}) on Fashion-MNIST (PyTorch {torch.__version__}): "
      f"{len(ytr)} train / {len(yte)} test images, batch {BATCH}, {threads} thread(s)")
step = 0
for epoch in range(1, epochs + 1):
    model.train()
    perm = torch.randperm(len(ytr))
    t0, total, n = time.perf_counter(), 0.0, 0
    for i in range(0, len(perm), BATCH):
        b = perm[i:i + BATCH]
        x, y = images(xtr[b]), ytr[b]
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        total, n = total + loss.item() * len(b), n + len(b)
    seconds = time.perf_counter() - t0
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(yte), BATCH):
            correct += (model(images(xte[i:i + BATCH])).argmax(1) == yte[i:i + BATCH]).sum().item()
    print(f"Epoch {epoch}: train loss {total / n:.4f}, {n / seconds:.0f} images/s | test accuracy "
          f"{correct}/{len(yte)} ({100 * correct / len(yte):.2f}%)")
