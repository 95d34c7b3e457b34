"""I5: nn.DataParallel(model).cuda() with a batch size scaled by torch.cuda.device_count()."""
# corpus: plain=fails
import json

import torch
import torch.nn as nn

torch.manual_seed(26)
n_gpu = torch.cuda.device_count()
batch_size = 8 * max(1, n_gpu)
model = nn.Sequential(nn.Linear(6, 12), nn.ELU(), nn.Linear(12, 2))
if n_gpu > 0:
    model = nn.DataParallel(model).cuda()
opt = torch.optim.Adam(model.parameters(), lr=0.01)
x = torch.randn(batch_size * 3, 6)
y = torch.randn(batch_size * 3, 2)
losses = []
for i in range(3):
    xb = x[i * batch_size:(i + 1) * batch_size].cuda()
    yb = y[i * batch_size:(i + 1) * batch_size].cuda()
    loss = nn.functional.mse_loss(model(xb), yb)
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
state = model.module.state_dict() if isinstance(model, nn.DataParallel) else model.state_dict()
print("RESULT " + json.dumps({"losses": losses, "batch_size": batch_size, "keys": sorted(state)}))
