"""pytorch/examples distributed/ddp-tutorial-series/multigpu_torchrun.py (BSD-3-Clause), reduced:
init_process_group(backend="nccl"), torch.cuda.set_device(LOCAL_RANK), model.to(gpu_id), DDP with
device_ids=[gpu_id], a DistributedSampler over a pinned DataLoader, a snapshot written by rank 0 and,
when it exists, loaded back with map_location=f"cuda:{gpu_id}" to resume. Success: training runs
every epoch, rank 0 writes the snapshot, and a second launch resumes from it."""
import json
import os

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader
from datautils import MyTrainDataset
from torch.utils.data.distributed import DistributedSampler
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.distributed import init_process_group, destroy_process_group


def ddp_setup():
    init_process_group(backend="nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))


class Trainer:
    def __init__(self, model, train_data, optimizer, save_every: int, snapshot_path: str) -> None:
        self.gpu_id = int(os.environ["LOCAL_RANK"])
        self.model = model.to(self.gpu_id)
        self.train_data = train_data
        self.optimizer = optimizer
        self.save_every = save_every
        self.epochs_run = 0
        self.snapshot_path = snapshot_path
        if os.path.exists(snapshot_path):
            self._load_snapshot(snapshot_path)
        self.model = DDP(self.model, device_ids=[self.gpu_id])
        self.losses = []

    def _load_snapshot(self, snapshot_path):
        loc = f"cuda:{self.gpu_id}"
        snapshot = torch.load(snapshot_path, map_location=loc)
        self.model.load_state_dict(snapshot["MODEL_STATE"])
        self.epochs_run = snapshot["EPOCHS_RUN"]

    def _run_batch(self, source, targets):
        self.optimizer.zero_grad()
        loss = F.mse_loss(self.model(source), targets)
        loss.backward()
        self.optimizer.step()
        self.losses.append(loss.item())

    def _run_epoch(self, epoch):
        self.train_data.sampler.set_epoch(epoch)
        for source, targets in self.train_data:
            source = source.to(self.gpu_id)
            targets = targets.to(self.gpu_id)
            self._run_batch(source, targets)

    def _save_snapshot(self, epoch):
        snapshot = {"MODEL_STATE": self.model.module.state_dict(), "EPOCHS_RUN": epoch + 1}
        torch.save(snapshot, self.snapshot_path)

    def train(self, max_epochs: int):
        for epoch in range(self.epochs_run, max_epochs):
            self._run_epoch(epoch)
            if self.gpu_id == 0 and epoch % self.save_every == 0:
                self._save_snapshot(epoch)


def main(save_every: int, total_epochs: int, snapshot_path: str = "snapshot.pt"):
    ddp_setup()
    torch.manual_seed(0)
    dataset = MyTrainDataset(256)
    model = torch.nn.Linear(20, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    loader = DataLoader(dataset, batch_size=32, pin_memory=True, shuffle=False, sampler=DistributedSampler(dataset))
    trainer = Trainer(model, loader, optimizer, save_every, snapshot_path)
    resumed_from = trainer.epochs_run
    trainer.train(total_epochs)
    if int(os.environ["RANK"]) == 0:
        print("RESULT " + json.dumps({"resumed_from": resumed_from, "steps": len(trainer.losses),
                                      "snapshot": os.path.exists(snapshot_path)}))
    destroy_process_group()


if __name__ == "__main__":
    import sys
    main(save_every=1, total_epochs=int(sys.argv[1]))
