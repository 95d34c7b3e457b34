"""A seed_everything helper (random, numpy-free, torch.manual_seed, torch.cuda.manual_seed_all,
cudnn.deterministic = True, cudnn.benchmark = False) and a run that checks it repeats itself."""
import json
import random

import torch
import torch.nn as nn


def seed_everything(seed):
    random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False


def run():
    seed_everything(110)
    model = nn.Sequential(nn.Linear(5, 5), nn.Dropout(0.2), nn.Linear(5, 1)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(20, 5, device="cuda")
    for _ in range(5):
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    torch.cuda.empty_cache()
    return loss.item()


first, second = run(), run()
print("RESULT " + json.dumps({"loss": first, "repeats": first == second}))
