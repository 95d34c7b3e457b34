"""I5: assert torch.cuda.is_available() and .cuda() on every tensor, module and loss."""
# corpus: plain=fails
import json

import torch
import torch.nn as nn

assert torch.cuda.is_available(), "This script requires a CUDA GPU"
torch.manual_seed(25)
print(f"Using {torch.cuda.device_count()} GPU(s)")

model = nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 36, 3))
model.cuda()
criterion = nn.CrossEntropyLoss(weight=torch.tensor([1.0, 2.0, 1.0])).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, weight_decay=1e-4)
inputs = torch.randn(10, 2, 6, 6)
targets = torch.randint(0, 3, (10,))
losses = []
for epoch in range(4):
    inp, tgt = inputs.cuda(), targets.cuda()
    output = model(inp)
    loss = criterion(output, tgt)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    losses.append(loss.cpu().item())
print("RESULT " + json.dumps({"losses": losses, "n_gpus": torch.cuda.device_count(),
                              "bn_var": model[1].running_var.cpu().tolist()}))
