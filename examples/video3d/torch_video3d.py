# The PyTorch side of examples/video3d/train.lua: the same R3D (bench/torch_conv3d.py's network, one input channel),
# the same moving Fashion-MNIST clips made the same way (8 frames of a 40 x 40 canvas, a pixel a frame in one of 8
# directions), SGD lr 0.05 momentum 0.9 weight decay 5e-4 with the cosine schedule, batch 32, one process; prints
# each epoch's train loss, clips/s and test accuracy in the same form.
#   /usr/bin/python3 examples/video3d/torch_video3d.py [epochs] [train_samples] [test_samples] [threads]
import math, os, sys, time
import torch
import torch.nn.functional as F

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "bench"))
from torch_fashion_mnist import load  # noqa: E402 (the IDX files as uint8 images and int64 labels)
from torch_conv3d import R3D  # noqa: E402 (the network of bench/conv3d.lua's peer)

args = sys.argv[1:]
epochs = int(args[0]) if len(args) > 0 else 2
train_n = int(args[1]) if len(args) > 1 else 10000
test_n = int(args[2]) if len(args) > 2 else 2000
threads = int(args[3]) if len(args) > 3 else 1


torch.set_num_threads(threads)
torch.manual_seed(1)
T, SIZE = 8, 28 + 8 + 4
DIRS = [(-1, -1), (-1, 0), (-1, 1), (0, -1), (0, 1), (1, -1), (1, 0), (1, 1)]


def clips(images, g):
    B = images.shape[0]
    img = (images.float().view(B, 28, 28) / 255.0 - 0.2860) / 0.3530
    out = torch.full((B, 1, T, SIZE, SIZE), -0.2860 / 0.3530)
    d = torch.randint(0, len(DIRS), (B,), generator=g).tolist()
    room = SIZE - 28 - (T - 1)
    jitter = torch.randint(0, room + 1, (B, 2), generator=g).tolist()
    for i in range(B):
        dy, dx = DIRS[d[i]]
        y0 = jitter[i][0] + (T - 1 if dy < 0 else 0)
        x0 = jitter[i][1] + (T - 1 if dx < 0 else 0)
        for t in range(T):
            out[i, 0, t, y0 + t * dy:y0 + t * dy + 28, x0 + t * dx:x0 + t * dx + 28] = img[i]
    return out


xtr, ytr = load("train")
xtr, ytr = xtr[:train_n], ytr[:train_n]
xte, yte = load("t10k")
xte, yte = xte[:test_n], yte[:test_n]
model = R3D(10, 16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
steps = epochs * math.ceil(len(ytr) / 32)
print(f"R3D on moving Fashion-MNIST clips (PyTorch {torch.__version__}): {len(ytr)} train / {len(yte)} test clips, "
      f"batch 32, {threads} thread(s)")
g, step = torch.Generator().manual_seed(1000), 0
for epoch in range(1, epochs + 1):
    model.train()
    perm = torch.randperm(len(ytr))
    t0, total, n = time.perf_counter(), 0.0, 0
    for i in range(0, len(perm), 32):
        b = perm[i:i + 32]
        x, y = clips(xtr[b], g), ytr[b]
        for group in opt.param_groups:
            group["lr"] = 0.05 * 0.5 * (1 + math.cos(math.pi * step / steps))
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        total, n = total + loss.item() * len(b), n + len(b)
    seconds = time.perf_counter() - t0
    model.eval()
    tg, correct = torch.Generator().manual_seed(7), 0
    with torch.no_grad():
        for i in range(0, len(yte), 32):
            out = model(clips(xte[i:i + 32], tg))
            correct += (out.argmax(1) == yte[i:i + 32]).sum().item()
    print(f"Epoch {epoch}: train loss {total / n:.4f}, {n / seconds:.0f} clips/s | test accuracy "
          f"{correct}/{len(yte)} ({100 * correct / len(yte):.2f}%)")
