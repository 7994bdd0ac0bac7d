# The PyTorch side of examples/stn/train.lua: the Spatial Transformer tutorial's network and recipe (SGD lr 0.01,
# batch 64, nll_loss) on Fashion-MNIST from the same IDX files, one process, the same normalisation; prints each
# epoch's train loss, images/s and test accuracy in the same form.
#   /usr/bin/python3 examples/stn/torch_stn.py [epochs] [train_samples] [threads]
import os, sys, time
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from torch_fashion_mnist import load  # noqa: E402 (the IDX files as uint8 images and int64 labels)

epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
limit = int(sys.argv[2]) if len(sys.argv) > 2 else 0
torch.set_num_threads(int(sys.argv[3]) if len(sys.argv) > 3 else 1)
torch.manual_seed(1)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)
        self.localization = nn.Sequential(nn.Conv2d(1, 8, kernel_size=7), nn.MaxPool2d(2, stride=2), nn.ReLU(True),
                                          nn.Conv2d(8, 10, kernel_size=5), nn.MaxPool2d(2, stride=2), nn.ReLU(True))
        self.fc_loc = nn.Sequential(nn.Linear(10 * 3 * 3, 32), nn.ReLU(True), nn.Linear(32, 3 * 2))
        self.fc_loc[2].weight.data.zero_()
        self.fc_loc[2].bias.data.copy_(torch.tensor([1, 0, 0, 0, 1, 0], dtype=torch.float))

    def stn(self, x):
        theta = self.fc_loc(self.localization(x).view(-1, 10 * 3 * 3)).view(-1, 2, 3)
        return F.grid_sample(x, F.affine_grid(theta, x.size()))

    def forward(self, x):
        x = self.stn(x)
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = F.relu(self.fc1(x.view(-1, 320)))
        x = F.dropout(x, training=self.training)
        return F.log_softmax(self.fc2(x), dim=1)


xtr, ytr = load("train")
if limit > 0:
    xtr, ytr = xtr[:limit], ytr[:limit]
xte, yte = load("t10k")
norm = lambda x: (x.float() / 255.0 - 0.2860) / 0.3530
model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
print(f"STN on Fashion-MNIST (PyTorch {torch.__version__}): {len(ytr)} train / {len(yte)} test images, batch 64")
for epoch in range(1, epochs + 1):
    model.train()
    perm = torch.randperm(len(ytr))
    t0, total, n = time.perf_counter(), 0.0, 0
    for i in range(0, len(perm), 64):
        b = perm[i:i + 64]
        x, y = norm(xtr[b]), ytr[b]
        opt.zero_grad()
        loss = F.nll_loss(model(x), y)
        loss.backward()
        opt.step()
        total, n = total + loss.item() * len(b), n + len(b)
    seconds = time.perf_counter() - t0
    model.eval()
    with torch.no_grad():
        correct = sum((model(norm(xte[i:i + 1000])).argmax(1) == yte[i:i + 1000]).sum().item()
                      for i in range(0, len(yte), 1000))
    print(f"Epoch {epoch}: train loss {total / n:.4f}, {n / seconds:.0f} images/s | Test set: Accuracy: "
          f"{correct}/{len(yte)} ({100 * correct / len(yte):.2f}%)")
