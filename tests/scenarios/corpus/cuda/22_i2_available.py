"""I2: device = 'cuda' if torch.cuda.is_available() else 'cpu' (already runs on CPU as written)."""
# corpus: plain=runs
import json

import torch
import torch.nn as nn

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(22)
if device == "cuda":
    torch.cuda.manual_seed(22)
    torch.backends.cudnn.benchmark = True

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
