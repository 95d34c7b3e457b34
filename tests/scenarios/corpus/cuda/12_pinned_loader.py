"""DataLoader with pin_memory=True, two workers, and non_blocking host-to-device copies."""
# corpus: plain=fails
import json

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class Synthetic(Dataset):
    def __init__(self, n):
        g = torch.Generator().manual_seed(12)
        self.x = torch.randn(n, 3, 8, 8, generator=g)
        self.y = torch.randint(0, 4, (n,), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def main():
    torch.manual_seed(12)
    device = torch.device("cuda")
    loader = DataLoader(Synthetic(96), batch_size=16, shuffle=True, num_workers=2, pin_memory=True,
                        drop_last=True, persistent_workers=False)
    model = nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                          nn.Linear(6 * 16, 4)).to(device, non_blocking=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True)
    losses = []
    for epoch in range(2):
        for images, target in loader:
            images = images.cuda(non_blocking=True)
            target = target.to(device, non_blocking=True)
            loss = nn.functional.cross_entropy(model(images), target)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    print("RESULT " + json.dumps({"losses": losses}))


if __name__ == "__main__":
    main()
