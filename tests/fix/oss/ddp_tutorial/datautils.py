"""The tutorial series' synthetic dataset (pytorch/examples distributed/ddp-tutorial-series/datautils.py),
with targets a function of the inputs so that the loss can fall."""
import torch
from torch.utils.data import Dataset


class MyTrainDataset(Dataset):
    def __init__(self, size):
        self.size = size
        self.data = [(x, x.sum(0, keepdim=True)) for x in torch.rand(size, 20)]

    def __len__(self):
        return self.size

    def __getitem__(self, index):
        return self.data[index]
