"""PyTorch peer of bench/nn_ops.lua: the same cases (names, shapes, dtypes,
thread count) and timing rule (median of the runs after 3 warm-up calls), in
milliseconds, printed in the same line format:
`case=<name>|fwd_ms=<x>|both_ms=<y>|bytes=<n>|memcpy_gbs=0`
(bench/nn_ops.lua measures memcpy; its figure stands for both).
Run with /usr/bin/python3 (Debian's python3-torch):

  /usr/bin/python3 bench/torch_nn_ops.py [runs=20] [threads=1] [only=substring]
"""
import os
import sys
import time

cfg = {"runs": 20, "threads": 1, "only": ""}
for a in sys.argv[1:]:
    k, _, v = a.partition("=")
    if k not in cfg:
        sys.exit(f"usage: torch_nn_ops.py [runs=N] [threads=N] [only=text], got {a}")
    cfg[k] = int(v) if isinstance(cfg[k], int) else v
# Debian's torch calls OpenBLAS-pthread for its float32 GEMMs, and
# torch.set_num_threads does not reach it: without this a "1 thread" GEMM
# row runs on every core (OpenBLAS reads the variable when it loads).
os.environ["OPENBLAS_NUM_THREADS"] = str(cfg["threads"])

import torch  # noqa: E402 (after OPENBLAS_NUM_THREADS)
import torch.nn.functional as F  # noqa: E402

torch.set_num_threads(cfg["threads"])
torch.manual_seed(0)
MB = 1024 * 1024


