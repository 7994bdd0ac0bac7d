"""PyTorch peer of examples/fashion_mnist/train.lua: the same recipe, so the
bench's MLP and CNN rows compare whole training runs as a user runs them.

  /usr/bin/python3 bench/torch_fashion_mnist.py [model=mlp|cnn] [nproc=1] [epochs=5] [train_samples=0]
                                                [batch_size=64] [lr=0.05] [threads=0] [out=DIR]
                                                [eval_batch_size=250]

The recipe of the example: the MLP 784-1024-1024-10 or the CNN (conv 1->32,
BatchNorm, ReLU, max-pool, conv 32->64, BatchNorm, ReLU, max-pool, 3136->128,
ReLU, 128->10), SGD momentum 0.9 at lr 0.05 per 64
samples of global batch (scaled linearly), cosine schedule stepped per batch,
DistributedSampler (shuffle, seed 0, set_epoch), whole-test-set accuracy
gathered from every rank after each epoch, a checkpoint of model, optimizer
and scheduler written by rank 0 after each epoch. DDP over gloo, mp.spawn.
The one difference: the example converts BatchNorm to SyncBatchNorm under
DDP; PyTorch's SyncBatchNorm runs on GPUs only, so here each rank's
BatchNorm normalises over its own batch (no collective: less work).
Threads per process: cores / nproc (at least 1), the rule torchrun and
ddplua share; threads=N sets it (torch's and, unless the environment says
otherwise, OpenBLAS's: OPENBLAS_NUM_THREADS). eval_batch_size=250: the
evaluation batch, as the example's.

Batches are gathered from the preloaded tensors with the sampler's indices
(x[idx]), the fastest way to feed PyTorch these batches (a DataLoader over a
TensorDataset collates sample by sample and runs several times slower).

Prints one line per epoch (train seconds, samples/s over the whole training
split, as the example prints them) and a last line with the peak RSS of the
largest process and the final accuracy.
"""
import gzip
import os
import resource
import struct
import sys
import tempfile
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn

D = "/usr/share/datasets/fashion-mnist"


def load(kind):
    with gzip.open(f"{D}/{kind}-images-idx3-ubyte.gz") as f:
        _, n, r, c = struct.unpack(">IIII", f.read(16))
        x = np.frombuffer(f.read(), np.uint8).reshape(n, 1, r, c)
    with gzip.open(f"{D}/{kind}-labels-idx1-ubyte.gz") as f:
        f.read(8)
        y = np.frombuffer(f.read(), np.uint8)
    # uint8 in memory, float32 in [0, 1] per batch, as ddplua's FashionMNIST
    return torch.from_numpy(x.copy()), torch.from_numpy(y.astype(np.int64))


def build(kind):
    if kind == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                             nn.Linear(1024, 10))
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


