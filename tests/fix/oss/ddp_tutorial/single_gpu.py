"""pytorch/examples distributed/ddp-tutorial-series/single_gpu.py (BSD-3-Clause), reduced: the device
is the integer 0 ("shorthand for cuda:0") passed down as gpu_id, model.to(gpu_id) and
batch.to(self.gpu_id), a pinned DataLoader, a checkpoint per epoch. Success: the loss falls and the
saved checkpoint reloads."""
import json

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader
from datautils import MyTrainDataset


class Trainer:
    def __init__(self, model, train_data, optimizer, gpu_id: int, save_every: int) -> None:
        self.gpu_id = gpu_id
        self.model = model.to(gpu_id)
        self.train_data = train_data
        self.optimizer = optimizer
        self.save_every = save_every
        self.losses = []

    def _run_batch(self, source, targets):
        self.optimizer.zero_grad()
        output = self.model(source)
        loss = F.mse_loss(output, targets)
        loss.backward()
        self.optimizer.step()
        self.losses.append(loss.item())

    def _run_epoch(self, epoch):
        for source, targets in self.train_data:
            source = source.to(self.gpu_id)
            targets = targets.to(self.gpu_id)
            self._run_batch(source, targets)

    def _save_checkpoint(self, epoch):
        torch.save(self.model.state_dict(), "checkpoint.pt")

    def train(self, max_epochs: int):
        for epoch in range(max_epochs):
            self._run_epoch(epoch)
            if epoch % self.save_every == 0:
                self._save_checkpoint(epoch)


if __name__ == "__main__":
    torch.manual_seed(0)
    device = 0  # shorthand for cuda:0
    model = torch.nn.Linear(20, 1)
    loader = DataLoader(MyTrainDataset(256), batch_size=32, pin_memory=True, shuffle=True)
    trainer = Trainer(model, loader, torch.optim.SGD(model.parameters(), lr=1e-2), device, 1)
    trainer.train(4)
    reloaded = torch.nn.Linear(20, 1)
    reloaded.load_state_dict(torch.load("checkpoint.pt"))
    same = torch.equal(reloaded.weight, trainer.model.weight.detach().cpu())
    print("RESULT " + json.dumps({"first_loss": trainer.losses[0], "last_loss": trainer.losses[-1], "reloaded_same": same}))
