"""Profiling annotations: torch.cuda.nvtx.range_push/pop and the nvtx.range context manager."""
# corpus: plain=fails
import json

import torch
import torch.nn as nn

torch.manual_seed(33)
model = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 8)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
x = torch.randn(16, 8).cuda()
losses = []
for step in range(5):
    torch.cuda.nvtx.range_push(f"step {step}")
    with torch.cuda.nvtx.range("forward"):
        out = model(x)
        loss = (out - x).pow(2).mean()
    torch.cuda.nvtx.range_push("backward")
    opt.zero_grad()
    loss.backward()
    torch.cuda.nvtx.range_pop()
    torch.cuda.nvtx.mark("optimizer")
    opt.step()
    torch.cuda.nvtx.range_pop()
    losses.append(loss.item())
print("RESULT " + json.dumps({"losses": losses}))
