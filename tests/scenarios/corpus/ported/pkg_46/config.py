import torch

device = torch.device("cpu")
map_location = "cpu"
batch_size = 4
