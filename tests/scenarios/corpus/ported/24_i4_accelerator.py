"""Device-neutral code, hand-ported to CPU (the accelerator probe resolves to cpu here)."""
import json

import torch
import torch.nn as nn

device = torch.device("cpu")
torch.manual_seed(24)

model = nn.Sequential(nn.Linear(4, 16), nn.Hardswish(), nn.Linear(16, 4)).to(device)
opt = torch.optim.NAdam(model.parameters(), lr=0.01)
x = torch.randn(12, 4, device=device)
losses = []
for _ in range(5):
    loss = (model(x) - x).abs().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
print("RESULT " + json.dumps({"losses": losses}))
