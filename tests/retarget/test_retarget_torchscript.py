"""torch.jit.script of application functions and modules lands on the target.

TorchScript compiles from the original source, not from the rewritten module, so the device
constants of a scripted application function are mapped in its graph (see retarget/torchscript.py).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

APP = """\
import sys
import torch
import torch.nn as nn


@torch.jit.script
def make(n: int):
    a = torch.zeros(n, device="cuda")
    b = torch.ones(n, device=torch.device("cuda", 0))
    c = torch.full((n,), 2.0).cuda()
    d = torch.ones(n).to("cuda:0")
    return a + b + c + d, a.is_cuda, torch.device("cuda")


def helper(x):
    return x + torch.ones(x.shape, device="cuda")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(3, 3)

    def forward(self, x):
        y = self.linear(x.to(device="cuda")) + torch.zeros(3, device="cuda")
        if y.is_cuda:
            y = helper(y)
        return y


def traced(x):
    return x * torch.ones(3, device="cuda")


model = Net().cuda()
scripted = torch.jit.script(model)
total, on_cuda, device = make(3)
print("function", total.device.__str__().split(":")[0], total.tolist(), on_cuda, device.__str__().split(":")[0])
out = scripted(torch.ones(2, 3, device="cuda"))
print("module", out.device.__str__().split(":")[0], out.shape[1], torch.allclose(out, model(torch.ones(2, 3, device="cuda"))))
trace = torch.jit.trace(traced, torch.ones(3, device="cuda"))
print("trace", trace(torch.ones(3, device="cuda")).device.__str__().split(":")[0])
torch.jit.save(scripted, sys.argv[1])
loaded = torch.jit.load(sys.argv[1])
print("loaded", loaded(torch.ones(2, 3, device="cuda")).device.__str__().split(":")[0])
torch.save(torch.ones(2, 3), sys.argv[1] + ".input")
torch.save(out.cpu(), sys.argv[1] + ".expected")
"""

PLAIN_LOAD = """\
import sys
import torch
loaded = torch.jit.load(sys.argv[1])
out = loaded(torch.load(sys.argv[1] + ".input"))
print("plain", out.device.__str__().split(":")[0], torch.allclose(out, torch.load(sys.argv[1] + ".expected")))
"""


@pytest.mark.parametrize("device, device_type", [("cpu", "cpu"), ("neuron-emulated", "emulated")])
def test_scripted_functions_and_modules_with_cuda_devices_run_on_the_target(program, tmp_path, device, device_type):
    archive = tmp_path / "net.pt"
    report = tmp_path / "report.json"
    result = program(APP, "--device", device, "--precision", "keep", "--report", str(report), args=[str(archive)])
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"function {device_type} [4.0, 4.0, 4.0] True {device_type}"
    assert lines[1] == f"module {device_type} 3 True"
    assert lines[2] == f"trace {device_type}"
    assert lines[3] == f"loaded {device_type}"
    redirected = {(entry["api"], int(entry["site"].rpartition(":")[2]))
                  for entry in json.loads(report.read_text())["redirected"]}
    assert ("TorchScript device 'cuda'", 8) in redirected
    assert ("TorchScript torch.device('cuda')", 9) in redirected
    assert ("TorchScript .cuda()", 10) in redirected
    assert any(api == "TorchScript .is_cuda" and line in (11, 12) for api, line in redirected)
    assert ("TorchScript device 'cuda'", 16) in redirected  # helper, compiled for the module
    assert ("TorchScript device 'cuda'", 25) in redirected  # the module's forward


def test_a_saved_scripted_module_loads_and_runs_without_torchport(program, tmp_path):
    archive = tmp_path / "net.pt"
    result = program(APP, "--device", "cpu", "--precision", "keep", args=[str(archive)])
    assert result.returncode == 0, result.stderr
    (tmp_path / "load.py").write_text(PLAIN_LOAD)
    plain = subprocess.run([sys.executable, str(tmp_path / "load.py"), str(archive)], capture_output=True,
                           text=True, timeout=300)
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.strip() == "plain cpu True"


def test_code_outside_the_scope_keeps_its_devices_when_the_application_scripts_it(program, tmp_path):
    """Only the application's graphs are mapped, as only its Python is rewritten."""
    library = tmp_path / "vendored"
    library.mkdir()
    (library / "kernels.py").write_text(
        "import torch\n\ndef make(n: int):\n    return torch.zeros(n, device='cuda')\n")
    result = program("""\
        import torch
        from vendored import kernels

        def mine(n: int):
            return torch.zeros(n, device="cuda")

        print("library", "cuda" in torch.jit.script(kernels.make).code)
        print("application", "cuda" in torch.jit.script(mine).code, torch.jit.script(mine)(2).device.__str__().split(":")[0])
    """, "--device", "cpu", "--no-scope", str(library))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["library True", "application False cpu"]


