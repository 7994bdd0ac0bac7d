# The PyTorch side of examples/unet/train.lua: the same U-Net (milesial/Pytorch-UNet's DoubleConv, Down, Up with
# ConvTranspose2d and OutConv; width 16), the same scenes made the same way (56 x 56 canvases, two Fashion-MNIST
# garments at random places, the second drawn over the first; each pixel labelled background or its garment's
# class), per-pixel cross entropy, Adam lr 2e-3 with the cosine schedule, batch 32, one process; prints each
# epoch's train loss, scenes/s, test pixel accuracy and mean IoU in the same form.
#   /usr/bin/python3 examples/unet/torch_unet.py [epochs] [train_samples] [test_samples] [threads]
import math, os, sys, time
import torch
import torch.nn as nn
import torch.nn.functional as F

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "bench"))
from torch_fashion_mnist import load  # noqa: E402 (the IDX files as uint8 images and int64 labels)

args = sys.argv[1:]
epochs = int(args[0]) if len(args) > 0 else 2
train_n = int(args[1]) if len(args) > 1 else 10000
test_n = int(args[2]) if len(args) > 2 else 2000
threads = int(args[3]) if len(args) > 3 else 1
CLASSES, S, THR, BATCH, LR, W = 11, 56, 0.25, 32, 2e-3, 16


def double_conv(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
                         nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class Up(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.up = nn.ConvTranspose2d(cin, cin // 2, 2, stride=2)
        self.conv = double_conv(cin, cout)

    def forward(self, x, skip):
        return self.conv(torch.cat([skip, self.up(x)], 1))


class UNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.inc = double_conv(1, W)
        self.down1 = nn.Sequential(nn.MaxPool2d(2), double_conv(W, 2 * W))
        self.down2 = nn.Sequential(nn.MaxPool2d(2), double_conv(2 * W, 4 * W))
        self.down3 = nn.Sequential(nn.MaxPool2d(2), double_conv(4 * W, 8 * W))
        self.up1, self.up2, self.up3 = Up(8 * W, 4 * W), Up(4 * W, 2 * W), Up(2 * W, W)
        self.outc = nn.Conv2d(W, CLASSES, 1)

    def forward(self, x):
        x1 = self.inc(x)
        x2 = self.down1(x1)
        x3 = self.down2(x2)
        x4 = self.down3(x3)
        return self.outc(self.up3(self.up2(self.up1(x4, x3), x2), x1))


def scenes(images, labels, g):
    B = images.shape[0]
    img = images.float().view(B, 28, 28) / 255.0
    x, t = torch.zeros(B, 1, S, S), torch.zeros(B, S, S, dtype=torch.int64)
    pos = torch.randint(0, S - 28 + 1, (B, 4), generator=g).tolist()
    other = torch.randperm(B, generator=g).tolist()
    for i in range(B):
        for k, j in enumerate((i, other[i])):
            y0, x0 = pos[i][2 * k], pos[i][2 * k + 1]
            m = img[j] > THR
            box = x[i, 0, y0:y0 + 28, x0:x0 + 28]
            box.copy_(torch.where(m, img[j], box))
            t[i, y0:y0 + 28, x0:x0 + 28].masked_fill_(m, int(labels[j]) + 1)
    return (x - 0.1) / 0.3, t


torch.set_num_threads(threads)
torch.manual_seed(1)
xtr, ytr = load("train")
xtr, ytr = xtr[:train_n], ytr[:train_n]
xte, yte = load("t10k")
xte, yte = xte[:test_n], yte[:test_n]
model = UNet()
opt = torch.optim.Adam(model.parameters(), lr=LR)
steps = epochs * math.ceil(len(ytr) / BATCH)
print(f"U-Net (width {W}) on scenes of two Fashion-MNIST garments (PyTorch {torch.__version__}): {len(ytr)} train / "
      f"{len(yte)} test scenes, batch {BATCH}, {threads} thread(s)")
g, step = torch.Generator().manual_seed(1000), 0
for epoch in range(1, epochs + 1):
    model.train()
    perm = torch.randperm(len(ytr))
    t0, total, n = time.perf_counter(), 0.0, 0
    for i in range(0, len(perm), BATCH):
        b = perm[i:i + BATCH]
        x, y = scenes(xtr[b], ytr[b], g)
        for group in opt.param_groups:
            group["lr"] = LR * 0.5 * (1 + math.cos(math.pi * step / steps))
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        total, n = total + loss.item() * len(b), n + len(b)
    seconds = time.perf_counter() - t0
    model.eval()
    tg, conf = torch.Generator().manual_seed(7), torch.zeros(CLASSES * CLASSES, dtype=torch.int64)
    with torch.no_grad():
        for i in range(0, len(yte), BATCH):
            x, t = scenes(xte[i:i + BATCH], yte[i:i + BATCH], tg)
            p = model(x).argmax(1)
            conf += torch.bincount((t * CLASSES + p).flatten(), minlength=CLASSES * CLASSES)
    c = conf.view(CLASSES, CLASSES).double()
    hits = c.diagonal()
    union = c.sum(1) + c.sum(0) - hits
    miou = (hits / union.clamp(min=1))[union > 0].mean().item()
    print(f"Epoch {epoch}: train loss {total / n:.4f}, {n / seconds:.0f} scenes/s | test pixel accuracy "
          f"{100 * hits.sum().item() / c.sum().item():.2f}%, mean IoU {100 * miou:.2f}% ({int(c.sum().item()) // (S * S)} scenes)")
