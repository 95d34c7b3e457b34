"""The pytest plugin runs a project's own tests with its CUDA code on the emulated target."""

import subprocess
import sys

SUITE = """
import torch

def test_written_for_cuda():
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tensor = torch.ones(3, device=device)
    assert tensor.device.type == "emulated"
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
