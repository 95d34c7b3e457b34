"""Checkpoint with a dict map_location, hand-ported to CPU (one device, everything on cpu)."""
import json
import os
import tempfile

import torch

torch.manual_seed(10)
emb = torch.randn(6, 4, device="cpu")
head = torch.randn(4, 3).to("cpu")
state = {"emb": emb, "head": head, "meta": {"n_gpus": 1}}

with tempfile.TemporaryDirectory() as d:
    p = os.path.join(d, "sharded.pt")
    torch.save(state, p)
    loaded = torch.load(p, map_location="cpu")
    loaded_cpu = torch.load(p, map_location="cpu")

out = loaded["emb"] @ loaded["head"]
print("RESULT " + json.dumps({"out": out.sum().item(), "rows": out.tolist()[0],
                              "cpu_equal": bool(torch.equal(loaded_cpu["emb"], emb))}))
