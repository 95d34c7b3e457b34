"""EmbeddingBag classifier, hand-ported to CPU."""
import json

import torch
import torch.nn as nn


def get_device():
    return torch.device("cpu")


def main():
    device = get_device()
    torch.manual_seed(23)
    emb = nn.EmbeddingBag(30, 8, mode="mean").to(device)
    clf = nn.Linear(8, 2).to(device)
    opt = torch.optim.SGD(list(emb.parameters()) + list(clf.parameters()), lr=0.5)
    text = torch.randint(0, 30, (40,), device=device)
    offsets = torch.arange(0, 40, 5, device=device)
    labels = (text.view(8, 5).sum(1) % 2).to(device)
    losses = []
    for _ in range(6):
        loss = nn.functional.cross_entropy(clf(emb(text, offsets)), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    print("RESULT " + json.dumps({"losses": losses}))


if __name__ == "__main__":
    main()
