"""A conv classifier trained the ImageNet-example way: torch.backends.cudnn.benchmark = True,
cudnn.deterministic off, a DataLoader with pin_memory=True and .cuda(non_blocking=True) batches."""
import json

import torch
import torch.backends.cudnn as cudnn
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

cudnn.benchmark = True
torch.backends.cudnn.deterministic = False
torch.manual_seed(105)
model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.AdaptiveAvgPool2d(2),
                      nn.Flatten(), nn.Linear(16, 2)).cuda()
criterion = nn.CrossEntropyLoss().cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = TensorDataset(torch.randn(32, 1, 8, 8), torch.randint(0, 2, (32,)))
train_loader = DataLoader(data, batch_size=8, shuffle=False, pin_memory=True)
losses = []
for epoch in range(3):
    correct = 0
    for images, target in train_loader:
        images = images.cuda(non_blocking=True)
        target = target.cuda(non_blocking=True)
        output = model(images)
        loss = criterion(output, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        correct += (output.argmax(1) == target).sum().item()
    losses.append(loss.item())
print("RESULT " + json.dumps({"losses": losses, "correct": correct}))
