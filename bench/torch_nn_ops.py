"""PyTorch peer of bench/nn_ops.lua: the same ops, shapes, thread count and
timing rule (median of the runs after one warm-up), in milliseconds.
Run with /usr/bin/python3 (Debian's python3-torch)."""
import sys
import time

import torch
import torch.nn.functional as F

torch.set_num_threads(1)
torch.manual_seed(0)
RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 20


def median_ms(fn):
    for _ in range(5):  # warm up, as bench/nn_ops.lua does
        fn()
    t = []
    for _ in range(RUNS):
        t0 = time.perf_counter()
        fn()
        t.append((time.perf_counter() - t0) * 1e3)
    t.sort()
    return t[(RUNS + 1) // 2 - 1]


def leaf(*shape):
    return torch.randn(*shape).requires_grad_()


x1, w1, b1 = leaf(64, 1, 28, 28), leaf(32, 1, 3, 3), leaf(32)
x2, w2, b2 = leaf(64, 32, 14, 14), leaf(64, 32, 3, 3), leaf(64)
xb, g, bb = leaf(64, 32, 28, 28), leaf(32), leaf(32)
rm, rv = torch.zeros(32), torch.ones(32)
xl, wl, bl = leaf(64, 3136), leaf(3136), leaf(3136)
ids = (torch.rand(64, 32) * 10000).long()
emb = leaf(10000, 128)

cases = [
    ("conv2d 1->32 3x3 pad 1, 28x28", lambda: F.conv2d(x1, w1, b1, 1, 1)),
    ("conv2d 32->64 3x3 pad 1, 14x14", lambda: F.conv2d(x2, w2, b2, 1, 1)),
    ("batch_norm train 32ch 28x28", lambda: F.batch_norm(xb, rm, rv, g, bb, True)),
    ("max_pool2d 2x2 32ch 28x28", lambda: F.max_pool2d(xb, 2)),
    ("avg_pool2d 2x2 32ch 28x28", lambda: F.avg_pool2d(xb, 2)),
    ("layer_norm 3136", lambda: F.layer_norm(xl, (3136,), wl, bl)),
    ("dropout p=0.5 64x3136", lambda: F.dropout(xl, 0.5)),
    ("embedding 10000x128, 64x32 ids", lambda: F.embedding(ids, emb)),
]


def fwd_only(f):
    with torch.no_grad():
        f()


print(f"{'op':34s} {'fwd ms':>10s} {'fwd+bwd ms':>14s}")
for name, f in cases:
    fwd = median_ms(lambda: fwd_only(f))
    both = median_ms(lambda: f().sum().backward())
    print(f"{name:34s} {fwd:10.3f} {both:14.3f}")
