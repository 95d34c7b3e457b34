"""torch.load(..., map_location=f"cuda:{gpu_id}") as in pytorch/examples' ddp-tutorial-series snapshot resume: the checkpoint must load."""
import json

import torch

torch.save({"w": torch.ones(2)}, "snapshot.pt")
gpu_id = 0
snapshot = torch.load("snapshot.pt", map_location=f"cuda:{gpu_id}")
assert snapshot["w"].sum().item() == 2.0
print("RESULT " + json.dumps({"ran": True}))
