"""`if torch.cuda.device_count() > 1: model = nn.DataParallel(model)` then `model.cuda()`, with the
GPU count logged, the pattern of many single-node training scripts."""
import json

import torch
import torch.nn as nn

torch.manual_seed(106)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
print(f"Let's use {torch.cuda.device_count()} GPUs!")
if torch.cuda.device_count() > 1:
    model = nn.DataParallel(model)
model.cuda()
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
x = torch.randn(40, 8).cuda()
y = (x[:, :1] * 2 - x[:, 1:2]).cuda()
losses = []
for _ in range(8):
    loss = nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
print("RESULT " + json.dumps({"losses": losses, "wrapped": isinstance(model, nn.DataParallel)}))
