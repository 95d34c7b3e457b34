"""Latency benchmark, hand-ported to CPU: events become perf_counter timestamps (ms)."""
import json
import time

import torch
import torch.nn as nn

torch.manual_seed(18)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 32)).eval()
x = torch.randn(8, 32)

timings = []
with torch.no_grad():
    for _ in range(3):
        _ = model(x)
    for rep in range(10):
        t0 = time.perf_counter()
        out = model(x)
        timings.append((time.perf_counter() - t0) * 1e3)

t0 = time.perf_counter()
y = out.softmax(-1).cumsum(-1)
total_ms = (time.perf_counter() - t0) * 1e3
print(f"mean latency {sum(timings) / len(timings):.4f} ms")
print("RESULT " + json.dumps({"out": out.sum().item(), "y": y[:, -1].tolist(), "n": len(timings),
                              "timings_ok": all(isinstance(t, float) and t >= 0 for t in timings) and total_ms >= 0,
                              "done": True}))
