"""Mixed-precision regression training with the (deprecated) torch.cuda.amp API."""
# corpus: plain=fails
import json

import torch
import torch.nn as nn

torch.manual_seed(0)
torch.cuda.manual_seed(0)

device = torch.device("cuda")

model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
scaler = torch.cuda.amp.GradScaler()
criterion = nn.MSELoss()

X = torch.randn(256, 16)
y = X[:, :4].sum(dim=1, keepdim=True) + 0.1 * torch.randn(256, 1)

losses = []
for step in range(12):
    idx = slice((step % 8) * 32, (step % 8) * 32 + 32)
    xb, yb = X[idx].cuda(), y[idx].cuda()
    optimizer.zero_grad(set_to_none=True)
    with torch.cuda.amp.autocast():
        out = model(xb)
        loss = criterion(out.float(), yb)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    losses.append(loss.item())

with torch.no_grad():
    w = sum(p.double().sum().item() for p in model.parameters())
print("RESULT " + json.dumps({"losses": losses, "param_sum": w, "scale": scaler.get_scale()}))
