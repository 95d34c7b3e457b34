"""Small regression, hand-ported to CPU (one device: no DataParallel wrapper)."""
import json

import torch
import torch.nn as nn

torch.manual_seed(26)
batch_size = 8
model = nn.Sequential(nn.Linear(6, 12), nn.ELU(), nn.Linear(12, 2))
opt = torch.optim.Adam(model.parameters(), lr=0.01)
x = torch.randn(batch_size * 3, 6)
y = torch.randn(batch_size * 3, 2)
losses = []
for i in range(3):
    xb = x[i * batch_size:(i + 1) * batch_size]
    yb = y[i * batch_size:(i + 1) * batch_size]
    loss = nn.functional.mse_loss(model(xb), yb)
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
state = model.state_dict()
print("RESULT " + json.dumps({"losses": losses, "batch_size": batch_size, "keys": sorted(state)}))
