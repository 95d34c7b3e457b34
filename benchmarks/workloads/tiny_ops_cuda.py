"""10,000 iterations of tiny tensor ops (with --with-device-arguments, half of them carry a device), written for CUDA."""

import sys
import time

import torch

device = "cuda"
x = torch.zeros(4, device=device)
step = torch.ones(4, device=device)
# 10,000 iterations take ~0.1 s, shorter than this machine's scheduling noise: time seven
# passes and report the fastest.
fastest = float("inf")
for _ in range(7):
    began = time.perf_counter()
    if "--with-device-arguments" in sys.argv:
        # half the calls carry a device argument: the call sites retargeting rewrites
        for _ in range(10_000):
            x = torch.add(x, step)
            x = x * 0.5
            x = x + torch.ones(4, device=device)
            x = x.to(device)
    else:
        for _ in range(10_000):
            x = torch.add(x, step)
            x = x * 0.5
    torch.cuda.synchronize()
    fastest = min(fastest, time.perf_counter() - began)
print(f"seconds={fastest!r}")
print(f"value={x.sum().item()!r}", file=sys.stderr)
