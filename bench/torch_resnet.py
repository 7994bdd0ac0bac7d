"""PyTorch peer of examples/resnet/train.lua (the ResNet row of `make bench`).

The same recipe, as the seed tutorial writes it in PyTorch: torchvision's
resnet18 layout (conv1 7x7 stride 2, max pool, four stages of two
torchvision BasicBlocks, average pool, fc) with every stage's width scaled
by `width` (64: torchvision's own 64/128/256/512; torchvision's ResNet class
fixes 64, so the stages are assembled here from its BasicBlock), PyTorch's
init (kaiming_normal_ fan_out for the convolutions, BatchNorm 1 and 0);
the CSV-image data (labels.csv: path,label; random_split 0.8/0.1/0.1 with
`seed`), grayscale images resized to img_size, RandomRotation(10), ToTensor,
Normalize(0.5, 0.5); DataLoader with batch 64, shuffle and num_workers
workers; SGD lr 0.1 momentum 0.9 weight decay 5e-4, cross entropy.

  /usr/bin/python3 bench/torch_resnet.py data=runs/bench_resnet_csv [epochs=1] [width=16] [limit=2000]
                   [img_size=32] [num_workers=2] [threads=0] [nproc=1]

nproc=N: N processes under DistributedDataParallel (gloo), each with a
DistributedSampler's share of the images and threads/N threads, plain
BatchNorm (PyTorch 1.13's SyncBatchNorm needs CUDA): examples/resnet/train.lua
sync_bn=false under `ddplua --nproc N`.

Prints per epoch `epoch E  loss L  <S> s  <N> images/s` (the training loop's
images over its wall time, of all processes, as the example prints it). threads=0: torch's
default (every core); OPENBLAS_NUM_THREADS is set to match before torch
loads (torch.set_num_threads does not reach Debian's OpenBLAS-pthread).
"""
import os
import sys
import time

cfg = {"data": "runs/bench_resnet_csv", "epochs": 1, "width": 16, "limit": 2000, "img_size": 32,
       "num_workers": 2, "threads": 0, "seed": 42, "batch_size": 64, "nproc": 1}
for a in sys.argv[1:]:
    k, _, v = a.partition("=")
    if k not in cfg or not v:
        sys.exit(f"usage: torch_resnet.py [key=value ...] with keys {', '.join(cfg)}; got {a}")
    cfg[k] = v if isinstance(cfg[k], str) else int(v)
if cfg["nproc"] < 1:
    sys.exit("torch_resnet.py: nproc must be >= 1")
threads = max(1, (cfg["threads"] or (os.cpu_count() or 1)) // cfg["nproc"])
os.environ["OPENBLAS_NUM_THREADS"] = str(threads)

import socket  # noqa: E402
import torch  # noqa: E402 (after OPENBLAS_NUM_THREADS)
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
from PIL import Image  # noqa: E402
from torchvision import transforms as T  # noqa: E402
from torchvision.models.resnet import BasicBlock  # noqa: E402

class ResNet18(nn.Module):
    def __init__(self, width, in_channels, num_classes):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, width, 7, 2, 3, bias=False)
        self.bn1, self.relu, self.maxpool = nn.BatchNorm2d(width), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)
        inplanes, stages = width, []
        for i in range(4):
            planes, stride = width << i, 1 if i == 0 else 2
            down = None
            if stride != 1 or inplanes != planes:
                down = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))
            stages.append(nn.Sequential(BasicBlock(inplanes, planes, stride, down), BasicBlock(planes, planes)))
            inplanes = planes
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool, self.fc = nn.AdaptiveAvgPool2d((1, 1)), nn.Linear(inplanes, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


class CSVImages(torch.utils.data.Dataset):
    def __init__(self, rows, root, transform):
        self.rows, self.root, self.transform = rows, root, transform

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        path, label = self.rows[i]
        with Image.open(os.path.join(self.root, path)) as im:
            return self.transform(im.convert("L")), label


def main(rank=0, world=1, port=0):
    torch.set_num_threads(threads)
    if world > 1:
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank, world_size=world)
    with open(os.path.join(cfg["data"], "labels.csv")) as f:
        lines = f.read().split("\n")[1:]
    rows = [(p, int(y)) for p, _, y in (ln.rpartition(",") for ln in lines if ln)]
    n = len(rows)
    lens = [int(n * 0.8), int(n * 0.1), int(n * 0.1)]
    for i in range(n - sum(lens)):
        lens[i % 3] += 1
    train_idx, _, _ = torch.utils.data.random_split(range(n), lens, torch.Generator().manual_seed(cfg["seed"]))
    train_rows = [rows[i] for i in train_idx][: cfg["limit"] or None]
    s = cfg["img_size"]
    tf = T.Compose([T.Resize((s, s)), T.RandomRotation(10), T.ToTensor(), T.Normalize((0.5,), (0.5,))])
    ds = CSVImages(train_rows, cfg["data"], tf)
    sampler = torch.utils.data.DistributedSampler(ds, world, rank, shuffle=True, seed=cfg["seed"]) if world > 1 \
        else None
    dl = torch.utils.data.DataLoader(ds, batch_size=cfg["batch_size"], shuffle=sampler is None, sampler=sampler,
                                     num_workers=cfg["num_workers"], persistent_workers=cfg["num_workers"] > 0)
    torch.manual_seed(cfg["seed"])
    model = ResNet18(cfg["width"], 1, 1 + max(y for _, y in rows))
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    crit = nn.CrossEntropyLoss()
    for epoch in range(1, cfg["epochs"] + 1):
        if sampler is not None:
            sampler.set_epoch(epoch)
        model.train()
        t0, loss_sum, batches, images = time.perf_counter(), 0.0, 0, 0
        for x, y in dl:
            opt.zero_grad(set_to_none=True)
            loss = crit(model(x), y)
            loss.backward()
            opt.step()
            loss_sum, batches, images = loss_sum + loss.item(), batches + 1, images + x.size(0)
        secs = time.perf_counter() - t0
        if rank == 0:
            print(f"epoch {epoch}  loss {loss_sum / max(1, batches):.4f}  {secs:.1f} s  "
                  f"{images * world / secs:.0f} images/s", flush=True)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    if cfg["nproc"] == 1:
        main()
    else:
        with socket.socket() as sock:  # a free port for the ranks' rendezvous
            sock.bind(("127.0.0.1", 0))
            free_port = sock.getsockname()[1]
        torch.multiprocessing.spawn(main, args=(cfg["nproc"], free_port), nprocs=cfg["nproc"])
