"""torch.load(..., map_location={"cpu": "cuda:0"}): the checkpoint must load."""
import json

import torch

torch.save({"w": torch.ones(2)}, "ckpt.pt")
ckpt = torch.load("ckpt.pt", map_location={"cpu": "cuda:0"})
assert ckpt["w"].sum().item() == 2.0
print("RESULT " + json.dumps({"ran": True}))
