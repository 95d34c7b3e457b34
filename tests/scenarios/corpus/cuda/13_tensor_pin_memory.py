"""Explicit pinned host staging buffers (Tensor.pin_memory) copied to the GPU with non_blocking=True."""
# corpus: plain=fails
import json

import torch

torch.manual_seed(13)
host_batches = [torch.randn(4, 32).pin_memory() for _ in range(4)]
staging = torch.empty(4, 32, pin_memory=True)
weights = torch.randn(32, 8, device="cuda")
acc = torch.zeros(8, device="cuda")
for hb in host_batches:
    staging.copy_(hb)
    dev = staging.to("cuda", non_blocking=True)
    acc += (dev @ weights).relu().sum(0)
torch.cuda.synchronize()
result = acc.cpu()
back = torch.empty(8, pin_memory=True)
back.copy_(acc, non_blocking=True)
torch.cuda.current_stream().synchronize()
print("RESULT " + json.dumps({"acc": result.tolist(), "back": back.tolist()}))
