"""Tensor factories, hand-ported to CPU."""
import json

import torch

torch.manual_seed(36)
dev = torch.device("cpu")
a = torch.zeros(3, 4, device="cpu")
b = torch.ones(3, 4, device="cpu")
c = torch.randn(3, 4, device=dev)
d = torch.arange(12, device=dev, dtype=torch.float32).view(3, 4)
e = torch.full((3, 4), 0.25, device="cpu")
f = torch.eye(4, device=torch.device("cpu"))
g = torch.tensor([[1.0, -1.0, 2.0, 0.5]], device="cpu")
h = torch.linspace(0, 1, 4, device="cpu")
i = torch.empty(3, 4, device="cpu").uniform_(-1, 1)
j = torch.randint(0, 10, (3, 4), device="cpu").float()
k = torch.randn_like(c) + torch.zeros_like(a) + torch.ones_like(b, device="cpu")
m = torch.as_tensor([0.1, 0.2, 0.3, 0.4], device="cpu")
n = torch.rand(4, device="cpu").to("cpu", dtype=torch.float64)
total = (a + b + c + d + e + i + j + k) @ f * g + h + m
print("RESULT " + json.dumps({"total": total.tolist(), "n": n.tolist()}))
