"""A `with` timer class holding two CUDA events, printing milliseconds on exit (idiom of many repos'
utils/timer.py, e.g. a TorchTimer with __enter__/__exit__ around start/end events), next to
`from time import time` for the wall clock."""
import json
from time import time

import torch
import torch.nn as nn


class TorchTimer:
    def __init__(self, name="Timed Event"):
        self.s = torch.cuda.Event(enable_timing=True)
        self.e = torch.cuda.Event(enable_timing=True)
        self.name = name
        self.elapsed = None

    def start(self):
        self.s.record()

    def end(self):
        self.e.record()
        torch.cuda.synchronize()
        return self.s.elapsed_time(self.e)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, exc_type, exc_value, exc_traceback):
        self.elapsed = self.end()
        print(f"{self.name:<20} {self.elapsed:9.3f} ms")


torch.manual_seed(101)
model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4)).cuda()
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
x, y = torch.randn(64, 16).cuda(), torch.randint(0, 4, (64,)).cuda()
losses, times = [], []
wall = time()
for step in range(6):
    with TorchTimer(f"step {step}") as timer:
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    times.append(timer.elapsed)
    losses.append(loss.item())
print(f"wall clock {time() - wall:.3f} s")
print("RESULT " + json.dumps({"losses": losses, "falls": losses[-1] < losses[0],
                              "timed": all(isinstance(t, float) and t >= 0 for t in times)}))
