"""torch.compile(backend='eager') on a model living on 'cuda', trained a few steps."""
# corpus: plain=fails
import json

import torch
import torch.nn as nn

torch.manual_seed(14)
torch.backends.cudnn.benchmark = True


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(12, 24)
        self.l2 = nn.Linear(24, 12)

    def forward(self, x):
        h = torch.nn.functional.silu(self.l1(x))
        return x + self.l2(h)


model = MLP().cuda()
compiled = torch.compile(model, backend="eager")
opt = torch.optim.Adam(model.parameters(), lr=5e-3)
x = torch.randn(16, 12, device="cuda")
losses = []
for _ in range(5):
    loss = compiled(x).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
print("RESULT " + json.dumps({"losses": losses}))
