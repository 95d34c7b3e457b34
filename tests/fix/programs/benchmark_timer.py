"""A benchmark that synchronises only when CUDA is there, and reports device memory."""
import time

import torch as th
import torch.distributed as dist

th.manual_seed(1)
use_gpu = th.cuda.is_available()
device = th.device('cuda' if use_gpu else 'cpu')
x = th.randn(32, 32, device=device)
if use_gpu:
    th.cuda.synchronize()
start = time.perf_counter()
for _ in range(5):
    x = th.tanh(x @ x.T / 32)
th.cuda.synchronize() if use_gpu else None
elapsed = time.perf_counter() - start
print("checksum", round(float(x.sum()), 4))
print("memory", th.cuda.memory_allocated(), th.cuda.max_memory_reserved())
print("backend", dist.get_default_backend_for_device(device) if use_gpu else "gloo")
print("elapsed is positive", elapsed > 0)
