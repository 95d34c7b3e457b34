"""I1: argparse '--device cuda' default, torch.device(args.device), seeds for every RNG."""
# corpus: plain=fails
import argparse
import json
import random

import numpy as np
import torch
import torch.nn as nn


def get_args():
    p = argparse.ArgumentParser(description="train a tiny autoencoder")
    p.add_argument("--device", type=str, default="cuda", help="cuda or cpu")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--seed", type=int, default=19)
    return p.parse_args()


def main():
    args = get_args()
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.cuda.manual_seed_all(args.seed)
    device = torch.device(args.device)

    data = torch.from_numpy(np.random.rand(64, 12).astype(np.float32))
    ae = nn.Sequential(nn.Linear(12, 4), nn.Sigmoid(), nn.Linear(4, 12)).to(device)
    opt = torch.optim.RMSprop(ae.parameters(), lr=args.lr)
    history = []
    for epoch in range(args.epochs):
        perm = torch.randperm(64)
        for i in range(0, 64, 16):
            batch = data[perm[i:i + 16]].to(device)
            loss = nn.functional.mse_loss(ae(batch), batch)
            opt.zero_grad()
            loss.backward()
            opt.step()
        history.append(loss.item())
    print("RESULT " + json.dumps({"history": history, "pick": random.random()}))


if __name__ == "__main__":
    main()
