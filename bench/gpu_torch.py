"""PyTorch's figures for bench/gpu.lua, on the same GPU in the same run: the
MLP training step bench/gpu.lua times through ddplua (784-1024-1024-10,
ReLU, SGD with momentum 0.9, cross-entropy, batch 256, random inputs), in
float32 with the batch on the GPU, float32 with the batch copied from the
host every step, and bfloat16 autocast; and torch.matmul's TFLOP/s on the
GEMM shapes bench/gpu.lua uses (random operands). One key=value line per
figure, as bench/gpu_raw.c prints them.

  python3 bench/gpu_torch.py mlp MODE STEPS      MODE: f32 | f32_host | bf16
  python3 bench/gpu_torch.py gemm M N K DTYPE ITERS   DTYPE: float32 | tf32 | bfloat16 | float16
  python3 bench/gpu_torch.py jobs "gemm 4096 4096 4096 bfloat16 30" "mlp bf16 400" ...
      (several in one process: PyTorch is imported once)
  python3 bench/gpu_torch.py mlp f32 5 --device cpu   (a smoke test where there is no GPU)
"""
import sys
import time

import torch


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def mlp(mode, steps, dev):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(784, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
        torch.nn.Linear(1024, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    batch = 256
    xh, yh = torch.randn(batch, 784), torch.randint(0, 10, (batch,))
    if dev.type == "cuda":
        xh, yh = xh.pin_memory(), yh.pin_memory()
    xd, yd = xh.to(dev), yh.to(dev)

    def step():
        x, y = (xh.to(dev, non_blocking=True), yh.to(dev, non_blocking=True)) if mode == "f32_host" else (xd, yd)
        opt.zero_grad(set_to_none=True)
        if mode == "bf16":
            with torch.autocast(device_type=dev.type, dtype=torch.bfloat16):
                loss = loss_fn(model(x), y)
        else:
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    for _ in range(10):
        step()
    sync(dev)
    t0 = time.perf_counter()
    for _ in range(steps):
        loss = step()
    sync(dev)
    s = time.perf_counter() - t0
    if not torch.isfinite(loss).item():
        print(f"mode=mlp variant={mode} error=non-finite-loss")
        return 1
    print(f"mode=mlp variant={mode} steps={steps} seconds={s:.6e} samples_per_s={batch * steps / s:.1f} "
          f"torch={torch.__version__}")
    return 0


def gemm(m, n, k, dtype, iters, dev):
    torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    dt = {"float32": torch.float32, "tf32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    g = torch.Generator(device=dev).manual_seed(1)
    a = torch.randn(m, k, device=dev, generator=g).to(dt)
    b = torch.randn(k, n, device=dev, generator=g).to(dt)
    for _ in range(3):
        c = a @ b
    sync(dev)
    t0 = time.perf_counter()
    for _ in range(iters):
        c = a @ b
    sync(dev)
    s = (time.perf_counter() - t0) / iters
    # sampled rows against float64
    ref = a[:8].double() @ b.double()
    err = ((c[:8].double() - ref).abs().max() / ref.abs().max()).item()
    print(f"mode=gemm dtype={dtype} m={m} n={n} k={k} seconds={s:.6e} tflops={2.0 * m * n * k / s / 1e12:.2f} "
          f"max_rel_err={err:.3e}")
    return 0


def main(argv):
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if "--device" in argv:
        i = argv.index("--device")
        dev = torch.device(argv[i + 1])
        argv = argv[:i] + argv[i + 2:]
    jobs = [a.split() for a in argv[1:]] if argv[:1] == ["jobs"] else [argv]
    rc = 0
    for job in jobs:
        try:
            if len(job) >= 3 and job[0] == "mlp":
                rc |= mlp(job[1], int(job[2]), dev)
            elif len(job) >= 6 and job[0] == "gemm":
                rc |= gemm(int(job[1]), int(job[2]), int(job[3]), job[4], int(job[5]), dev)
            else:
                print(__doc__, file=sys.stderr)
                return 2
        except Exception as e:  # one failed figure must not hide the others
            print(f"mode={job[0]} job={'_'.join(job)} error={type(e).__name__}: {e}".replace("\n", " "))
            rc = 1
        sys.stdout.flush()
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