def worker(rank, cfg, port, q):
    world = cfg["nproc"]
    threads = cfg["threads"] or max(1, (os.cpu_count() or 1) // world)
    torch.set_num_threads(threads)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(cfg["seed"] + rank)
    model = build(cfg["model"])
    # (no SyncBatchNorm: PyTorch's runs on GPUs only, so each rank's BatchNorm uses its own batch)
    model = nn.parallel.DistributedDataParallel(model)
    bs = cfg["batch_size"]
    lr = cfg["lr"] * bs * world / 64
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    lossf = nn.CrossEntropyLoss()
    xtr, ytr = load("train")
    if cfg["train_samples"] > 0:
        xtr, ytr = xtr[:cfg["train_samples"]], ytr[:cfg["train_samples"]]
    xte, yte = load("t10k")
    train_sampler = torch.utils.data.distributed.DistributedSampler(range(len(ytr)), num_replicas=world, rank=rank,
                                                                    shuffle=True, seed=cfg["seed"])
    test_sampler = torch.utils.data.distributed.DistributedSampler(range(len(yte)), num_replicas=world, rank=rank,
                                                                   shuffle=False)
    steps_per_epoch = (len(train_sampler) + bs - 1) // bs
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=cfg["epochs"] * steps_per_epoch)

    def evaluate():
        model.eval()
        idx = torch.tensor(list(iter(test_sampler)))
        preds = []
        with torch.no_grad():
            eb = cfg["eval_batch_size"]
            for i in range(0, len(idx), eb):
                b = idx[i:i + eb]
                preds.append(model(xte[b].float() / 255.0).argmax(1))
        model.train()
        p = torch.cat(preds)
        gathered = [torch.empty_like(p) for _ in range(world)]
        dist.all_gather(gathered, p)
        labels = [torch.empty_like(idx) for _ in range(world)]
        dist.all_gather(labels, idx)
        # interleave back to dataset order, drop the sampler's padding
        p_all = torch.stack(gathered, 1).reshape(-1)[:len(yte)]
        i_all = torch.stack(labels, 1).reshape(-1)[:len(yte)]
        return float((p_all == yte[i_all]).float().mean())

    ckpt = os.path.join(cfg["out"], "last.pt")
    acc = 0.0
    for epoch in range(1, cfg["epochs"] + 1):
        train_sampler.set_epoch(epoch)
        idx = torch.tensor(list(iter(train_sampler)))
        t0 = time.perf_counter()
        total, n = 0.0, 0
        for i in range(0, len(idx), bs):
            b = idx[i:i + bs]
            opt.zero_grad()
            loss = lossf(model(xtr[b].float() / 255.0), ytr[b])
            loss.backward()
            opt.step()
            sched.step()
            total, n = total + loss.item(), n + 1
        dt = time.perf_counter() - t0
        mean = torch.tensor([total / n], dtype=torch.float64)
        dist.all_reduce(mean)
        acc = evaluate()
        if rank == 0:
            print(f"epoch {epoch}/{cfg['epochs']}  train loss {float(mean) / world:.4f}  test accuracy "
                  f"{100 * acc:.2f}%  ({dt:.1f} s, {len(ytr) / dt:.0f} samples/s)", flush=True)
            torch.save({"model": model.module.state_dict(), "optimizer": opt.state_dict(),
                        "scheduler": sched.state_dict(), "epoch": epoch}, ckpt + ".tmp")
            os.replace(ckpt + ".tmp", ckpt)
        dist.barrier()
    q.put((rank, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, acc))
    dist.destroy_process_group()


def main():
    cfg = {"model": "mlp", "nproc": 1, "epochs": 5, "train_samples": 0, "batch_size": 64, "lr": 0.05,
           "threads": 0, "seed": 0, "out": "", "eval_batch_size": 250}
    for a in sys.argv[1:]:
        k, _, v = a.partition("=")
        if k not in cfg or not v:
            sys.exit(f"usage: torch_fashion_mnist.py [key=value ...] with keys {', '.join(cfg)}; got {a}")
        cfg[k] = v if isinstance(cfg[k], str) else type(cfg[k])(v)
    if cfg["model"] not in ("mlp", "cnn"):
        sys.exit(f"model must be mlp or cnn, got {cfg['model']}")
    tmp = None
    if not cfg["out"]:
        tmp = tempfile.TemporaryDirectory(prefix="torch_fashion_")
        cfg["out"] = tmp.name
    # Debian's torch computes its GEMMs in OpenBLAS-pthread, which
    # torch.set_num_threads does not reach: the workers (spawned, so they
    # import torch again) read its thread count from the environment
    threads = cfg["threads"] or max(1, (os.cpu_count() or 1) // cfg["nproc"])
    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(threads))
    port = 29600 + os.getpid() % 2000
    q = mp.get_context("spawn").SimpleQueue()
    t0 = time.perf_counter()
    mp.spawn(worker, args=(cfg, port, q), nprocs=cfg["nproc"], join=True)
    wall = time.perf_counter() - t0
    results = [q.get() for _ in range(cfg["nproc"])]
    peak_kib = max(r[1] for r in results)
    print(f"torch_fashion_mnist model={cfg['model']} nproc={cfg['nproc']} wall_s={wall:.1f} "
          f"worker_peak_rss_kib={peak_kib} accuracy={100 * results[0][2]:.2f}")


if __name__ == "__main__":
    main()
