"""Checkpoint save/resume, hand-ported to CPU (map_location='cpu')."""
import json
import os
import tempfile

import torch
import torch.nn as nn

torch.manual_seed(8)
model = nn.Sequential(nn.Linear(5, 10), nn.ReLU(), nn.Linear(10, 2))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
x = torch.randn(32, 5)
y = torch.randn(32, 2)


def train(m, o, steps):
    out = []
    for _ in range(steps):
        loss = nn.functional.smooth_l1_loss(m(x), y)
        o.zero_grad()
        loss.backward()
        o.step()
        out.append(loss.item())
    return out


first = train(model, opt, 4)
with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "ckpt.pth")
    torch.save({"epoch": 4, "state_dict": model.state_dict(), "optim": opt.state_dict()}, path)
    ckpt = torch.load(path, map_location="cpu")

model2 = nn.Sequential(nn.Linear(5, 10), nn.ReLU(), nn.Linear(10, 2))
model2.load_state_dict(ckpt["state_dict"])
opt2 = torch.optim.Adam(model2.parameters(), lr=1e-2)
opt2.load_state_dict(ckpt["optim"])
second = train(model2, opt2, 4)
print("RESULT " + json.dumps({"first": first, "second": second, "epoch": ckpt["epoch"]}))
