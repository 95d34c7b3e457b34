"""Early stopping: the best epoch's weights kept as {k: v.cpu()} and restored at the end; validation
predictions thresholded in numpy (pred = out.cpu().numpy(); pred[pred > 0.5] = 1) before the raw outputs are scored."""
# corpus: plain=fails
import json

import torch
import torch.nn as nn

torch.manual_seed(51)
device = "cuda"
model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 1)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
x_train, y_train = torch.randn(64, 6), (torch.rand(64, 1) > 0.5).float()
x_val, y_val = torch.randn(32, 6), (torch.rand(32, 1) > 0.5).float()
best_loss, best_state, best_epoch, history = float("inf"), None, -1, []
for epoch in range(8):
    model.train()
    loss = nn.functional.binary_cross_entropy_with_logits(model(x_train.to(device)), y_train.to(device))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    model.eval()
    with torch.no_grad():
        out = torch.sigmoid(model(x_val.to(device)))
        pred = out.cpu().numpy()
        pred[pred > 0.5] = 1.0
        pred[pred <= 0.5] = 0.0
        accuracy = float((pred == y_val.numpy()).mean())
        val_loss = nn.functional.binary_cross_entropy(out, y_val.to(device)).item()
    history.append([accuracy, val_loss])
    if val_loss < best_loss:
        best_loss, best_epoch = val_loss, epoch
        best_state = {k: v.cpu() for k, v in model.state_dict().items()}
model.load_state_dict(best_state)
with torch.no_grad():
    restored = nn.functional.binary_cross_entropy(torch.sigmoid(model(x_val.to(device))), y_val.to(device)).item()
print("RESULT " + json.dumps({"history": history, "best_epoch": best_epoch, "best_loss": best_loss,
                              "restored_loss": restored}))
