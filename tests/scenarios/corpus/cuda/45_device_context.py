"""torch.cuda.device(...) context, set_device/current_device, torch.device('cuda', torch.cuda.current_device())."""
# corpus: plain=fails
import json

import torch
import torch.nn as nn

torch.manual_seed(45)
torch.cuda.set_device(0)
with torch.cuda.device(0):
    cur = torch.cuda.current_device()
    device = torch.device("cuda", cur)
    w = torch.randn(5, 5).cuda()  # lands on the current device
    model = nn.Linear(5, 5, bias=False).cuda(device=cur)
    with torch.no_grad():
        model.weight.copy_(w)
    x = torch.randn(3, 5, device=device)
    y = model(x)
    torch.cuda.synchronize(device)
    torch.cuda.synchronize()
    n = torch.cuda.device_count()
    shards = [torch.ones(2, device=f"cuda:{i}") * (i + 1) for i in range(n)]
    total = sum(s.to(device) for s in shards)
print("RESULT " + json.dumps({"y": y.tolist(), "cur": cur, "n": n, "total": total.tolist(),
                              "init": torch.cuda.is_initialized()}))
