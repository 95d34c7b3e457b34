"""Model built inside a device context with a default device, hand-ported to CPU."""
import json

import torch
import torch.nn as nn

torch.manual_seed(50)
with torch.device("cpu"):
    model = nn.Sequential(nn.Embedding(20, 8), nn.Linear(8, 20))
    freqs = torch.arange(4) * 0.5

torch.set_default_device("cpu")
idx = torch.randint(0, 20, (3, 6))
opt = torch.optim.SGD(model.parameters(), lr=0.2)
losses = []
for _ in range(4):
    logits = model(idx[:, :-1])
    loss = nn.functional.cross_entropy(logits.reshape(-1, 20), idx[:, 1:].reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
mask = torch.tril(torch.ones(4, 4)) * freqs
torch.set_default_device(None)
print("RESULT " + json.dumps({"losses": losses, "mask": mask.tolist()}))
