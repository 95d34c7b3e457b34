"""Resume AMP training, hand-ported to CPU."""
import json
import os
import tempfile

import torch
import torch.nn as nn

device = torch.device("cpu")


def make():
    torch.manual_seed(44)
    model = nn.Sequential(nn.Linear(9, 18), nn.ReLU(), nn.Linear(18, 1)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=12)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=3)
    return model, opt, sched, scaler


def run(model, opt, sched, scaler, steps, start):
    out = []
    for s in range(start, start + steps):
        g = torch.Generator().manual_seed(s)
        x = torch.randn(16, 9, generator=g).to(device)
        y = x.mean(1, keepdim=True)
        with torch.autocast("cpu", dtype=torch.float16):
            loss = nn.functional.mse_loss(model(x).float(), y)
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        sched.step()
        out.append(loss.item())
    return out


model, opt, sched, scaler = make()
first = run(model, opt, sched, scaler, 6, 0)
with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "last.pt")
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict(),
                "scaler": scaler.state_dict()}, path)
    model, opt, sched, scaler = make()
    ckpt = torch.load(path, map_location=device)
model.load_state_dict(ckpt["model"])
opt.load_state_dict(ckpt["opt"])
sched.load_state_dict(ckpt["sched"])
scaler.load_state_dict(ckpt["scaler"])
second = run(model, opt, sched, scaler, 6, 6)
print("RESULT " + json.dumps({"first": first, "second": second, "scaler": scaler.state_dict(),
                              "lr": sched.get_last_lr()}))
