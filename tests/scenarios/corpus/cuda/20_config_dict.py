"""I1: a config dict with 'device': 'cuda' threaded through model, factories and the loss."""
# corpus: plain=fails
import json

import torch
import torch.nn as nn

CONFIG = {
    "device": "cuda",
    "hidden": 24,
    "lr": 0.03,
    "steps": 8,
    "seed": 20,
}


def build(cfg):
    model = nn.Sequential(nn.Linear(6, cfg["hidden"]), nn.ReLU(), nn.Linear(cfg["hidden"], 1))
    return model.to(cfg["device"])


def main(cfg=CONFIG):
    torch.manual_seed(cfg["seed"])
    model = build(cfg)
    opt = torch.optim.Adagrad(model.parameters(), lr=cfg["lr"])
    w_true = torch.arange(6, dtype=torch.float32, device=cfg["device"]) / 6
    losses = []
    for step in range(cfg["steps"]):
        x = torch.rand(20, 6, device=cfg["device"])
        y = (x @ w_true).unsqueeze(1) + torch.zeros(20, 1, device=cfg["device"])
        loss = torch.nn.functional.l1_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    mask = torch.ones(3, 3, device=cfg["device"]).triu()
    print("RESULT " + json.dumps({"losses": losses, "mask_sum": mask.sum().item()}))


if __name__ == "__main__":
    main()
