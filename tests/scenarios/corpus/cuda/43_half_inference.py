"""Batch inference with model.half().cuda(), inputs .half(), cudnn.benchmark, torch.no_grad."""
# corpus: plain=fails
import json

import torch
import torch.nn as nn

torch.backends.cudnn.benchmark = True
torch.manual_seed(43)
model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.AdaptiveAvgPool2d(1),
                      nn.Flatten(), nn.Linear(8, 5))
model = model.half().cuda().eval()
images = torch.rand(4, 3, 12, 12)
with torch.no_grad():
    logits = model(images.cuda().half())
    top = logits.float().topk(2, dim=-1)
print("RESULT " + json.dumps({"dtype": str(logits.dtype), "values": top.values.cpu().tolist(),
                              "indices": top.indices.cpu().tolist()}))
