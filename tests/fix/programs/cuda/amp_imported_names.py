"""Mixed precision with the names imported from torch.cuda.amp (`from torch.cuda.amp import
GradScaler, autocast`, then `scaler = GradScaler()` and `with autocast():`), the form of many
tutorials' training loops, with a `device` chosen once and `.to(device)` batches."""
import json

import torch
import torch.nn as nn
from torch.cuda.amp import GradScaler, autocast

device = torch.device("cuda")
torch.manual_seed(104)
model = nn.Sequential(nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 3)).to(device)
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
scaler = GradScaler()
images, labels = torch.randn(48, 10), torch.randint(0, 3, (48,))
losses = []
for epoch in range(5):
    model.train()
    for i in range(0, 48, 16):
        batch = images[i:i + 16].to(device)
        target = labels[i:i + 16].to(device)
        optimizer.zero_grad()
        with autocast():
            output = model(batch)
            loss = criterion(output, target)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    losses.append(loss.item())
print("RESULT " + json.dumps({"losses": losses, "falls": losses[-1] < losses[0]}))
