"""Training loop with profiler annotations, hand-ported to CPU (torch.profiler.record_function)."""
import json

import torch
import torch.nn as nn
from torch.profiler import record_function

torch.manual_seed(33)
model = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 8))
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
x = torch.randn(16, 8)
losses = []
for step in range(5):
    with record_function(f"step {step}"):
        with record_function("forward"):
            out = model(x)
            loss = (out - x).pow(2).mean()
        with record_function("backward"):
            opt.zero_grad()
            loss.backward()
        opt.step()
    losses.append(loss.item())
print("RESULT " + json.dumps({"losses": losses}))
