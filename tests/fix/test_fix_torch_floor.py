"""Fixes write only the torch.accelerator functions that the oldest torch a project declares has;
the others keep their torch.cuda form. The fixed programs run with plain python."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import torchport.rules
from torchport.fix.neutral import ACCELERATOR_SINCE, TorchPin

ROOT = Path(__file__).resolve().parents[2]
XLA_PYTHON = ROOT / ".venv-xla" / "bin" / "python"

PROGRAM = """import torch

with torch.cuda.device(0):
    n = torch.cuda.device_count()
torch.cuda.reset_peak_memory_stats()
free, total = torch.cuda.mem_get_info()
print("devices", n, "memory", free >= 0 and total > 0)
"""

#: torch.accelerator calls that are memory functions (2.9) or the device context (2.8)
NEWER_THAN_2_7 = ("accelerator.device_index", "accelerator.reset_peak_memory_stats", "accelerator.get_memory_info")


def _fix(tmp_path: Path, requirement: str | None, *extra: str) -> tuple[str, str]:
    if requirement:
        (tmp_path / "requirements.txt").write_text(f"numpy\n{requirement}\n")
    program = tmp_path / "train.py"
    program.write_text(PROGRAM)
    completed = subprocess.run(
        [sys.executable, "-m", "torchport", "fix", "--unsafe-fixes", "--exit-zero", *extra, str(program)],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    fixed = program.read_text()
    again = subprocess.run(
        [sys.executable, "-m", "torchport", "fix", "--unsafe-fixes", "--diff", *extra, str(program)],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )
    assert again.returncode == 0 and not again.stdout, f"a second fix changes it:\n{again.stdout}{again.stderr}"
    return fixed, completed.stderr


def _runs(python: str | Path, tmp_path: Path) -> str:
    completed = subprocess.run([str(python), "train.py"], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                               env={"CUDA_VISIBLE_DEVICES": "", "PATH": os.environ.get("PATH", "")})
    assert completed.returncode == 0, completed.stderr
    assert "devices 1 memory True" in completed.stdout, completed.stdout
    return completed.stdout


def test_a_project_on_torch_2_7_gets_torch_cuda_for_the_functions_2_7_lacks(tmp_path):
    fixed, err = _fix(tmp_path, "torch==2.7.1")
    assert not [name for name in NEWER_THAN_2_7 if name in fixed], fixed
    assert "torch.accelerator.device_count()" in fixed, fixed
    assert "pins torch==2.7.1" in err and "torch 2.7" in err
    _runs(sys.executable, tmp_path)


def test_a_project_on_torch_2_9_keeps_the_memory_functions_but_not_get_memory_info(tmp_path):
    fixed, _ = _fix(tmp_path, "torch>=2.9")
    assert "torch.accelerator.reset_peak_memory_stats()" in fixed
    assert "torch.accelerator.device_index(" in fixed
    assert "get_memory_info" not in fixed and "torch.cuda.mem_get_info()" in fixed
    _runs(sys.executable, tmp_path)
    if not XLA_PYTHON.exists():
        pytest.skip(f"{XLA_PYTHON} (torch 2.9) is not installed: the program ran on torch {torch.__version__} only")
    _runs(XLA_PYTHON, tmp_path)


def test_a_project_without_a_torch_pin_gets_every_torch_accelerator_function(tmp_path):
    fixed, err = _fix(tmp_path, None)
    assert all(name in fixed for name in NEWER_THAN_2_7), fixed
    assert "pins torch" not in err
    _runs(sys.executable, tmp_path)


def test_torch_version_flag_sets_the_oldest_torch(tmp_path):
    fixed, _ = _fix(tmp_path, "torch==2.4.1", "--torch-version", "2.8")
    assert "torch.accelerator.device_index(" in fixed
    assert "accelerator.reset_peak_memory_stats" not in fixed and "torch.cuda.reset_peak_memory_stats()" in fixed


@pytest.mark.parametrize(
    ("specifier", "floor"),
    [("==2.7.1", (2, 7)), (">=2.6,<2.9", (2, 6)), ("~=2.8.0", (2, 8)), (">=2.0", (2, 0)), ("==2.4.1", (2, 4)),
     ("==2.7.1+cu121", (2, 7)), ("<2.8", (2, 7)), ("not a version", None)],
)
def test_the_floor_is_the_oldest_torch_a_requirement_admits(specifier, floor):
    assert TorchPin(specifier, "requirements.txt").floor == floor


def test_a_requirement_without_a_lower_bound_gets_current_code():
    floor = TorchPin("<3", "requirements.txt").floor
    assert floor is not None and floor >= max(ACCELERATOR_SINCE.values())


def test_every_torch_accelerator_function_the_fixes_write_has_its_first_release():
    rules = Path(torchport.rules.__file__).parent
    called = re.compile(r"\baccelerator\.([a-z_]\w*)\(")
    written = {name for path in rules.rglob("*.py") for name in called.findall(path.read_text())}
    assert written and not written - set(ACCELERATOR_SINCE), sorted(written - set(ACCELERATOR_SINCE))


def _has(python: str | Path) -> tuple[tuple[int, int], set[str]]:
    completed = subprocess.run(
        [str(python), "-c", "import torch; print(torch.__version__); print(' '.join(dir(torch.accelerator)))"],
        capture_output=True, text=True, timeout=120, env={"CUDA_VISIBLE_DEVICES": ""},
    )
    assert completed.returncode == 0, completed.stderr
    version, names = completed.stdout.splitlines()[-2:]
    return tuple(int(part) for part in version.split(".")[:2]), set(names.split())


@pytest.mark.parametrize("python", [sys.executable, XLA_PYTHON], ids=["current torch", "torch 2.9"])
def test_the_first_releases_agree_with_the_installed_torch(python):
    if not Path(python).exists():
        pytest.skip(f"{python} is not installed")
    version, names = _has(python)
    present = {name for name, since in ACCELERATOR_SINCE.items() if since <= version}
    assert present <= names, f"torch {version} lacks {sorted(present - names)}"
    assert not (set(ACCELERATOR_SINCE) - present) & names, f"torch {version} already has these"
