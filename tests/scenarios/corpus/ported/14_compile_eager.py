"""torch.compile(backend='eager'), hand-ported to CPU."""
import json

import torch
import torch.nn as nn

torch.manual_seed(14)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(12, 24)
        self.l2 = nn.Linear(24, 12)

    def forward(self, x):
        h = torch.nn.functional.silu(self.l1(x))
        return x + self.l2(h)


model = MLP()
compiled = torch.compile(model, backend="eager")
opt = torch.optim.Adam(model.parameters(), lr=5e-3)
x = torch.randn(16, 12, device="cpu")
losses = []
for _ in range(5):
    loss = compiled(x).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
print("RESULT " + json.dumps({"losses": losses}))
