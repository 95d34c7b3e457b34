"""Tensor = torch.cuda.FloatTensor, then Tensor(n, 1).fill_(1.0): the legacy typed constructor that
GAN training scripts use for their real/fake labels."""
import json

import torch

Tensor = torch.cuda.FloatTensor
valid = Tensor(4, 1).fill_(1.0)
assert valid.sum().item() == 4.0
print("RESULT " + json.dumps({"ran": True}))
