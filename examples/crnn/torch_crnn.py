# The PyTorch side of examples/crnn/train.lua: the same CRNN (three Conv2d + BatchNorm2d + ReLU + max-pool blocks, a
# bidirectional LSTM, a Linear), the same strips (3 to 6 Fashion-MNIST images at random gaps in 28 x 168, each strip
# drawn from its own seeded generator), nn.CTCLoss(blank=0, zero_infinity=True), Adam 2e-3, clip_grad_norm_ 5,
# batch 32, one process; prints each epoch's train loss, strips/s and test sequence accuracy in the same form.
#   /usr/bin/python3 examples/crnn/torch_crnn.py [epochs] [train_samples] [test_samples] [threads]
import os, sys, time
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from torch_fashion_mnist import load  # noqa: E402 (the IDX files as uint8 images and int64 labels)

args = sys.argv[1:]
epochs = int(args[0]) if len(args) > 0 else 3
train_n = int(args[1]) if len(args) > 1 else 20000
test_n = int(args[2]) if len(args) > 2 else 2000
torch.set_num_threads(int(args[3]) if len(args) > 3 else 1)
torch.manual_seed(1)
H, W, MIN_LEN, MAX_LEN = 28, 168, 3, 6


class CRNN(nn.Module):
    def __init__(self, hidden=64):
        super().__init__()
        def block(cin, cout, pool):
            return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(), nn.MaxPool2d(pool)]
        self.cnn = nn.Sequential(*block(1, 32, 2), *block(32, 64, 2), *block(64, 128, (7, 1)))
        self.rnn = nn.LSTM(128, hidden, bidirectional=True)
        self.fc = nn.Linear(2 * hidden, 11)

    def forward(self, x):
        f = self.cnn(x).squeeze(2).permute(2, 0, 1)  # [42, N, 128]
        out, _ = self.rnn(f)
        return F.log_softmax(self.fc(out), 2)


def strip(images, labels, i, seed):
    g = torch.Generator().manual_seed(seed * 1000003 + i)
    n = int(torch.randint(MIN_LEN, MAX_LEN + 1, (1,), generator=g))
    picks = torch.randint(0, len(labels), (n,), generator=g)
    gaps = torch.randint(1, 101, (n + 1,), generator=g).double()
    gaps = (gaps / gaps.sum() * (W - 28 * n)).floor().long().tolist()
    img = torch.zeros(1, H, W)
    x0 = gaps[0]
    for k in range(n):
        img[:, :, x0:x0 + 28] = images[picks[k]].float() / 255
        x0 += 28 + gaps[k + 1]
    return img, (labels[picks] + 1).tolist()  # classes 0..9 -> 1..10 (0 is the blank)


def batch(images, labels, ids, seed):
    imgs, flat, lens = [], [], []
    for i in ids:
        img, lab = strip(images, labels, i, seed)
        imgs.append(img), flat.extend(lab), lens.append(len(lab))
    return (torch.stack(imgs) - 0.2860) / 0.3530, torch.tensor(flat), torch.tensor(lens)


xtr, ytr = load("train")
xte, yte = load("t10k")
model = CRNN()
opt = torch.optim.Adam(model.parameters(), lr=2e-3)
ctc = nn.CTCLoss(blank=0, zero_infinity=True)
print(f"CRNN + CTC (PyTorch {torch.__version__}): {train_n} train / {test_n} test strips, batch 32")
for epoch in range(1, epochs + 1):
    model.train()
    perm = torch.randperm(train_n)
    t0, total, n = time.perf_counter(), 0.0, 0
    for i in range(0, train_n, 32):
        ids = perm[i:i + 32].tolist()
        x, tg, tl = batch(xtr, ytr, ids, 1)
        lp = model(x)
        loss = ctc(lp, tg, torch.full((len(ids),), lp.shape[0]), tl)
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 5)
        opt.step()
        total, n = total + loss.item() * len(ids), n + len(ids)
    seconds = time.perf_counter() - t0
    model.eval()
    right = 0
    with torch.no_grad():
        for i in range(0, test_n, 32):
            ids = list(range(i, min(i + 32, test_n)))
            x, tg, tl = batch(xte, yte, ids, 8)
            best = model(x).argmax(2).t().tolist()
            at = 0
            for k, length in enumerate(tl.tolist()):
                seq, prev = [], None
                for c in best[k]:
                    if c != prev and c != 0:
                        seq.append(c)
                    prev = c
                right += seq == tg[at:at + length].tolist()
                at += length
    print(f"Epoch {epoch}: train loss {total / n:.4f}, {n / seconds:.0f} strips/s | test sequence accuracy "
          f"{right}/{test_n} ({100 * right / test_n:.2f}%)")