@pytest.mark.parametrize("device, device_type", [("cpu", "cpu"), ("neuron-emulated", "emulated")])
def test_scripted_functions_annotated_with_torch_types_compile(program, device, device_type):
    # `dev: torch.device` reads the application's torch.device: TorchScript takes it as its Device type
    source = """\
    from typing import Optional
    import torch


    @torch.jit.script
    def make(n: int, dev: torch.device, like: Optional[torch.device] = None) -> torch.Tensor:
        where: torch.device = dev if like is None else like
        return torch.zeros(n, device=where)


    @torch.jit.script
    def draw(n: int, generator: Optional[torch.Generator] = None) -> torch.Tensor:
        return torch.rand(n, generator=generator)


    x = make(3, torch.device("cuda"))
    print("made", x.device.__str__().split(":")[0], x.is_cuda, make(2, torch.device("cpu")).device.__str__(),
          draw(2).shape[0])
    """
    result = program(source, "--device", device, "--precision", "keep")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines()[0] == f"made {device_type} True cpu 2"


class _Positions(torch.nn.Module):
    """A layer adding positions made on the input's device, the common idiom a trace records as a
    device constant."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)

    def forward(self, x):
        return torch.tanh(self.linear(x)) + torch.arange(x.shape[-1] - 1, device=x.device)


def _gpu_archive(path, host_path):
    """A traced module's archive as a GPU machine saves it (its storages tagged cuda:0, the device
    its trace recorded cuda:0), made from the one saved here: the same bytes but those names."""
    import zipfile

    torch.manual_seed(0)
    model = _Positions().eval()
    torch.jit.trace(model, torch.randn(2, 4)).save(str(host_path))
    with zipfile.ZipFile(host_path) as source, zipfile.ZipFile(path, "w") as archive:
        for entry in source.infolist():
            data = source.read(entry.filename)
            if entry.filename.endswith(".pkl"):
                data = data.replace(b"X\x03\x00\x00\x00cpu", b"X\x06\x00\x00\x00cuda:0")
            if entry.filename.endswith(".py"):
                data = data.replace(b'torch.device("cpu")', b'torch.device("cuda:0")')
            archive.writestr(entry.filename, data)
    assert b"cuda:0" in open(path, "rb").read()
    # scripted (never run here): a helper function making positions on 'cuda', called from forward
    torch.jit.script(_ScriptedPositions()).save(str(path.parent / "scripted.pt"))
    torch.jit.script(_ScriptedDoubling()).save(str(path.parent / "host_calls.pt"))
    with torch.no_grad():
        return model(torch.ones(2, 4)).sum().item()


@torch.jit.script
def _positions(n: int):
    return torch.arange(n, device=torch.device("cuda"))


class _ScriptedPositions(torch.nn.Module):
    def forward(self, x):
        return x + _positions(x.shape[-1])


@torch.jit.script
def _double(x):
    return x * 2


class _ScriptedDoubling(torch.nn.Module):
    def forward(self, x):
        return _double(x)


JIT_LOAD = """
import io, torch
gpu = torch.jit.load("gpu.pt")  # "save on GPU, load on GPU": no map_location
print("gpu_on_cuda=" + str(next(gpu.parameters()).is_cuda))
print("output=" + repr(gpu(torch.ones(2, 4).cuda()).sum().item()))
from_buffer = torch.jit.load(io.BytesIO(open("gpu.pt", "rb").read()))
print("buffer_on_cuda=" + str(next(from_buffer.parameters()).is_cuda))
host = torch.jit.load("host.pt")  # saved on the host: loads there, as on a GPU machine
print("host_device=" + next(host.parameters()).device.type)
scripted = torch.jit.load("scripted.pt")  # its helper function makes positions on 'cuda'
print("scripted=" + str(scripted(torch.zeros(3).cuda()).tolist()))
host_calls = torch.jit.load("host_calls.pt")  # nothing of CUDA's in it: its graph stays as saved
print("host_calls=" + str("prim::CallFunction" in str(host_calls.graph)))
import os, threading
read, write = os.pipe()  # a stream that cannot seek (a pipe, a socket): read once, as torch reads it
data = open("host.pt", "rb").read()
feeder = threading.Thread(target=lambda: (os.write(write, data), os.close(write)))
feeder.start()
piped = torch.jit.load(os.fdopen(read, "rb"))
feeder.join()
print("piped=" + next(piped.parameters()).device.type)
"""


@pytest.mark.parametrize("device", ["cpu", "neuron-emulated"])
def test_an_archive_saved_on_a_gpu_loads_on_the_target_without_map_location(program, tmp_path, device):
    expected = _gpu_archive(tmp_path / "gpu.pt", tmp_path / "host.pt")
    result = program(JIT_LOAD, "--device", device)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.values() == {"gpu_on_cuda": "True", "output": repr(expected), "buffer_on_cuda": "True",
                               "host_device": "cpu", "scripted": "[0.0, 1.0, 2.0]", "piped": "cpu",
                               "host_calls": "True"}
