"""Throughput benchmark, hand-ported to CPU (synchronize is a no-op there, so it is dropped)."""
import json
import time

import torch

torch.manual_seed(17)
a = torch.randn(64, 64, device="cpu")
b = torch.randn(64, 64, device="cpu")

for _ in range(3):  # warmup
    c = a @ b

iters = 20
start = time.perf_counter()
for _ in range(iters):
    c = torch.tanh(a @ b) + c * 0.5
elapsed = time.perf_counter() - start
tflops = 2 * 64 ** 3 * iters / elapsed / 1e12
print(f"{iters} iters in {elapsed * 1e3:.2f} ms ({tflops:.4f} TFLOP/s)")
print("RESULT " + json.dumps({"checksum": c.sum().item(), "timed": elapsed > 0 and tflops > 0}))
