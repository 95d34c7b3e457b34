"""The hand-ported twin of tiny_ops_cuda.py."""

import sys
import time

import torch

accelerator = torch.accelerator.current_accelerator()
device = accelerator if accelerator is not None else torch.device("cpu")
x = torch.zeros(4, device=device)
step = torch.ones(4, device=device)
began = time.perf_counter()
for _ in range(10_000):
    x = torch.add(x, step)
    x = x * 0.5
if accelerator is not None:
    torch.accelerator.synchronize()
print(f"seconds={time.perf_counter() - began!r}")
print(f"value={x.sum().item()!r}", file=sys.stderr)
