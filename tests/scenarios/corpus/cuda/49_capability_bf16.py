"""Choose the autocast dtype from torch.cuda.get_device_capability() (bf16 on sm_80+, else fp16 + GradScaler)."""
# corpus: plain=fails
import json

import torch
import torch.nn as nn

torch.manual_seed(49)
major, _ = torch.cuda.get_device_capability()
amp_dtype = torch.bfloat16 if major >= 8 else torch.float16
use_scaler = amp_dtype == torch.float16

model = nn.Sequential(nn.Linear(12, 24), nn.GELU(), nn.Linear(24, 12)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
scaler = torch.cuda.amp.GradScaler(enabled=use_scaler)
x = torch.randn(16, 12, device="cuda")
losses = []
for _ in range(5):
    with torch.autocast("cuda", dtype=amp_dtype):
        loss = (model(x) - x).pow(2).mean()
    opt.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    losses.append(loss.item())
print("RESULT " + json.dumps({"amp_dtype": str(amp_dtype), "losses": losses}))
