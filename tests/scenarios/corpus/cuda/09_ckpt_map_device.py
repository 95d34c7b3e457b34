"""Checkpoint round trip with map_location=torch.device('cuda:0') and an inference-only reload on 'cpu'."""
# corpus: plain=fails
import io
import json

import torch
import torch.nn as nn

torch.manual_seed(9)
device = torch.device("cuda:0")
net = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2))
net.to(device)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
imgs = torch.randn(8, 1, 8, 8, device=device)
lbl = torch.tensor([0, 1, 0, 1, 1, 0, 0, 1], device=device)
for _ in range(3):
    loss = nn.functional.cross_entropy(net(imgs), lbl)
    opt.zero_grad()
    loss.backward()
    opt.step()

buf = io.BytesIO()
torch.save(net.state_dict(), buf)
buf.seek(0)
on_gpu = torch.load(buf, map_location=torch.device("cuda:0"), weights_only=True)
buf.seek(0)
on_cpu = torch.load(buf, map_location="cpu")

restored = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2))
restored.load_state_dict(on_gpu)
restored = restored.to(device).eval()
with torch.no_grad():
    pred = restored(imgs).softmax(-1)
bn_mean = on_cpu["1.running_mean"].tolist()
print("RESULT " + json.dumps({"loss": loss.item(), "pred": pred.flatten().tolist(), "bn_mean": bn_mean,
                              "tracked": int(on_cpu["1.num_batches_tracked"])}))
