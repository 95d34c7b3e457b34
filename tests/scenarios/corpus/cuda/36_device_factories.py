"""Tensor factories with device='cuda' / 'cuda:0' / torch.device('cuda') / device=0, and *_like ops."""
# corpus: plain=fails
import json

import torch

torch.manual_seed(36)
dev = torch.device("cuda")
a = torch.zeros(3, 4, device="cuda")
b = torch.ones(3, 4, device="cuda:0")
c = torch.randn(3, 4, device=dev)
d = torch.arange(12, device=dev, dtype=torch.float32).view(3, 4)
e = torch.full((3, 4), 0.25, device="cuda")
f = torch.eye(4, device=torch.device("cuda", 0))
g = torch.tensor([[1.0, -1.0, 2.0, 0.5]], device=0)
h = torch.linspace(0, 1, 4, device="cuda")
i = torch.empty(3, 4, device="cuda").uniform_(-1, 1)
j = torch.randint(0, 10, (3, 4), device="cuda").float()
k = torch.randn_like(c) + torch.zeros_like(a) + torch.ones_like(b, device="cuda")
m = torch.as_tensor([0.1, 0.2, 0.3, 0.4], device="cuda")
n = torch.rand(4, device="cuda").to("cuda:0", dtype=torch.float64)
total = (a + b + c + d + e + i + j + k) @ f * g + h + m
print("RESULT " + json.dumps({"total": total.tolist(), "n": n.tolist()}))
