"""I1: a dataclass config with device: str = 'cuda:0'; buffers created with x.new_zeros / new_full."""
# corpus: plain=fails
import json
from dataclasses import dataclass, field

import torch
import torch.nn as nn


@dataclass
class TrainConfig:
    device: str = "cuda:0"
    dim: int = 8
    steps: int = 6
    lr: float = 0.1
    betas: tuple = field(default_factory=lambda: (0.9, 0.99))


class EMAModel(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.register_buffer("running", torch.zeros(dim))

    def forward(self, x):
        y = self.proj(x)
        with torch.no_grad():
            self.running.mul_(0.9).add_(0.1 * y.mean(0))
        return y


def main():
    cfg = TrainConfig()
    torch.manual_seed(21)
    model = EMAModel(cfg.dim).to(cfg.device)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, betas=cfg.betas)
    x = torch.randn(10, cfg.dim, device=cfg.device)
    losses = []
    for _ in range(cfg.steps):
        y = model(x)
        target = x.new_zeros(x.shape)
        offset = y.new_full((cfg.dim,), 0.5)
        loss = ((y - target - offset) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    extra = x.new_ones(2, 2).sum() + x.new_tensor([1.5, 2.5]).sum() + x.new_empty(3).fill_(1).sum()
    print("RESULT " + json.dumps({"losses": losses, "running": model.running.tolist(), "extra": extra.item()}))


if __name__ == "__main__":
    main()
