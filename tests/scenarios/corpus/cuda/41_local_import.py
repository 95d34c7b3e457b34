"""A script importing its model and data helpers from a sibling module (corpus_nets.py) that uses .cuda()."""
# corpus: plain=fails helpers=corpus_nets.py
import json

import torch

from corpus_nets import DEVICE, make_batch, make_model

torch.manual_seed(41)
gen = torch.Generator().manual_seed(410)
model = make_model()
opt = torch.optim.Adam(model.parameters(), lr=0.01)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
losses = []
for _ in range(6):
    x, y = make_batch(32, gen)
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    sched.step()
    losses.append(loss.item())
probe = torch.linspace(-1, 1, 6, device=DEVICE).unsqueeze(0)
print("RESULT " + json.dumps({"losses": losses, "probe": model(probe).item(), "lr": sched.get_last_lr()}))
