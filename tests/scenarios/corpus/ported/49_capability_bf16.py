"""Choose the autocast dtype from the CPU's native bf16 support, hand-ported to CPU."""
import json

import torch
import torch.nn as nn


def cpu_has_native_bf16():
    try:
        with open("/proc/cpuinfo") as f:
            flags = set(f.read().split())
    except OSError:
        return False
    return bool({"avx512_bf16", "amx_bf16", "bf16"} & flags)


torch.manual_seed(49)
amp_dtype = torch.bfloat16 if cpu_has_native_bf16() else torch.float16
use_scaler = amp_dtype == torch.float16

model = nn.Sequential(nn.Linear(12, 24), nn.GELU(), nn.Linear(24, 12))
opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
scaler = torch.amp.GradScaler("cpu", enabled=use_scaler)
x = torch.randn(16, 12, device="cpu")
losses = []
for _ in range(5):
    with torch.autocast("cpu", dtype=amp_dtype):
        loss = (model(x) - x).pow(2).mean()
    opt.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    losses.append(loss.item())
print("RESULT " + json.dumps({"amp_dtype": str(amp_dtype), "losses": losses}))
