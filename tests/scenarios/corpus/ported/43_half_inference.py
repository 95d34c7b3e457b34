"""Batch inference in fp16, hand-ported to CPU (same fp16 weights and inputs on cpu)."""
import json

import torch
import torch.nn as nn

torch.manual_seed(43)
model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.AdaptiveAvgPool2d(1),
                      nn.Flatten(), nn.Linear(8, 5))
model = model.half().eval()
images = torch.rand(4, 3, 12, 12)
with torch.no_grad():
    logits = model(images.half())
    top = logits.float().topk(2, dim=-1)
print("RESULT " + json.dumps({"dtype": str(logits.dtype), "values": top.values.tolist(),
                              "indices": top.indices.tolist()}))
