"""Conv net training, hand-ported to CPU (CUDA-only flags dropped: full fp32 kept)."""
import json

import torch
import torch.nn as nn

torch.manual_seed(34)

net = nn.Sequential(
    nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.GroupNorm(2, 8), nn.SiLU(),
    nn.Conv2d(8, 8, 3, padding=1, groups=2), nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(32, 10),
)
opt = torch.optim.SGD(net.parameters(), lr=0.05)
imgs = torch.randn(6, 3, 16, 16, device="cpu")
labels = torch.arange(6, device="cpu") % 10
losses = []
for _ in range(4):
    loss = nn.functional.cross_entropy(net(imgs), labels, label_smoothing=0.1)
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
print("RESULT " + json.dumps({"losses": losses}))
