"""The pytest plugin runs a project's own tests with its CUDA code on the emulated target."""

import subprocess
import sys

SUITE = """
import torch

def test_written_for_cuda():
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tensor = torch.ones(3, device=device)
    assert tensor.device.type == "cuda" and tensor.device.__str__() == "emulated:0"  # the view, the truth
    assert torch.get_device_module(tensor.device).memory_allocated() >= 12
"""


def test_suite_runs_on_the_emulated_target_only_when_asked(tmp_path):
    (tmp_path / "test_project.py").write_text(SUITE)
    command = [sys.executable, "-m", "pytest", "-q", str(tmp_path)]  # loaded by its pytest11 entry point
    retargeted = subprocess.run([*command, "--torchport-device", "neuron-emulated"], capture_output=True,
                                text=True, timeout=120, cwd=tmp_path)
    assert retargeted.returncode == 0, retargeted.stdout + retargeted.stderr
    plain = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert plain.returncode == 1 and "emulated" in plain.stdout  # the CPU run fails the device assertion


PYTHON_STAYS_PYTHON = """
import builtins
from unittest import mock

import pytest
import torch


def test_assertion_is_explained():
    total = torch.ones(2, device="cuda").sum().item()
    assert total == 3


def test_mock_patch_of_a_builtin(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCHPORT_PLUGIN_PROBE", "1")
    with mock.patch("builtins.print") as fake:
        print("hidden")
    assert fake.called and tmp_path.is_dir()


@pytest.mark.parametrize("size", [1, 2])
def test_marker_and_cuda_path(size):
    assert torch.cuda.is_available() and torch.zeros(size, device="cuda").is_cuda


def test_cuda_graph():
    torch.cuda.CUDAGraph()


def test_kernel_with_a_fallback():
    try:
        import triton  # noqa: F401
    except ImportError:
        pass


def test_conftest_fixture_is_retargeted(batch):
    assert batch.is_cuda and batch.device.type == "cpu"
"""

CONFTEST = """
import pytest
import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture
def batch():
    return torch.ones(2, device=DEVICE)
"""


def test_python_stays_python_and_unsupported_features_are_skipped_or_failed(tmp_path):
    (tmp_path / "test_app.py").write_text(PYTHON_STAYS_PYTHON)
    (tmp_path / "conftest.py").write_text(CONFTEST)
    command = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", str(tmp_path),
               "--torchport-device", "cpu"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    output = done.stdout
    assert "1 failed, 4 passed, 2 skipped" in output, output
    assert "assert 2.0 == 3" in output  # pytest's assertion rewriting kept
    assert "torch.cuda.CUDAGraph at" in output and "test_app.py:27" in output and "then failed" in output
    assert "import triton at" in output and "passed through a fallback" in output
    failing = subprocess.run([*command, "--torchport-unsupported=fail"], capture_output=True, text=True,
                             timeout=300, cwd=tmp_path)
    assert "3 failed, 4 passed" in failing.stdout, failing.stdout
