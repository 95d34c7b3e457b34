"""Start-up logging of the GPU (torch.cuda.get_device_name(0), total memory from
get_device_properties, capability) and a TF32 switch on Ampere or newer, then a short training run."""
import json

import torch
import torch.nn as nn

print(f"Device: {torch.cuda.get_device_name(0)}")
total_gb = torch.cuda.get_device_properties(0).total_memory / 1024**3
print(f"Memory: {total_gb:.1f} GB")
if torch.cuda.get_device_capability()[0] >= 8:
    torch.backends.cuda.matmul.allow_tf32 = True
torch.manual_seed(109)
model = nn.Linear(6, 1).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(30, 6, device="cuda")
y = x.mean(dim=1, keepdim=True)
losses = []
for _ in range(10):
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
print("RESULT " + json.dumps({"losses": losses, "memory_sane": total_gb > 0}))
