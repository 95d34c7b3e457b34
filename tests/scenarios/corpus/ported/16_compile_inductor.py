"""Default torch.compile (Inductor) on a tiny model, hand-ported to CPU."""
import json

import torch
import torch.nn as nn

torch.manual_seed(16)
model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4)).to("cpu").eval()
model = torch.compile(model)
x = torch.randn(5, 8, device="cpu")
with torch.no_grad():
    y = model(x)
    y2 = model(x * 2)
print("RESULT " + json.dumps({"y": y.flatten().tolist(), "y2": y2.sum().item()}))
