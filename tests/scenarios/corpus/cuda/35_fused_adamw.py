"""Fused AdamW gated on device_type == 'cuda' (nanoGPT configure_optimizers style)."""
# corpus: plain=fails
import inspect
import json

import torch
import torch.nn as nn

torch.manual_seed(35)
device = "cuda"
device_type = "cuda" if "cuda" in device else "cpu"
model = nn.Sequential(nn.Linear(10, 20), nn.LayerNorm(20), nn.Linear(20, 10)).to(device)

param_dict = {pn: p for pn, p in model.named_parameters() if p.requires_grad}
decay = [p for n, p in param_dict.items() if p.dim() >= 2]
nodecay = [p for n, p in param_dict.items() if p.dim() < 2]
groups = [{"params": decay, "weight_decay": 0.1}, {"params": nodecay, "weight_decay": 0.0}]
fused_available = "fused" in inspect.signature(torch.optim.AdamW).parameters
use_fused = fused_available and device_type == "cuda"
extra_args = dict(fused=True) if use_fused else dict()
optimizer = torch.optim.AdamW(groups, lr=3e-3, betas=(0.9, 0.95), **extra_args)
print(f"using fused AdamW: {use_fused}")

x = torch.randn(8, 10, device=device)
losses = []
for _ in range(5):
    loss = (model(x) - x.flip(1)).pow(2).mean()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
print("RESULT " + json.dumps({"losses": losses, "fused": use_fused}))
