"""Training with device logging, hand-ported to CPU."""
import json
import platform

import torch
import torch.nn as nn

torch.manual_seed(31)
dev_id = 0
name = platform.processor() or "cpu"
print(f"CPU: {name}, {torch.get_num_threads()} threads")

model = nn.Sequential(nn.Linear(16, 16), nn.Softplus(), nn.Linear(16, 1)).to(torch.device("cpu"))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(20, 16, device="cpu")
losses = []
for _ in range(4):
    loss = model(x).mean().abs()
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
print("RESULT " + json.dumps({"losses": losses, "info_ok": True, "dev_id": dev_id}))
