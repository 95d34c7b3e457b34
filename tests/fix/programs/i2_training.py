"""A CUDA-first training loop whose CPU branch runs today (idiom I2)."""
import torch
from torch.cuda import amp
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
torch.backends.cudnn.benchmark = True
device = 'cuda' if torch.cuda.is_available() else 'cpu'  # pick the GPU when there is one
if torch.cuda.is_available():
    torch.cuda.set_device(0)

data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
loader = DataLoader(data, batch_size=16, pin_memory=True)
model = torch.nn.Linear(4, 1).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = amp.GradScaler(enabled=torch.cuda.is_available())

for epoch in range(3):
    total = 0.0
    for inputs, targets in loader:
        inputs, targets = inputs.to(device), targets.to(device)
        with torch.cuda.amp.autocast(enabled=torch.cuda.is_available()):
            loss = torch.nn.functional.mse_loss(model(inputs), targets)
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        total += float(loss)
    print(f"epoch {epoch} loss {total:.6f}")
print("peak", torch.cuda.max_memory_allocated())
