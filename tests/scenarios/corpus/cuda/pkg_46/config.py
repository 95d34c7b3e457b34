import torch

device = torch.device("cuda:0")
map_location = "cuda:0"
batch_size = 4
