"""model.cuda(gpu) with the ordinal in a variable whose name is not rank-like (gpu, dev, i ...):
scan reports nothing on that line and fix leaves it."""
import json

import torch

dev = 0
model = torch.nn.Linear(2, 2).cuda(dev)
assert model(torch.ones(1, 2)).shape == (1, 2)
print("RESULT " + json.dumps({"ran": True}))
