"""pytorch/tutorials recipes_source/recipes/amp_recipe.py (BSD-3-Clause), reduced to small sizes:
start_timer() / end_timer_and_print() with torch.cuda.empty_cache(),
torch.cuda.reset_max_memory_allocated(), torch.cuda.synchronize() and
torch.cuda.max_memory_allocated(); a model built with .cuda(), data made with device="cuda", a
default-precision run, then torch.cuda.amp.autocast + torch.cuda.amp.GradScaler(enabled=use_amp),
and the scaler's state_dict saved and loaded back. Success: both runs finish and the loss falls."""
import gc
import json
import time

import torch

start_time = None


def start_timer():
    global start_time
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_max_memory_allocated()
    torch.cuda.synchronize()
    start_time = time.time()


def end_timer_and_print(local_msg):
    torch.cuda.synchronize()
    end_time = time.time()
    print("\n" + local_msg)
    print("Total execution time = {:.3f} sec".format(end_time - start_time))
    print("Max memory used by tensors = {} bytes".format(torch.cuda.max_memory_allocated()))


def make_model(in_size, out_size, num_layers):
    layers = []
    for _ in range(num_layers - 1):
        layers.append(torch.nn.Linear(in_size, in_size))
        layers.append(torch.nn.ReLU())
    layers.append(torch.nn.Linear(in_size, out_size))
    return torch.nn.Sequential(*tuple(layers)).cuda()


torch.manual_seed(0)
batch_size = 32
in_size = 64
out_size = 64
num_layers = 3
num_batches = 8
epochs = 3

data = [torch.randn(batch_size, in_size, device="cuda") for _ in range(num_batches)]
targets = [0.5 * x for x in data]  # learnable targets (the recipe uses randn), so the loss can fall
loss_fn = torch.nn.MSELoss().cuda()

net = make_model(in_size, out_size, num_layers)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
start_timer()
for epoch in range(epochs):
    for input, target in zip(data, targets):
        output = net(input)
        loss = loss_fn(output, target)
        loss.backward()
        opt.step()
        opt.zero_grad()
end_timer_and_print("Default precision:")

use_amp = True
net = make_model(in_size, out_size, num_layers)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
scaler = torch.cuda.amp.GradScaler(enabled=use_amp)
losses = []
start_timer()
for epoch in range(epochs):
    for input, target in zip(data, targets):
        with torch.cuda.amp.autocast(enabled=use_amp):
            output = net(input)
            loss = loss_fn(output, target)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
        losses.append(loss.item())
end_timer_and_print("Mixed precision:")

checkpoint = {"model": net.state_dict(), "optimizer": opt.state_dict(), "scaler": scaler.state_dict()}
net.load_state_dict(checkpoint["model"])
opt.load_state_dict(checkpoint["optimizer"])
scaler.load_state_dict(checkpoint["scaler"])
print("RESULT " + json.dumps({"first_loss": losses[0], "last_loss": losses[-1]}))
