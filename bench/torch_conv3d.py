# PyTorch's side of bench/conv3d.lua: the same conv3d rows and the same R3D training step (the network of
# examples/video3d/model.lua, built from torch.nn), one thread; run pinned to one core: taskset -c 0.
#   taskset -c 0 /usr/bin/python3 bench/torch_conv3d.py [steps]
import statistics, sys, time
import torch, torch.nn as nn, torch.nn.functional as F

class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv3d(cin, cout, 3, stride, 1, bias=False); self.bn1 = nn.BatchNorm3d(cout)
        self.conv2 = nn.Conv3d(cout, cout, 3, 1, 1, bias=False); self.bn2 = nn.BatchNorm3d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv3d(cin, cout, 1, stride, bias=False), nn.BatchNorm3d(cout))
    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (x if self.down is None else self.down(x)))

class R3D(nn.Module):
    def __init__(self, num_classes=10, width=16, in_channels=3):
        super().__init__()
        w = width
        self.stem = nn.Sequential(nn.Conv3d(in_channels, w, (3, 7, 7), (1, 2, 2), (1, 3, 3), bias=False),
                                  nn.BatchNorm3d(w), nn.ReLU())
        self.layers = nn.Sequential(Block(w, w, 1), Block(w, 2 * w, 2), Block(2 * w, 4 * w, 2))
        self.pool = nn.AdaptiveAvgPool3d(1)
        self.fc = nn.Linear(4 * w, num_classes)
    def forward(self, x):
        return self.fc(self.pool(self.layers(self.stem(x))).flatten(1))



if __name__ == "__main__":
    torch.set_num_threads(1)
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 7

    def median_ms(runs, fn):
        for _ in range(3): fn()
        t = []
        for _ in range(runs):
            t0 = time.perf_counter(); fn(); t.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(t)

    LAYERS = [
        ("stem 3->16 3x7x7 s(1,2,2)", (8, 3, 8, 56, 56), (16, 3, 3, 7, 7), (1, 2, 2), (1, 3, 3)),
        ("16->16 3x3x3", (8, 16, 8, 28, 28), (16, 16, 3, 3, 3), 1, 1),
        ("16->32 3x3x3 s2", (8, 16, 8, 28, 28), (32, 16, 3, 3, 3), 2, 1),
        ("64->64 3x3x3", (8, 64, 2, 7, 7), (64, 64, 3, 3, 3), 1, 1),
    ]
    torch.manual_seed(0)
    for name, xs, ws, s, p in LAYERS:
        x = torch.randn(xs, requires_grad=True)
        w = (torch.randn(ws) * 0.05).requires_grad_()
        fwd = median_ms(7, lambda: F.conv3d(x, w, None, s, p))
        both = median_ms(7, lambda: F.conv3d(x, w, None, s, p).sum().backward())
        print("conv3d %-28s fwd %8.2f ms  fwd+bwd %8.2f ms" % (name, fwd, both))

    model = R3D(10, 16)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(8, 3, 8, 56, 56), torch.randint(0, 10, (8,))
    def step():
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(); loss.backward(); opt.step()
    print("R3D width 16 train step, batch 8x3x8x56x56: %.1f ms" % median_ms(steps, step))
