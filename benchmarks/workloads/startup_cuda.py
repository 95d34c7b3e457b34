"""A short CUDA-written script: the whole-process cost of `torchport run` is measured on it."""

import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
model = torch.nn.Linear(8, 8).to(device)
print(model(torch.ones(2, 8, device=device)).sum().item())
