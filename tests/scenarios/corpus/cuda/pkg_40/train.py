import argparse
import json

import torch

from .model import DEFAULT_DEVICE, build_model


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m pkg_40.train")
    parser.add_argument("--device", default=DEFAULT_DEVICE)
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args(argv)
    torch.manual_seed(40)
    model = build_model(args.device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.cuda.amp.GradScaler()
    x = torch.randn(8, 1, 6, 6, device=args.device)
    y = torch.randint(0, 3, (8,), device=args.device)
    losses = []
    for _ in range(args.steps):
        with torch.cuda.amp.autocast():
            loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
    print("RESULT " + json.dumps({"losses": losses, "module": __name__}))


if __name__ == "__main__":
    main()
