"""Gradient accumulation with AMP behind an argparse --amp flag (torch.cuda.amp API, enabled=...)."""
# corpus: plain=fails
import argparse
import json

import torch
import torch.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument("--device", default="cuda")
parser.add_argument("--amp", action=argparse.BooleanOptionalAction, default=True)
parser.add_argument("--accum-steps", type=int, default=4)
parser.add_argument("--seed", type=int, default=4)
args = parser.parse_args()

torch.manual_seed(args.seed)
torch.cuda.manual_seed_all(args.seed)

model = nn.Sequential(nn.Conv1d(4, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 16, 3)).to(args.device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.02)
scaler = torch.cuda.amp.GradScaler(enabled=args.amp)

inputs = torch.randn(64, 4, 16)
targets = torch.randint(0, 3, (64,))
losses = []
optimizer.zero_grad()
for i in range(16):
    xb = inputs[i * 4:(i + 1) * 4].to(args.device)
    yb = targets[i * 4:(i + 1) * 4].to(args.device)
    with torch.cuda.amp.autocast(enabled=args.amp):
        loss = nn.functional.cross_entropy(model(xb), yb) / args.accum_steps
    scaler.scale(loss).backward()
    if (i + 1) % args.accum_steps == 0:
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
    losses.append(loss.item())

print("RESULT " + json.dumps({"losses": losses, "scale": scaler.get_scale(), "w": model[0].weight.sum().item()}))
