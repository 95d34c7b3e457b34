"""Batch moving helper, hand-ported to CPU (nothing to move)."""
import json

import torch
import torch.nn as nn


def to_device(batch):
    return batch


torch.manual_seed(28)
model = nn.Bilinear(4, 4, 2)
opt = torch.optim.Adamax(model.parameters(), lr=0.05)
losses = []
for step in range(5):
    batch = {"a": torch.randn(6, 4), "b": torch.randn(6, 4), "y": torch.randint(0, 2, (6,)), "meta": step}
    batch = to_device(batch)
    loss = nn.functional.cross_entropy(model(batch["a"], batch["b"]), batch["y"])
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
ordinal = batch["a"].get_device()
print("RESULT " + json.dumps({"losses": losses, "ordinal_is_int": isinstance(ordinal, int)}))
