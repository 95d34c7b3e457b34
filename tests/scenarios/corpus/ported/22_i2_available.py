"""LSTM regression, hand-ported to CPU."""
import json

import torch
import torch.nn as nn

device = "cpu"
torch.manual_seed(22)

model = nn.LSTM(input_size=3, hidden_size=5, num_layers=1, batch_first=True).to(device)
head = nn.Linear(5, 1).to(device)
params = list(model.parameters()) + list(head.parameters())
opt = torch.optim.Adam(params, lr=0.02)
seq = torch.randn(6, 7, 3).to(device)
target = seq.sum(dim=(1, 2)).unsqueeze(1)
losses = []
for _ in range(5):
    out, _ = model(seq)
    loss = nn.functional.mse_loss(head(out[:, -1]), target)
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
print("RESULT " + json.dumps({"losses": losses}))
