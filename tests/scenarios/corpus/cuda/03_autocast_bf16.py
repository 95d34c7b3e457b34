"""Small transformer-encoder step loop under bf16 autocast on cuda (no scaler needed)."""
# corpus: plain=fails
import json

import torch
import torch.nn as nn

torch.manual_seed(3)

device = torch.device("cuda:0")
layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True)
model = nn.Sequential(nn.Embedding(50, 32), nn.TransformerEncoder(layer, num_layers=2), nn.Linear(32, 50))
model = model.to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)

tokens = torch.randint(0, 50, (8, 12), device=device)
losses = []
for step in range(6):
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
        logits = model(tokens[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, 50).float(), tokens[:, 1:].reshape(-1))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    losses.append(loss.item())

print("RESULT " + json.dumps({"losses": losses, "logits_dtype": str(logits.dtype)}))
