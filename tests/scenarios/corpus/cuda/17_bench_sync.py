"""Throughput benchmark: warmup, torch.cuda.synchronize() around a perf_counter timed loop."""
# corpus: plain=fails
import json
import time

import torch

torch.manual_seed(17)
torch.backends.cudnn.benchmark = True
a = torch.randn(64, 64, device="cuda")
b = torch.randn(64, 64, device="cuda")

for _ in range(3):  # warmup
    c = a @ b
torch.cuda.synchronize()

iters = 20
start = time.perf_counter()
for _ in range(iters):
    c = torch.tanh(a @ b) + c * 0.5
torch.cuda.synchronize()
elapsed = time.perf_counter() - start
tflops = 2 * 64 ** 3 * iters / elapsed / 1e12
# timings are machine-dependent: only their sanity is part of the result
print(f"{iters} iters in {elapsed * 1e3:.2f} ms ({tflops:.4f} TFLOP/s)")
print("RESULT " + json.dumps({"checksum": c.sum().item(), "timed": elapsed > 0 and tflops > 0}))
