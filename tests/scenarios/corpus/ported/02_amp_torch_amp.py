"""Classifier training with torch.amp, hand-ported to CPU."""
import json

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(1)

DEVICE = "cpu"


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(20, 48)
        self.norm = nn.LayerNorm(48)
        self.fc2 = nn.Linear(48, 5)

    def forward(self, x):
        # CUDA's autocast computes layer_norm in float32 (the CPU's would keep float16): said here
        h = self.fc1(x)
        if torch.is_autocast_enabled("cpu"):
            with torch.autocast("cpu", enabled=False):
                h = self.norm(h.float())
        else:
            h = self.norm(h)
        return self.fc2(F.gelu(h))


model = Net().to(DEVICE)
opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
scaler = torch.amp.GradScaler("cpu", init_scale=2.0**12)

data = torch.randn(160, 20, device=DEVICE)
labels = torch.randint(0, 5, (160,), device=DEVICE)

losses, norms = [], []
for epoch in range(2):
    for i in range(0, 160, 32):
        xb, yb = data[i:i + 32], labels[i:i + 32]
        with torch.amp.autocast("cpu", dtype=torch.float16):
            logits = model(xb)
            loss = F.cross_entropy(logits, yb)
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
        norms.append(norm.item())

model.eval()
with torch.no_grad(), torch.amp.autocast(device_type="cpu", dtype=torch.float16):
    acc = (model(data).argmax(-1) == labels).float().mean().item()
print("RESULT " + json.dumps({"losses": losses, "norms": norms, "acc": acc, "scale": scaler.get_scale()}))
