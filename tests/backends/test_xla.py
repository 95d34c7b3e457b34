"""The xla backend on torch_xla's CPU runtime (PJRT_DEVICE=CPU), in the environment made by
scripts/setup-xla-env.sh (torch_xla 2.9 needs torch 2.9, so it cannot share .venv)."""

import json
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
XLA_PYTHON = os.path.join(ROOT, ".venv-xla", "bin", "python")

pytestmark = pytest.mark.skipif(
    not os.path.exists(XLA_PYTHON), reason="no .venv-xla: run scripts/setup-xla-env.sh to test the xla backend"
)


def _train(command, tmp_path, name):
    result_file = tmp_path / f"{name}.json"
    environment = {**os.environ, "PJRT_DEVICE": "CPU", "TORCHPORT_QUIET": "1"}
    completed = subprocess.run(
        [*command, "--steps", "6", "--no-amp", "--result", str(result_file),
         "--checkpoint", str(tmp_path / f"{name}.pt")],
        cwd=os.path.join(ROOT, "examples"), env=environment, capture_output=True, text=True, timeout=900,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads(result_file.read_text()), completed


def test_cuda_written_training_runs_on_xla_and_tracks_the_cpu_run(tmp_path):
    report = tmp_path / "report.json"
    on_xla, completed = _train(
        [XLA_PYTHON, "-m", "torchport", "run", "--device", "xla", "--precision", "keep",
         "--report", str(report), "train_gpt_cuda.py"], tmp_path, "xla",
    )
    on_cpu, _ = _train(
        [XLA_PYTHON, "-m", "torchport", "run", "--device", "cpu", "--precision", "keep", "train_gpt_cuda.py"],
        tmp_path, "cpu",
    )
    data = json.loads(report.read_text())
    assert data["target"] == "xla"
    assert "device: XLA:CPU" in completed.stdout  # the program's own get_device_name() call
    # Two different backends (XLA's compiled CPU kernels vs eager ATen): close, not identical.
    assert len(on_xla["losses"]) == len(on_cpu["losses"]) == 6
    for xla_loss, cpu_loss in zip(on_xla["losses"], on_cpu["losses"]):
        assert abs(xla_loss - cpu_loss) <= 2e-3 * max(1.0, abs(cpu_loss)), (on_xla["losses"], on_cpu["losses"])
