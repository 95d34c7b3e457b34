import io
import json
import sys

import torch
import torch.nn as nn

from pkg_46 import config


def evaluate():
    torch.manual_seed(46)
    net = nn.Sequential(nn.Linear(5, 7), nn.Mish(), nn.Linear(7, 2)).to(config.device)
    buf = io.BytesIO()
    torch.save(net.state_dict(), buf)
    buf.seek(0)
    state = torch.load(buf, map_location=config.map_location)
    net.load_state_dict(state)
    data = torch.randn(3 * config.batch_size, 5)
    outs = []
    with torch.no_grad():
        for i in range(0, len(data), config.batch_size):
            outs.append(net(data[i:i + config.batch_size].to(config.device, non_blocking=True)))
    torch.cuda.synchronize(config.device)
    scores = torch.cat(outs).log_softmax(-1)
    print("RESULT " + json.dumps({"scores": scores.sum(0).tolist(), "argv0_is_main": sys.argv[0].endswith("__main__.py"),
                                  "name": __name__}))


if __name__ == "__main__":
    evaluate()
