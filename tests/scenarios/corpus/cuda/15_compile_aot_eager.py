"""I2 + torch.compile(backend="aot_eager") on a function and a module; random ops (dropout) inside the graph."""
# corpus: plain=runs
import json

import torch
import torch.nn as nn

torch.manual_seed(15)
torch.cuda.manual_seed(15)
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


@torch.compile(backend="aot_eager")
def fused_gelu_bias(x, b):
    return torch.nn.functional.gelu(x + b, approximate="tanh")


net = nn.Sequential(nn.Linear(10, 20), nn.Dropout(0.2), nn.Linear(20, 1)).to(DEVICE)
cnet = torch.compile(net, backend="aot_eager")
opt = torch.optim.SGD(cnet.parameters(), lr=0.1)
x = torch.randn(32, 10, device=DEVICE)
b = torch.randn(10, device=DEVICE)
losses = []
for _ in range(4):
    loss = cnet(fused_gelu_bias(x, b)).mean() ** 2
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
net.eval()
print("RESULT " + json.dumps({"losses": losses, "eval": cnet(x).sum().item()}))
