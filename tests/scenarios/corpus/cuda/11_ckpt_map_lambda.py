"""Legacy loading idioms: map_location=lambda storage, loc: storage.cuda(0) and lambda storage, loc: storage."""
# corpus: plain=fails
import json
import os
import tempfile

import torch
import torch.nn as nn

torch.manual_seed(11)
gpu = 0
model = nn.GRU(input_size=4, hidden_size=6, batch_first=True).cuda(gpu)
seq = torch.randn(3, 5, 4).cuda(gpu)
out, h = model(seq)

with tempfile.TemporaryDirectory() as tmp:
    f = os.path.join(tmp, "gru.pth.tar")
    torch.save({"arch": "gru", "state_dict": model.state_dict(), "best_acc1": torch.tensor(0.5).cuda()}, f)
    checkpoint = torch.load(f, map_location=lambda storage, loc: storage.cuda(gpu))
    checkpoint_host = torch.load(f, map_location=lambda storage, loc: storage)

model2 = nn.GRU(input_size=4, hidden_size=6, batch_first=True).cuda(gpu)
model2.load_state_dict(checkpoint["state_dict"])
out2, h2 = model2(seq)
host_sum = sum(v.sum().item() for v in checkpoint_host["state_dict"].values())
print("RESULT " + json.dumps({"h": h2.flatten().tolist(), "same": bool(torch.equal(out, out2)),
                              "best": checkpoint["best_acc1"].item(), "host_sum": host_sum}))
