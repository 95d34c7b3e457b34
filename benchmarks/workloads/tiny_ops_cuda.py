"""10,000 iterations of tiny tensor ops, half of them carrying a device argument, written for CUDA."""

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
    # device-carrying calls, the ones retargeting rewrites
    x = x + torch.ones(4, device=device)
    x = x.to(device)
torch.cuda.synchronize()
print(f"seconds={time.perf_counter() - began!r}")
print(f"value={x.sum().item()!r}", file=sys.stderr)
