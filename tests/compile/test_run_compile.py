"""`torchport run --compile`: the CUDA-written example trains with its model compiled for the target."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow
def test_run_compile_trains_the_cuda_example_and_reports_compilations(tmp_path):
    report = tmp_path / "report.json"
    result = tmp_path / "result.json"
    environment = {**os.environ, "TORCHPORT_QUIET": ""}
    environment.pop("TORCHPORT_QUIET")
    completed = subprocess.run(
        [sys.executable, "-m", "torchport", "run", "--device", "cpu", "--precision", "keep", "--compile",
         "--report", str(report), "train_gpt_cuda.py", "--steps", "3", "--n-embd", "32", "--n-layer", "1",
         "--batch-size", "4", "--block-size", "16", "--no-amp", "--result", str(result),
         "--checkpoint", str(tmp_path / "ckpt.pt")],
        cwd=os.path.join(ROOT, "examples"), env=environment, capture_output=True, text=True, timeout=900,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    data = json.loads(report.read_text())
    compiled = data["compile"]
    assert [entry["model"] for entry in compiled] == ["GPT", "GPT"]  # the trained model and the restored one
    trained = compiled[0]
    assert trained["compiler"] == "inductor"
    assert trained["compilations"] >= 1 and trained["calls"] == 3
    assert trained["eager_calls"] == 1  # the first call observes shapes
    assert "  compile: 2 model(s), " in completed.stderr
    assert "    GPT: " in completed.stderr and " compilation(s) with inductor for cpu in " in completed.stderr
    losses = json.loads(result.read_text())["losses"]
    assert len(losses) == 3 and all(loss == loss for loss in losses)
