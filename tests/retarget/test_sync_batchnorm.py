"""SyncBatchNorm under DDP on targets without its kernels: the global batch's statistics, as on CUDA.

The reference is the definition: torch's BatchNorm over the two ranks' batches concatenated in one
process. Each rank's outputs, input gradients and running statistics must be that batch norm's, and
the parameter gradients (averaged by DDP) its gradients over the number of ranks.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

RANK_PROGRAM = """
import copy, json, os, sys, torch, torch.nn as nn, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("nccl")
rank = dist.get_rank(); local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
torch.manual_seed(0)
net = nn.Sequential(nn.BatchNorm2d(4))
with torch.no_grad():
    net[0].weight.uniform_(0.5, 1.5); net[0].bias.uniform_(-0.5, 0.5)
net = nn.SyncBatchNorm.convert_sync_batchnorm(net).cuda()
model = DDP(net, device_ids=[local_rank])
g = torch.Generator().manual_seed(100 + rank)
x = (torch.randn(3 + rank, 4, 5, 5, generator=g) * (rank + 1) + 10 * rank).cuda().requires_grad_()
y = model(x)
(y.pow(2) * (torch.arange(4, device="cuda").view(1, -1, 1, 1) + 1)).sum().backward()
layer = net[0]
values = {"y": y.tolist(), "x_grad": x.grad.tolist(), "w_grad": layer.weight.grad.tolist(),
          "b_grad": layer.bias.grad.tolist(), "running_mean": layer.running_mean.tolist(),
          "running_var": layer.running_var.tolist(), "tracked": int(layer.num_batches_tracked),
          "is_sync": isinstance(layer, nn.SyncBatchNorm), "name": type(layer).__name__,
          "ema_runs": bool(copy.deepcopy(net).eval()(x.detach()).isfinite().all())}
out = sys.argv[1]
with open(os.path.join(out, f"rank{rank}.json"), "w") as handle:
    json.dump(values, handle)
if rank == 0:
    torch.save(net, os.path.join(out, "model.pt"))
dist.destroy_process_group()
"""


def _reference():
    torch.manual_seed(0)
    layer = torch.nn.BatchNorm2d(4).double()
    with torch.no_grad():
        weight = torch.empty(4).uniform_(0.5, 1.5)
        bias = torch.empty(4).uniform_(-0.5, 0.5)
        layer.weight.copy_(weight.double()); layer.bias.copy_(bias.double())
    parts = []
    for rank in range(2):
        g = torch.Generator().manual_seed(100 + rank)
        parts.append(torch.randn(3 + rank, 4, 5, 5, generator=g) * (rank + 1) + 10 * rank)
    x = torch.cat(parts).double().requires_grad_()
    y = layer(x)
    (y.pow(2) * (torch.arange(4).view(1, -1, 1, 1) + 1)).sum().backward()
    return layer, x, y


@pytest.mark.parametrize("device", ["cpu", "neuron-emulated"])
def test_sync_batchnorm_under_ddp_gives_the_global_batch_statistics(device, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(RANK_PROGRAM))
    env = {**os.environ, "TORCHPORT_QUIET": "1", "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
               "-m", "torchport", "run", "--device", device, str(script), str(tmp_path)]
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    layer, x, y = _reference()
    ranks = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(2)]
    bounds = [0, 3, 7]
    for rank, values in enumerate(ranks):
        rows = slice(bounds[rank], bounds[rank + 1])
        close = dict(rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(torch.tensor(values["y"]).double(), y[rows].detach(), **close)
        torch.testing.assert_close(torch.tensor(values["x_grad"]).double(), x.grad[rows], **close)
        torch.testing.assert_close(torch.tensor(values["w_grad"]).double(), layer.weight.grad / 2, **close)
        torch.testing.assert_close(torch.tensor(values["b_grad"]).double(), layer.bias.grad / 2, **close)
        torch.testing.assert_close(torch.tensor(values["running_mean"]).double(), layer.running_mean, **close)
        torch.testing.assert_close(torch.tensor(values["running_var"]).double(), layer.running_var, **close)
        assert values["tracked"] == 1 and values["ema_runs"]
        assert values["is_sync"] and values["name"] == "SyncBatchNorm"
    # the way back: the saved model loads without torchport as torch's own SyncBatchNorm (its tensors
    # are recorded as CUDA ones: on this machine they need a map_location, as a GPU's checkpoint does)
    load = subprocess.run([sys.executable, "-c", "import sys, torch; m = torch.load(sys.argv[1], weights_only=False, "
                           "map_location='cpu'); "
                           "print(type(m[0]).__module__, type(m[0]).__name__, m[0].running_mean.sum().item())",
                           str(tmp_path / "model.pt")], capture_output=True, text=True, timeout=120)
    assert load.returncode == 0, load.stderr
    module, name, total = load.stdout.split()
    assert (module, name) == ("torch.nn.modules.batchnorm", "SyncBatchNorm")
    assert float(total) == pytest.approx(sum(ranks[0]["running_mean"]), rel=1e-6)


def test_sync_batchnorm_in_one_process_is_reported_and_normalises_as_batch_norm(program, tmp_path):
    report = tmp_path / "report.json"
    result = program("""
        import torch
        torch.manual_seed(0)
        layer = torch.nn.SyncBatchNorm(3).cuda()
        x = torch.randn(4, 3, 2).cuda()
        expected = torch.nn.functional.batch_norm(x, None, None, training=True)
        print("close=" + str(torch.allclose(layer(x), expected, atol=1e-6)))
        print("is_sync=" + str(isinstance(layer, torch.nn.SyncBatchNorm)))
    """, "--device", "cpu", "--report", str(report))
    assert result.returncode == 0, result.stderr
    assert result.values() == {"close": "True", "is_sync": "True"}
    decisions = {d["topic"]: d for d in json.loads(report.read_text())["decisions"]}
    assert decisions["torch.nn.SyncBatchNorm"]["kind"] == "adapted"
