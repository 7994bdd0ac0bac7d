"""PyTorch peer of examples/dcgan/train.lua: the same 28 x 28 DCGAN recipe on Fashion-MNIST (pytorch/examples'
dcgan/main.py with the generator and discriminator cut to 28 x 28), one process, so the two compare images/s and
the losses' course.

  /usr/bin/python3 examples/dcgan/torch_dcgan.py [epochs=1] [train_samples=0] [batch_size=64] [threads=0]

Prints one line per epoch: the mean Loss_D, Loss_G, D(x), D(G(z)), train seconds and images/s (as the example
prints them), then the peak RSS.
"""
import gzip
import resource
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn

args = {"epochs": 1, "train_samples": 0, "batch_size": 64, "threads": 0, "seed": 1}
for a in sys.argv[1:]:
    k, v = a.split("=", 1)
    if k not in args:
        sys.exit(f"unknown setting {k} (valid: {', '.join(args)})")
    args[k] = int(v)
if args["threads"] > 0:
    torch.set_num_threads(args["threads"])
torch.manual_seed(args["seed"])

with gzip.open("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz") as f:
    _, n, r, c = struct.unpack(">IIII", f.read(16))
    images = torch.from_numpy(np.frombuffer(f.read(), np.uint8).reshape(n, 1, r, c).copy())
if args["train_samples"] > 0:
    images = images[: args["train_samples"]]

nz, ngf, ndf = 100, 32, 32
netG = nn.Sequential(
    nn.ConvTranspose2d(nz, ngf * 4, 7, 1, 0, bias=False), nn.BatchNorm2d(ngf * 4), nn.ReLU(True),
    nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf * 2), nn.ReLU(True),
    nn.ConvTranspose2d(ngf * 2, 1, 4, 2, 1, bias=False), nn.Tanh())
netD = nn.Sequential(
    nn.Conv2d(1, ndf, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, inplace=True),
    nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 2), nn.LeakyReLU(0.2, inplace=True),
    nn.Conv2d(ndf * 2, 1, 7, 1, 0, bias=False), nn.Sigmoid())


def weights_init(m):
    name = m.__class__.__name__
    if name.find("Conv") != -1:
        nn.init.normal_(m.weight, 0.0, 0.02)
    elif name.find("BatchNorm") != -1:
        nn.init.normal_(m.weight, 1.0, 0.02)
        nn.init.zeros_(m.bias)


netG.apply(weights_init)
netD.apply(weights_init)
criterion = nn.BCELoss()
optD = torch.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
optG = torch.optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
bs = args["batch_size"]
for epoch in range(1, args["epochs"] + 1):
    perm = torch.randperm(images.shape[0])
    sums, steps = [0.0, 0.0, 0.0, 0.0], 0
    t0 = time.perf_counter()
    for i in range(images.shape[0] // bs):
        real = images[perm[i * bs:(i + 1) * bs]].float() / 255 * 2 - 1
        b = real.shape[0]
        optD.zero_grad()
        out = netD(real).view(-1)
        errD_real = criterion(out, torch.ones(b))
        errD_real.backward()
        d_x = out.mean().item()
        fake = netG(torch.randn(b, nz, 1, 1))
        out = netD(fake.detach()).view(-1)
        errD_fake = criterion(out, torch.zeros(b))
        errD_fake.backward()
        optD.step()
        optG.zero_grad()
        out = netD(fake).view(-1)
        errG = criterion(out, torch.ones(b))
        errG.backward()
        optG.step()
        for k, v in enumerate((errD_real.item() + errD_fake.item(), errG.item(), d_x, out.mean().item())):
            sums[k] += v
        steps += 1
    secs = time.perf_counter() - t0
    m = [s / steps for s in sums]
    print("epoch %d/%d  Loss_D %.4f  Loss_G %.4f  D(x) %.4f  D(G(z)) %.4f  (%.1f s, %.0f images/s)"
          % (epoch, args["epochs"], m[0], m[1], m[2], m[3], secs, steps * bs / secs), flush=True)
print("peak RSS %.1f MB" % (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))
