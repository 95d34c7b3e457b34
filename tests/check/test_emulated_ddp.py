"""DDP with two processes on the emulated device: torchrun, gradients averaged across ranks, CPU parity."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.distributed as dist
from gloo_teardown import TEARDOWN_ABORT, relaunched

from torchport import emulated as device
from torchport.emulated import distributed
from torchport.errors import EmulatedDeviceError

# The model, the data and the training loop, shared by the scripts and the in-process reference.
COMMON = textwrap.dedent(
    """
    import torch

    STEPS, BATCH, LR = 3, 4, 0.1


    def build():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.Tanh(), torch.nn.Linear(12, 3))


    def dataset():
        generator = torch.Generator().manual_seed(1)
        return torch.utils.data.TensorDataset(
            torch.randn(2 * STEPS * BATCH, 6, generator=generator), torch.randn(2 * STEPS * BATCH, 3, generator=generator)
        )


    def loss_of(model, x, y):
        return torch.nn.functional.mse_loss(model(x), y)
    """
)

# Written for the emulated device itself: no torchport.use, the device API imported directly.
EMULATED_SCRIPT = COMMON + textwrap.dedent(
    """
    import json, sys
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler

    device_type, backend, out = sys.argv[1], sys.argv[2], sys.argv[3]
    if device_type == "emulated":
        from torchport import emulated as device

        device.activate("neuron")
    dist.init_process_group(backend)
    rank = dist.get_rank()
    model = build().to(device_type)
    if rank == 1:
        with torch.no_grad():  # DDP's broadcast at construction must undo this
            for parameter in model.parameters():
                parameter.add_(0.5)
    ddp = DDP(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=LR, momentum=0.9)
    data = dataset()
    loader = DataLoader(data, batch_size=BATCH, sampler=DistributedSampler(data, shuffle=False))
    losses = []
    for x, y in loader:
        loss = loss_of(ddp, x.to(device_type), y.to(device_type))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    state = {name: value.detach().cpu() for name, value in model.state_dict().items()}
    grads = {name: p.grad.detach().cpu() for name, p in model.named_parameters()}
    torch.save({"state": state, "grads": grads, "losses": losses,
                "device": next(model.parameters()).device.__str__(), "backend": dist.get_backend()}, f"{out}/rank{rank}.pt")
    dist.destroy_process_group()
    """
)

# Written for CUDA, run through `torchport run --device neuron-emulated` under torchrun.
CUDA_SCRIPT = COMMON + textwrap.dedent(
    """
    import os, sys
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    out = sys.argv[1]
    local_rank = int(os.environ["LOCAL_RANK"])
    dist.init_process_group("nccl")
    torch.cuda.set_device(local_rank)
    device = torch.device(f"cuda:{local_rank}")
    rank = dist.get_rank()
    model = build().to(device)
    ddp = DDP(model, device_ids=[local_rank], output_device=local_rank)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=LR, momentum=0.9)
    x_all, y_all = dataset().tensors
    losses = []
    for step in range(STEPS):
        rows = list(range(rank, 2 * STEPS * BATCH, 2))[step * BATCH:(step + 1) * BATCH]
        x, y = x_all[rows].cuda(non_blocking=True), y_all[rows].to(device)
        loss = loss_of(ddp, x, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        torch.cuda.synchronize()
        losses.append(loss.item())
    dist.barrier()
    shared = [torch.full((2,), float(rank), device="cuda")]
    dist.broadcast_object_list(shared, src=1)
    state = {name: value.detach().cpu() for name, value in model.state_dict().items()}
    torch.save({"state": state, "losses": losses, "device": next(model.parameters()).device.__str__(),
                "backend": dist.get_backend(), "real_backend": str(sys.modules["torch.distributed"].get_backend()),
                "shared": shared[0].cpu(), "shared_device": shared[0].device.__str__()},
               f"{out}/rank{rank}.pt")
    dist.destroy_process_group()
    """
)


def _namespace() -> dict:
    namespace: dict = {}
    exec(COMMON, namespace)
    return namespace


def _reference() -> tuple[dict, list[list[float]]]:
    """One process, no DDP: each step's gradient is the mean of the two ranks' batch gradients."""
    ns = _namespace()
    model = ns["build"]()
    optimizer = torch.optim.SGD(model.parameters(), lr=ns["LR"], momentum=0.9)
    x_all, y_all = ns["dataset"]().tensors
    steps, batch = ns["STEPS"], ns["BATCH"]
    losses: list[list[float]] = [[], []]
    for step in range(steps):
        optimizer.zero_grad()
        total = 0
        for rank in range(2):
            rows = list(range(rank, 2 * steps * batch, 2))[step * batch : (step + 1) * batch]
            loss = ns["loss_of"](model, x_all[rows], y_all[rows])
            losses[rank].append(loss.item())
            total = total + loss / 2
        total.backward()
        optimizer.step()
    return {name: value.detach() for name, value in model.state_dict().items()}, losses


def _torchrun(tmp_path, name: str, *arguments: str) -> list[dict]:
    out = tmp_path / name
    out.mkdir()
    environment = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", *arguments, str(out)]
    result = relaunched(
        lambda: subprocess.run(command, capture_output=True, text=True, timeout=120, env=environment, cwd=tmp_path),
        lambda result: result.returncode != 0 and TEARDOWN_ABORT in result.stderr, folder=out)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    return [torch.load(out / f"rank{rank}.pt") for rank in range(2)]


def _assert_same(first: dict, second: dict, exact: bool = True) -> None:
    assert first.keys() == second.keys()
    for name in first:
        if exact:
            assert torch.equal(first[name], second[name]), name
        else:
            torch.testing.assert_close(first[name], second[name], rtol=1e-5, atol=1e-6, msg=name)


@pytest.fixture(scope="module")
def script(tmp_path_factory):
    path = tmp_path_factory.mktemp("ddp") / "train_ddp.py"
    path.write_text(EMULATED_SCRIPT)
    return path


def test_emulated_backends_use_gloo_registered_for_the_device():
    from torchport import backends

    assert backends.get("neuron-emulated").dist_backend == distributed.BACKEND_NAME
    device.register()
    assert distributed.is_installed()
    assert dist.Backend.backend_capability[distributed.BACKEND_NAME] == ["cpu", device.DEVICE_TYPE]


def test_ddp_on_the_emulated_device_averages_gradients_and_matches_cpu_gloo(tmp_path, script):
    emulated = _torchrun(tmp_path, "emulated", str(script), "emulated", distributed.BACKEND_NAME)
    cpu = _torchrun(tmp_path, "cpu", str(script), "cpu", "gloo")
    reference, reference_losses = _reference()
    for rank in range(2):
        assert emulated[rank]["device"] == "emulated:0" and cpu[rank]["device"] == "cpu"
        assert emulated[rank]["backend"] == distributed.BACKEND_NAME
        # Same program, same collectives: the emulated device matches CPU gloo bit for bit.
        _assert_same(emulated[rank]["state"], cpu[rank]["state"])
        _assert_same(emulated[rank]["grads"], cpu[rank]["grads"])
        assert emulated[rank]["losses"] == cpu[rank]["losses"]
        # The ranks saw different data, so equal weights mean the gradients were averaged.
        torch.testing.assert_close(torch.tensor(emulated[rank]["losses"]), torch.tensor(reference_losses[rank]))
        _assert_same(emulated[rank]["state"], reference, exact=False)
    assert emulated[0]["losses"] != emulated[1]["losses"]
    _assert_same(emulated[0]["state"], emulated[1]["state"])
    _assert_same(emulated[0]["grads"], emulated[1]["grads"])


def test_cuda_written_ddp_script_runs_on_neuron_emulated_under_torchrun(tmp_path):
    script = tmp_path / "train_cuda.py"
    script.write_text(CUDA_SCRIPT)
    results = _torchrun(tmp_path, "out", "-m", "torchport", "run", "--device", "neuron-emulated", str(script))
    reference, reference_losses = _reference()
    for rank in range(2):
        assert results[rank]["device"] == "emulated:0"
        # init_process_group('nccl') became the emulated device's backend; the application, as on a
        # GPU machine, is told the group is NCCL's
        assert results[rank]["backend"] == "nccl"
        assert results[rank]["real_backend"] == distributed.BACKEND_NAME
        torch.testing.assert_close(torch.tensor(results[rank]["losses"]), torch.tensor(reference_losses[rank]))
        _assert_same(results[rank]["state"], reference, exact=False)
        # broadcast_object_list pickled a device tensor on rank 1 and unpickled it on rank 0.
        assert results[rank]["shared_device"] == "emulated:0"
        assert torch.equal(results[rank]["shared"], torch.ones(2))
    _assert_same(results[0]["state"], results[1]["state"])


@pytest.fixture
def single_process_group(target):
    target("neuron")
    dist.init_process_group(distributed.BACKEND_NAME, store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_collectives_write_into_device_memory_and_refuse_cpu_tensors(single_process_group):
    tensor = torch.arange(4.0, device=device.DEVICE_TYPE)
    dist.all_reduce(tensor)
    assert tensor.device.type == device.DEVICE_TYPE and tensor.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]
    gathered = torch.empty(4, device=device.DEVICE_TYPE)
    dist.all_gather_into_tensor(gathered, tensor)
    assert torch.equal(gathered.cpu(), tensor.cpu())
    assert dist.all_reduce(tensor, async_op=True).wait()
    dist.barrier()
    with pytest.raises(EmulatedDeviceError, match="device tensors only"):
        dist.all_gather_into_tensor(gathered, torch.ones(4))


def test_device_tensors_pickle_and_host_views_are_not_transfers(target):
    target("neuron")
    tensor = torch.arange(3.0, device=device.DEVICE_TYPE)[1:]
    restored = pickle.loads(pickle.dumps(tensor))
    assert restored.device.type == device.DEVICE_TYPE and restored.cpu().tolist() == [1.0, 2.0]

    class Recorder:
        transfers = 0
        ops = 0

        def record_op(self, info, args, kwargs):
            self.ops += 1

        def record_transfer(self, nbytes):
            self.transfers += 1

        def record_sync(self, what):
            pass

        def record_downcast(self, *args):
            pass

    recorder = Recorder()
    destination = torch.empty(2, device=device.DEVICE_TYPE)
    device.set_recorder(recorder)
    destination.copy_(device.to_host(tensor))  # what DDP does with an all-reduced bucket
    destination.copy_(torch.ones(2))  # a real host-to-device copy
    device.set_recorder(None)
    assert recorder.transfers == 1 and recorder.ops == 1
    assert destination.cpu().tolist() == [1.0, 1.0]
