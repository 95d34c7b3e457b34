"""10,000 tiny tensor ops in the application's own code, written for CUDA."""

import sys
import time

import torch

device = "cuda"
x = torch.zeros(4, device=device)
step = torch.ones(4, device=device)
began = time.perf_counter()
for _ in range(10_000):
    x = torch.add(x, step)
    x = x * 0.5
torch.cuda.synchronize()
print(f"seconds={time.perf_counter() - began!r}")
print(f"value={x.sum().item()!r}", file=sys.stderr)
