"""I5: an apex/timm-style CUDA-stream data prefetcher (Stream, stream ctx, wait_stream, record_stream)."""
# corpus: plain=fails
import json

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class DataPrefetcher:
    def __init__(self, loader, mean, std):
        self.loader = iter(loader)
        self.stream = torch.cuda.Stream()
        self.mean = torch.tensor(mean).cuda().view(1, -1)
        self.std = torch.tensor(std).cuda().view(1, -1)
        self.preload()

    def preload(self):
        try:
            self.next_input, self.next_target = next(self.loader)
        except StopIteration:
            self.next_input = None
            self.next_target = None
            return
        with torch.cuda.stream(self.stream):
            self.next_input = self.next_input.cuda(non_blocking=True)
            self.next_target = self.next_target.cuda(non_blocking=True)
            self.next_input = self.next_input.float().sub_(self.mean).div_(self.std)

    def next(self):
        torch.cuda.current_stream().wait_stream(self.stream)
        inp, target = self.next_input, self.next_target
        if inp is not None:
            inp.record_stream(torch.cuda.current_stream())
        if target is not None:
            target.record_stream(torch.cuda.current_stream())
        self.preload()
        return inp, target


def main():
    torch.manual_seed(27)
    ds = TensorDataset(torch.randint(0, 255, (48, 3)).to(torch.uint8), torch.randint(0, 2, (48,)))
    loader = DataLoader(ds, batch_size=8, shuffle=True, pin_memory=True)
    model = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 2)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for epoch in range(2):
        prefetcher = DataPrefetcher(loader, [120.0, 130.0, 125.0], [60.0, 65.0, 70.0])
        inp, target = prefetcher.next()
        while inp is not None:
            loss = nn.functional.cross_entropy(model(inp), target)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            inp, target = prefetcher.next()
    print("RESULT " + json.dumps({"losses": losses}))


if __name__ == "__main__":
    main()
