"""get_device_name / get_device_properties / get_device_capability used for logging and tf32 gating."""
# corpus: plain=fails
import json

import torch
import torch.nn as nn

torch.manual_seed(31)
dev_id = torch.cuda.current_device()
name = torch.cuda.get_device_name(dev_id)
props = torch.cuda.get_device_properties(dev_id)
major, minor = torch.cuda.get_device_capability()
print(f"GPU {dev_id}: {name}, {props.total_memory / 2**30:.1f} GiB, sm_{major}{minor}, {props.multi_processor_count} SMs")
if (major, minor) >= (8, 0):
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True

model = nn.Sequential(nn.Linear(16, 16), nn.Softplus(), nn.Linear(16, 1)).to(torch.device("cuda", dev_id))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(20, 16, device=f"cuda:{dev_id}")
losses = []
for _ in range(4):
    loss = model(x).mean().abs()
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
info_ok = isinstance(name, str) and isinstance(major, int) and isinstance(minor, int) and props.total_memory > 0
print("RESULT " + json.dumps({"losses": losses, "info_ok": info_ok, "dev_id": dev_id}))
