"""A CUDA-written program compiling its model four ways (torch.compile with inductor's mode=, a
decorated function, Module.compile), trained beside an eager copy: prints one JSON line. Not a test
itself: test_retarget_emulated.py and tests/backends/test_xla.py run it and check what it prints."""
import json, torch
device = "cuda" if torch.cuda.is_available() else "cpu"


def build():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 1)).to(device)


model, eager = build(), build()
compiled = torch.compile(model, mode="reduce-overhead")

@torch.compile
def scale(x):
    return torch.sin(x) * 2

head = torch.nn.Linear(1, 1).to(device)
head.compile()
losses = {}
for name, net in (("compiled", compiled), ("eager", eager)):
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    torch.manual_seed(1)
    for _ in range(3):
        x = torch.randn(8, 16).to(device)
        loss = net(x).pow(2).mean()
        optimizer.zero_grad(); loss.backward(); optimizer.step()
    losses[name] = loss.item()
x = torch.randn(4, device=device)
print(json.dumps({"losses": losses, "scale": torch.allclose(scale(x).cpu(), (torch.sin(x) * 2).cpu()),
                  "device": next(model.parameters()).device.__str__().split(":")[0],  # the truth: str() reads "cuda"
                  "head": head(torch.ones(1, 1, device=device)).device.__str__().split(":")[0]}))
