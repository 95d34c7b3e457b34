"""A benchmark decorator built on `timer = partial(Event, enable_timing=True)` after `from torch.cuda
import Event` (the idiom of public utils/benchmark.py files): each call returns its output and the
milliseconds between two recorded events, after a synchronize."""
import json
from functools import partial, wraps

import torch
from torch.cuda import Event

timer = partial(Event, enable_timing=True)


def benchmark(fn):
    @wraps(fn)
    def inner(*args, **kwargs):
        start_event = timer()
        end_event = timer()
        start_event.record()
        out = fn(*args, **kwargs)
        end_event.record()
        torch.cuda.synchronize()
        elapsed_time_ms = start_event.elapsed_time(end_event)
        return out, elapsed_time_ms
    return inner


@benchmark
def attention(q, k, v):
    weights = torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, dim=-1)
    return weights @ v


torch.manual_seed(111)
q, k, v = (torch.randn(2, 8, 16, device="cuda") for _ in range(3))
outputs, times = [], []
for _ in range(4):
    out, ms = attention(q, k, v)
    outputs.append(out.sum().item())
    times.append(ms)
print(f"mean {sum(times) / len(times):.4f} ms")
print("RESULT " + json.dumps({"checksums": outputs, "timed": all(isinstance(t, float) and t >= 0 for t in times)}))
