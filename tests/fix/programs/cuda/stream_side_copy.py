"""Overlapping a host-to-device copy with compute on a side stream: torch.cuda.Stream(), `with
torch.cuda.stream(s):` copies with non_blocking=True, current_stream().wait_stream(s),
record_stream on the consumed tensor, then a stream synchronize before reading back."""
import json

import torch

torch.manual_seed(107)
weight = torch.randn(16, 16).cuda()
copy_stream = torch.cuda.Stream()
chunks = [torch.randn(8, 16).pin_memory() for _ in range(4)]
total = torch.zeros(16).cuda()
for chunk in chunks:
    with torch.cuda.stream(copy_stream):
        on_device = chunk.cuda(non_blocking=True)
    torch.cuda.current_stream().wait_stream(copy_stream)
    on_device.record_stream(torch.cuda.current_stream())
    total += (on_device @ weight).tanh().sum(0)
torch.cuda.current_stream().synchronize()
print("RESULT " + json.dumps({"total": total.cpu().tolist()}))
