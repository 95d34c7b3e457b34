"""Small CNN, hand-ported to CPU (no GPU requirement; one device)."""
import json

import torch
import torch.nn as nn

torch.manual_seed(25)
print("Using 1 device(s)")

model = nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 36, 3))
criterion = nn.CrossEntropyLoss(weight=torch.tensor([1.0, 2.0, 1.0]))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, weight_decay=1e-4)
inputs = torch.randn(10, 2, 6, 6)
targets = torch.randint(0, 3, (10,))
losses = []
for epoch in range(4):
    inp, tgt = inputs, targets
    output = model(inp)
    loss = criterion(output, tgt)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
print("RESULT " + json.dumps({"losses": losses, "n_gpus": 1,
                              "bn_var": model[1].running_var.tolist()}))
