"""Device context handling, hand-ported to CPU (one device, index 0)."""
import json

import torch
import torch.nn as nn

torch.manual_seed(45)
cur = 0
device = torch.device("cpu")
w = torch.randn(5, 5)
model = nn.Linear(5, 5, bias=False)
with torch.no_grad():
    model.weight.copy_(w)
x = torch.randn(3, 5, device=device)
y = model(x)
n = 1
shards = [torch.ones(2, device="cpu") * (i + 1) for i in range(n)]
total = sum(s.to(device) for s in shards)
print("RESULT " + json.dumps({"y": y.tolist(), "cur": cur, "n": n, "total": total.tolist(),
                              "init": True}))
