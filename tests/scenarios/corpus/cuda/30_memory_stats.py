"""Memory statistics logging: memory_allocated/reserved, max_memory_allocated, reset_peak, empty_cache."""
# corpus: plain=fails
import json

import torch
import torch.nn as nn


def log_memory(tag):
    alloc = torch.cuda.memory_allocated() / 2**20
    reserved = torch.cuda.memory_reserved() / 2**20
    peak = torch.cuda.max_memory_allocated() / 2**20
    print(f"[{tag}] alloc {alloc:.1f} MiB reserved {reserved:.1f} MiB peak {peak:.1f} MiB")


torch.manual_seed(30)
torch.cuda.reset_peak_memory_stats()
model = nn.Linear(64, 64).cuda()
x = torch.randn(32, 64, device="cuda")
log_memory("init")
opt = torch.optim.Adam(model.parameters())
losses = []
for _ in range(3):
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
log_memory("train")
stats = [torch.cuda.memory_allocated(), torch.cuda.max_memory_allocated(), torch.cuda.memory_reserved(),
         torch.cuda.max_memory_reserved(), torch.cuda.memory_allocated(0), torch.cuda.max_memory_allocated(device=0)]
torch.cuda.empty_cache()
torch.cuda.reset_peak_memory_stats()
print("RESULT " + json.dumps({"losses": losses, "stats_are_ints": all(isinstance(s, int) and s >= 0 for s in stats)}))
