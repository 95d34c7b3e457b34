"""A checkpoint written from 'cuda:0' and 'cuda:1' tensors, loaded with a dict map_location."""
# corpus: plain=fails
import json
import os
import tempfile

import torch

torch.manual_seed(10)
n_gpus = torch.cuda.device_count()
second = "cuda:1" if n_gpus > 1 else "cuda:0"
emb = torch.randn(6, 4, device="cuda:0")
head = torch.randn(4, 3).to(second)
state = {"emb": emb, "head": head, "meta": {"n_gpus": n_gpus}}

with tempfile.TemporaryDirectory() as d:
    p = os.path.join(d, "sharded.pt")
    torch.save(state, p)
    loaded = torch.load(p, map_location={"cuda:1": "cuda:0"})
    loaded_cpu = torch.load(p, map_location={"cuda:0": "cpu", "cuda:1": "cpu"})

out = loaded["emb"].to("cuda:0") @ loaded["head"].to("cuda:0")
print("RESULT " + json.dumps({"out": out.sum().item(), "rows": out.tolist()[0],
                              "cpu_equal": bool(torch.equal(loaded_cpu["emb"].cpu(), emb.cpu()))}))
