"""Helpers shared by corpus programs, imported from the script's own directory (like a project's utils.py)."""
import torch
import torch.nn as nn

DEVICE = "cuda"


class WideAndDeep(nn.Module):
    def __init__(self, n_in=6):
        super().__init__()
        self.wide = nn.Linear(n_in, 1)
        self.deep = nn.Sequential(nn.Linear(n_in, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, x):
        return self.wide(x) + self.deep(x)


def make_model():
    return WideAndDeep().cuda()


def make_batch(n, generator):
    x = torch.randn(n, 6, generator=generator)
    y = (x[:, 0] * x[:, 1]).unsqueeze(1)
    return x.to(DEVICE), y.cuda()
