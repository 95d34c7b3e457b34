"""Fixes write device-neutral code for the torch the project declares, say why each unsafe fix
changes behaviour, and list what is left for a person with the reason."""

from __future__ import annotations

import subprocess
import sys

import pytest

from torchport.cli.main import main
from torchport.fix.neutral import TorchPin

PROGRAM = """import torch
import torch.distributed as dist

device = torch.device('cuda')
x = torch.ones(2, device='cuda')
model = torch.nn.Linear(2, 1).cuda()
if torch.cuda.is_available():
    torch.cuda.set_device(0)
print(model(x.to(device)).shape, dist.is_available())
"""


@pytest.mark.parametrize(
    ("specifier", "legacy"),
    [("==2.4.1", True), (">=2.1,<2.6", True), ("~=2.5.0", True), (">=2.0", False), ("<3", False), ("==2.6.0", False)],
)
def test_a_pin_is_legacy_when_no_torch_with_accelerator_satisfies_it(specifier, legacy):
    assert TorchPin(specifier, "requirements.txt").legacy is legacy


def _fixed(tmp_path, manifest: str | None, content: str, *extra) -> tuple[str, str]:
    if manifest:
        (tmp_path / manifest).write_text(content)
    program = tmp_path / "train.py"
    program.write_text(PROGRAM)
    completed = subprocess.run(
        [sys.executable, "-m", "torchport", "fix", "--unsafe-fixes", "--exit-zero", *extra, str(program)],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    return program.read_text(), completed.stderr


def _runs(tmp_path, text: str) -> None:
    completed = subprocess.run([sys.executable, "-c", text], capture_output=True, text=True, timeout=120,
                               env={"CUDA_VISIBLE_DEVICES": "", "PATH": ""}, cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr
    assert "torch.Size([1])" in completed.stdout


def test_a_project_pinning_torch_below_2_6_gets_code_without_torch_accelerator(tmp_path):
    text, err = _fixed(tmp_path, "requirements.txt", "numpy\ntorch==2.4.1  # the cluster's build\n")
    assert "torch.accelerator" not in text
    assert 'torch.device("cuda" if torch.cuda.is_available() else "mps"' in text
    assert "pins torch==2.4.1" in err
    _runs(tmp_path, text)


def test_a_project_on_current_torch_gets_torch_accelerator(tmp_path):
    text, _ = _fixed(tmp_path, "pyproject.toml", '[project]\ndependencies = ["torch>=2.6"]\n')
    assert "device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else" in text
    assert ".to(device)" in text, "the module's device name is used where the device is needed"
    _runs(tmp_path, text)


def test_torch_version_flag_overrides_the_pin(tmp_path):
    text, _ = _fixed(tmp_path, None, "", "--torch-version", "2.5")
    assert "torch.accelerator" not in text


def test_diff_gives_a_reason_per_unsafe_fix_and_exits_1(tmp_path, capsys):
    program = tmp_path / "train.py"
    program.write_text(PROGRAM)
    assert main(["fix", "--diff", "--unsafe-fixes", str(program)]) == 1
    out = capsys.readouterr().out
    assert f"# {program}:5: TP104 (unsafe): tensors are created on the local accelerator" in out
    assert out.index("# ") < out.index("--- a/")
    assert program.read_text() == PROGRAM


def test_what_is_left_is_listed_with_the_reason(tmp_path, capsys):
    program = tmp_path / "bench.py"
    program.write_text("import torch\nstart = torch.cuda.Event(enable_timing=True)\nx = torch.ones(1).cuda()\n")
    assert main(["fix", str(program)]) == 1
    err = capsys.readouterr().err
    assert "TP205" in err and "TP102" in err
    assert "its fix changes behaviour: run fix --unsafe-fixes" in err


def test_the_device_name_is_used_only_where_it_reaches():
    from torchport.fix.engine import fix_source
    from torchport.rules.registry import all_rules

    source = (
        "import torch\n"
        "early = torch.ones(1).cuda()\n"
        "device = 'cuda'  # the GPU\n"
        "model = torch.nn.Linear(4, 2).cuda()\n"
        "def step(batch):\n"
        "    with torch.autocast('cuda', dtype=torch.bfloat16):\n"
        "        return model(batch.cuda())\n"
        "def other(device):\n"
        "    return torch.zeros(2, device='cuda')\n"
    )
    codes = tuple(rule.code for rule in all_rules())
    fixed = fix_source(source, "train.py", codes, unsafe=True).fixed
    lines = fixed.splitlines()
    assert lines[1].startswith("early = torch.ones(1).to(torch.accelerator"), "code before the binding keeps its copy"
    assert lines[2] == 'device = torch.accelerator.current_accelerator().type if torch.accelerator.is_available() ' \
                       'else "cpu"  # the GPU'
    assert lines[3] == "model = torch.nn.Linear(4, 2).to(device)"
    assert lines[5] == "    with torch.autocast(device, dtype=torch.bfloat16):"
    assert lines[6] == "        return model(batch.to(device))"
    assert "device=(torch.accelerator" in lines[8], "a function with its own `device` keeps its copy"
    assert fix_source(fixed, "train.py", codes, unsafe=True).fixed == fixed
