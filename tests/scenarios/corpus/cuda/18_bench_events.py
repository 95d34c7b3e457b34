"""Latency benchmark with torch.cuda.Event(enable_timing=True), per-iteration events and elapsed_time."""
# corpus: plain=fails
import json

import torch
import torch.nn as nn

torch.manual_seed(18)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 32)).cuda().eval()
x = torch.randn(8, 32).cuda()

starter = torch.cuda.Event(enable_timing=True)
ender = torch.cuda.Event(enable_timing=True)
timings = []
with torch.no_grad():
    for _ in range(3):
        _ = model(x)
    for rep in range(10):
        starter.record()
        out = model(x)
        ender.record()
        torch.cuda.synchronize()
        timings.append(starter.elapsed_time(ender))

total_start = torch.cuda.Event(enable_timing=True)
total_end = torch.cuda.Event(enable_timing=True)
total_start.record(torch.cuda.current_stream())
y = out.softmax(-1).cumsum(-1)
total_end.record(torch.cuda.current_stream())
total_end.synchronize()
total_ms = total_start.elapsed_time(total_end)
print(f"mean latency {sum(timings) / len(timings):.4f} ms")
print("RESULT " + json.dumps({"out": out.sum().item(), "y": y[:, -1].tolist(), "n": len(timings),
                              "timings_ok": all(isinstance(t, float) and t >= 0 for t in timings) and total_ms >= 0,
                              "done": total_end.query()}))
