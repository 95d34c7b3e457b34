"""Host staging buffers, hand-ported to CPU (no pinning, plain copies)."""
import json

import torch

torch.manual_seed(13)
host_batches = [torch.randn(4, 32) for _ in range(4)]
staging = torch.empty(4, 32)
weights = torch.randn(32, 8, device="cpu")
acc = torch.zeros(8, device="cpu")
for hb in host_batches:
    staging.copy_(hb)
    dev = staging.to("cpu")
    acc += (dev @ weights).relu().sum(0)
result = acc.cpu()
back = torch.empty(8)
back.copy_(acc)
print("RESULT " + json.dumps({"acc": result.tolist(), "back": back.tolist()}))
