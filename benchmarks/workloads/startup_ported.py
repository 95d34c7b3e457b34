"""The hand port of startup_cuda.py: the same work on the accelerator, or the CPU."""

import torch

accelerator = torch.accelerator.current_accelerator()
device = accelerator.type if accelerator is not None else "cpu"
model = torch.nn.Linear(8, 8).to(device)
print(model(torch.ones(2, 8, device=device)).sum().item())
