"""A config dict with a 'cuda:0' device, torch.device('cuda', index), set_device and an is_cuda guard."""
import json

import torch
import torch.nn as nn

CONFIG = dict(device="cuda:0", lr=0.1, steps=20)
local_rank = 0
torch.cuda.set_device(local_rank)
device = torch.device("cuda", local_rank)
torch.manual_seed(3)
model = nn.Linear(4, 1).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=CONFIG["lr"])
x = torch.randn(32, 4, device=CONFIG["device"])
y = x.sum(dim=1, keepdim=True)
losses = []
for _ in range(CONFIG["steps"]):
    loss = nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
if x.is_cuda:
    torch.cuda.empty_cache()
print("RESULT " + json.dumps({"first": losses[0], "last": losses[-1], "falls": losses[-1] < losses[0]}))
