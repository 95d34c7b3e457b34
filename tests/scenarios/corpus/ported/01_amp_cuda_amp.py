"""Mixed-precision regression training, hand-ported to CPU (fp16 autocast + CPU GradScaler)."""
import json

import torch
import torch.nn as nn

torch.manual_seed(0)

device = torch.device("cpu")

model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
scaler = torch.amp.GradScaler("cpu")
criterion = nn.MSELoss()

X = torch.randn(256, 16)
y = X[:, :4].sum(dim=1, keepdim=True) + 0.1 * torch.randn(256, 1)

losses = []
for step in range(12):
    idx = slice((step % 8) * 32, (step % 8) * 32 + 32)
    xb, yb = X[idx].to(device), y[idx].to(device)
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.float16):
        out = model(xb)
        loss = criterion(out.float(), yb)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    losses.append(loss.item())

with torch.no_grad():
    w = sum(p.double().sum().item() for p in model.parameters())
print("RESULT " + json.dumps({"losses": losses, "param_sum": w, "scale": scaler.get_scale()}))