def median_ms(fn):
    for _ in range(3):
        fn()
    t = []
    for _ in range(cfg["runs"]):
        t0 = time.perf_counter()
        fn()
        t.append((time.perf_counter() - t0) * 1e3)
    t.sort()
    return t[(cfg["runs"] + 1) // 2 - 1]


def leaf(*shape):
    return torch.randn(*shape).requires_grad_()


cases = []


def case(name, fwd, bwd=True, nbytes=0):
    cases.append((name, fwd, bwd, nbytes))


# GEMMs
x, w, b = leaf(64, 784), leaf(1024, 784), leaf(1024)
case("linear 64x784 -> 1024", lambda: F.linear(x, w, b))
h, w2, b2 = leaf(64, 1024), leaf(1024, 1024), leaf(1024)
case("linear 64x1024 -> 1024", lambda: F.linear(h, w2, b2))
t, wq, bq = leaf(2048, 128), leaf(384, 128), leaf(384)
case("linear 2048x128 -> 384 (GPT qkv)", lambda: F.linear(t, wq, bq))
a1, c1 = leaf(1024, 1024), leaf(1024, 1024)
case("matmul 1024^3", lambda: a1 @ c1)


def bf16_matmul():
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return a1 @ c1


case("matmul 1024^3 autocast bf16", bf16_matmul)

# convolutions, norms, pooling at the Fashion-MNIST CNN's shapes
x1, w1, b1 = leaf(64, 1, 28, 28), leaf(32, 1, 3, 3), leaf(32)
x2, w2c, b2c = leaf(64, 32, 14, 14), leaf(64, 32, 3, 3), leaf(64)
case("conv2d 1->32 3x3 pad 1, 28x28", lambda: F.conv2d(x1, w1, b1, 1, 1))
case("conv2d 32->64 3x3 pad 1, 14x14", lambda: F.conv2d(x2, w2c, b2c, 1, 1))
xb, g, bb = leaf(64, 32, 28, 28), leaf(32), leaf(32)
rm, rv = torch.zeros(32), torch.ones(32)
nb = 64 * 32 * 28 * 28 * 4
case("batch_norm train 32ch 28x28", lambda: F.batch_norm(xb, rm, rv, g, bb, True), nbytes=3 * nb)
case("max_pool2d 2x2 32ch 28x28", lambda: F.max_pool2d(xb, 2), nbytes=nb + nb // 4)
block = torch.nn.Sequential(torch.nn.BatchNorm2d(32), torch.nn.ReLU(), torch.nn.MaxPool2d(2))
case("batch_norm+relu+max_pool2d 32ch 28x28", lambda: block(xb), nbytes=2 * nb + nb // 4)
case("avg_pool2d 2x2 32ch 28x28", lambda: F.avg_pool2d(xb, 2), nbytes=nb + nb // 4)
zg, wg2 = leaf(64, 128, 7, 7), leaf(128, 64, 4, 4)
case("conv_transpose2d 128->64 4x4 s2 pad 1, 7x7 (DCGAN)", lambda: F.conv_transpose2d(zg, wg2, None, 2, 1))
xd, wd = leaf(64, 32, 14, 14), leaf(64, 32, 4, 4)
case("conv2d 32->64 4x4 s2 pad 1, 14x14 (DCGAN)", lambda: F.conv2d(xd, wd, None, 2, 1))
xh = leaf(64, 512, 7, 7)
case("adaptive_avg_pool2d 1, 512ch 7x7 (ResNet head)", lambda: F.adaptive_avg_pool2d(xh, 1), nbytes=64 * 512 * 49 * 4)
xv, wv = leaf(8, 16, 8, 28, 28), leaf(16, 16, 3, 3, 3)
case("conv3d 16->16 3x3x3 pad 1, 8x28x28 (R3D)", lambda: F.conv3d(xv, wv, None, 1, 1))
case("max_pool3d (1, 2, 2) 16ch 8x28x28", lambda: F.max_pool3d(xv, (1, 2, 2)), nbytes=8 * 16 * 8 * 28 * 28 * 5)
xl, wl, bl = leaf(64, 3136), leaf(3136), leaf(3136)
case("layer_norm 64x3136", lambda: F.layer_norm(xl, (3136,), wl, bl), nbytes=2 * 64 * 3136 * 4)
xg, wg, bg = leaf(2048, 128), leaf(128), leaf(128)
case("layer_norm 2048x128 (GPT)", lambda: F.layer_norm(xg, (128,), wg, bg), nbytes=2 * 2048 * 128 * 4)
case("dropout p=0.5 64x3136", lambda: F.dropout(xl, 0.5), nbytes=2 * 64 * 3136 * 4)
ids, emb = (torch.rand(64, 32) * 10000).long(), leaf(10000, 128)
case("embedding 10000x128, 64x32 ids", lambda: F.embedding(ids, emb), nbytes=2 * 64 * 32 * 128 * 4)

# softmax family and losses
s = leaf(1024, 1024)
case("softmax 1024x1024", lambda: F.softmax(s, 1), nbytes=2 * 4 * MB)
lsm = leaf(700, 13939)
case("log_softmax 700x13939", lambda: F.log_softmax(lsm, 1), nbytes=2 * 700 * 13939 * 4)
lg, tg = leaf(2048, 256), (torch.rand(2048) * 256).long()
case("cross_entropy 2048x256 (GPT)", lambda: F.cross_entropy(lg, tg), nbytes=2048 * 256 * 4)
lm, tm = leaf(64, 10), (torch.rand(64) * 10).long()
case("cross_entropy 64x10 (MLP)", lambda: F.cross_entropy(lm, tm))
lc, tc = leaf(100, 16, 29), (torch.rand(16, 30) * 28).long() + 1
case("ctc_loss 100x16x29, 30 labels (speech)",
     lambda: F.ctc_loss(F.log_softmax(lc, 2), tc, torch.full((16,), 100), torch.full((16,), 30)))
pb, tb = torch.rand(64, 784).requires_grad_(), torch.rand(64, 784)
case("binary_cross_entropy 64x784 (VAE)", lambda: F.binary_cross_entropy(pb, tb, reduction="sum"),
     nbytes=2 * 64 * 784 * 4)

# elementwise: activations, broadcasting, reductions, copies
xe = leaf(1024, 1024)
for name in ("relu", "gelu", "tanh", "sigmoid"):
    fn = getattr(torch, name) if name in ("tanh", "sigmoid") else getattr(F, name)
    case(f"{name} 1024x1024", (lambda fn=fn: fn(xe)), nbytes=2 * 4 * MB)
case("leaky_relu 0.2 1024x1024 (DCGAN)", lambda: F.leaky_relu(xe, 0.2), nbytes=2 * 4 * MB)
aa, bv = leaf(4096, 1024), leaf(1024)
case("add broadcast 4096x1024 + 1024", lambda: aa + bv, nbytes=2 * 16 * MB)
m1, m2 = leaf(1024, 1024), leaf(1024, 1024)
case("mul 1024x1024 * 1024x1024", lambda: m1 * m2, nbytes=3 * 4 * MB)
case("sum 4096x1024", lambda: aa.sum(), nbytes=16 * MB)
case("sum dim 2 of 4096x1024", lambda: aa.sum(1), nbytes=16 * MB)
case("sum dim 1 of 4096x1024", lambda: aa.sum(0), nbytes=16 * MB)
case("var 4096x1024", lambda: aa.var(), nbytes=16 * MB)
case("std dim 2 of 4096x1024", lambda: aa.std(1), nbytes=16 * MB)
case("var dim 1 of 4096x1024", lambda: aa.var(0), nbytes=16 * MB)
big = torch.randn(2048, 2048)
case("transpose copy 2048x2048", lambda: big.t().contiguous(), bwd=False, nbytes=2 * 16 * MB)
case("clone 2048x2048", lambda: big.clone(), bwd=False, nbytes=2 * 16 * MB)


def opt_case(name, make, arrays):
    p = torch.randn(1 << 20).requires_grad_()
    p.grad = torch.randn(1 << 20) * 1e-3
    opt = make([p])
    case(name, opt.step, bwd=False, nbytes=arrays * 4 * MB)


# PyTorch 1.13's default implementation (the per-parameter loop; foreach=None picks it on CPU)
opt_case("SGD momentum step, 1M params", lambda ps: torch.optim.SGD(ps, lr=0.01, momentum=0.9), 5)
opt_case("AdamW step, 1M params", lambda ps: torch.optim.AdamW(ps, lr=1e-3), 7)

for name, fwd, bwd, nbytes in cases:
    if cfg["only"] not in name:
        continue

    def fwd_only():
        with torch.no_grad():
            fwd()

    f = median_ms(fwd_only)
    both = "-"
    if bwd:
        both = f"{median_ms(lambda: fwd().sum().backward()):.4f}"
    print(f"case={name}|fwd_ms={f:.4f}|both_ms={both}|bytes={nbytes}|memcpy_gbs=0", flush=True)
