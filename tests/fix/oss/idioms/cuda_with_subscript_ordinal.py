"""model.cuda(device_ids[0]) with the ordinal read from a list, as pytorch/examples' distributed/ddp
example writes it (scan reports nothing on that line, fix leaves it)."""
import json

import torch

device_ids = [0]
model = torch.nn.Linear(2, 2).cuda(device_ids[0])
assert model(torch.ones(1, 2).to(device_ids[0])).shape == (1, 2)
print("RESULT " + json.dumps({"ran": True}))
