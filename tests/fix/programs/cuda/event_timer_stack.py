"""A tic/toc timer keeping a stack of CUDA start events, and an event timer that waits on the current
stream before reading (idioms of several public utils/timer.py files: torch.cuda.Event pushed per
start(), current_stream().wait_event(end), end.synchronize(), elapsed_time / 1000 for seconds)."""
import json

import torch


class Timer:
    """Simple timer which forces cuda synchronization."""

    def __init__(self):
        self.timers_start = []

    def start(self):
        start_t = torch.cuda.Event(enable_timing=True)
        start_t.record()
        self.timers_start.append(start_t)

    def stop(self):
        end_t = torch.cuda.Event(enable_timing=True)
        end_t.record()
        torch.cuda.current_stream().wait_event(end_t)
        end_t.synchronize()
        start_t = self.timers_start.pop()
        return start_t.elapsed_time(end_t) / 1000


timer = Timer()
torch.manual_seed(102)
a = torch.randn(64, 64, device="cuda")
b = torch.randn(64, 64, device="cuda")
timer.start()
acc = torch.zeros(64, 64, device="cuda")
for _ in range(5):
    timer.start()
    acc = acc + a @ b / 64
    inner = timer.stop()
outer = timer.stop()
print("RESULT " + json.dumps({"checksum": acc.sum().item(), "nested_ok": outer >= 0 and inner >= 0,
                              "empty": timer.timers_start == []}))
