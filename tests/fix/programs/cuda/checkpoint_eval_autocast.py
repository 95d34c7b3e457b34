"""An inference script: a checkpoint saved from the GPU, loaded back with map_location="cuda:0",
model.eval().cuda(), evaluation under torch.no_grad() and torch.cuda.amp.autocast(), accuracy printed."""
import json
import os
import tempfile

import torch
import torch.nn as nn

torch.manual_seed(108)
net = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2)).cuda()
x = torch.randn(80, 4).cuda()
labels = (x[:, 0] + x[:, 1] > 0).long()
opt = torch.optim.Adam(net.parameters(), lr=0.05)
for _ in range(40):
    loss = nn.functional.cross_entropy(net(x), labels)
    opt.zero_grad()
    loss.backward()
    opt.step()
with tempfile.TemporaryDirectory() as folder:
    path = os.path.join(folder, "model.pt")
    torch.save({"state_dict": net.state_dict(), "epoch": 40}, path)
    checkpoint = torch.load(path, map_location="cuda:0")
model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
model.load_state_dict(checkpoint["state_dict"])
model = model.eval().cuda()
with torch.no_grad(), torch.cuda.amp.autocast():
    logits = model(x)
accuracy = (logits.argmax(1) == labels).float().mean().item()
print("RESULT " + json.dumps({"epoch": checkpoint["epoch"], "accuracy_ok": accuracy >= 0.9,
                              "dtype": str(logits.dtype)}))
