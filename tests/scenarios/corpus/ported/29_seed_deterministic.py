"""Reproducibility boilerplate, hand-ported to CPU (torch.use_deterministic_algorithms)."""
import json
import os
import random

import numpy as np
import torch
import torch.nn as nn


def seed_everything(seed):
    random.seed(seed)
    os.environ["PYTHONHASHSEED"] = str(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True, warn_only=True)


seed_everything(29)
model = nn.Sequential(nn.Linear(10, 32), nn.Dropout(0.3), nn.ReLU(), nn.Linear(32, 1)).to("cpu")
opt = torch.optim.SGD(model.parameters(), lr=0.05)
x = torch.randn(24, 10, device="cpu")
y = torch.randn(24, 1, device="cpu")
idx = torch.randint(0, 24, (24,), device="cpu")
losses = []
for _ in range(6):
    loss = nn.functional.mse_loss(model(x[idx]), y[idx])
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
scatter = torch.zeros(5, device="cpu").index_add_(0, idx[:10] % 5, torch.ones(10, device="cpu"))
print("RESULT " + json.dumps({"losses": losses, "scatter": scatter.tolist(), "np": float(np.random.rand()),
                              "rng": torch.rand(2, device="cpu").tolist()}))
