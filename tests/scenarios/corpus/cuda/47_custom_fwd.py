"""A custom autograd Function decorated with torch.cuda.amp.custom_fwd/custom_bwd, used under cuda autocast."""
# corpus: plain=fails
import json

import torch
import torch.nn as nn


class ScaledTanh(torch.autograd.Function):
    @staticmethod
    @torch.cuda.amp.custom_fwd(cast_inputs=torch.float32)
    def forward(ctx, x, scale):
        y = torch.tanh(x) * scale
        ctx.save_for_backward(y)
        ctx.scale = scale
        return y

    @staticmethod
    @torch.cuda.amp.custom_bwd
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * (ctx.scale - y * y / ctx.scale), None


torch.manual_seed(47)
lin = nn.Linear(6, 6).cuda()
opt = torch.optim.SGD(lin.parameters(), lr=0.1)
scaler = torch.cuda.amp.GradScaler()
x = torch.randn(10, 6).cuda()
losses, dtypes = [], []
for _ in range(4):
    with torch.cuda.amp.autocast(dtype=torch.float16):
        h = lin(x)
        y = ScaledTanh.apply(h, 2.0)
        loss = y.pow(2).mean()
    dtypes.append([str(h.dtype), str(y.dtype)])
    opt.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    losses.append(loss.item())
print("RESULT " + json.dumps({"losses": losses, "dtypes": dtypes}))
