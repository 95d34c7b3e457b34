"""`.is_cuda` / `.device` checks before moving batches, get_device() for bookkeeping."""
# corpus: plain=fails
import json

import torch
import torch.nn as nn


def to_gpu(batch):
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_gpu(b) for b in batch)
    if isinstance(batch, dict):
        return {k: to_gpu(v) for k, v in batch.items()}
    if torch.is_tensor(batch) and not batch.is_cuda:
        return batch.cuda(non_blocking=True)
    return batch


torch.manual_seed(28)
model = nn.Bilinear(4, 4, 2)
if not next(model.parameters()).is_cuda:
    model = model.cuda()
opt = torch.optim.Adamax(model.parameters(), lr=0.05)
losses = []
for step in range(5):
    batch = {"a": torch.randn(6, 4), "b": torch.randn(6, 4), "y": torch.randint(0, 2, (6,)), "meta": step}
    batch = to_gpu(batch)
    loss = nn.functional.cross_entropy(model(batch["a"], batch["b"]), batch["y"])
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
ordinal = batch["a"].get_device()
print("RESULT " + json.dumps({"losses": losses, "ordinal_is_int": isinstance(ordinal, int)}))
