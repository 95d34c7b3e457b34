"""I4: already device-neutral code through torch.accelerator (with a cuda-only tuning branch)."""
# corpus: plain=runs
import json

import torch
import torch.nn as nn

acc = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
device = acc if acc is not None else torch.device("cpu")
if device.type == "cuda":
    torch.backends.cudnn.benchmark = True
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
if device.type != "cpu":
    torch.accelerator.synchronize()
print("RESULT " + json.dumps({"losses": losses}))
