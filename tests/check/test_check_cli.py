"""`torchport check`: runs a CUDA-written script on the emulated target and reports; bad input is one line."""

import json
import os
import subprocess
import sys

import pytest

SCRIPT = """
import torch
from torch import nn
device = "cuda" if torch.cuda.is_available() else "cpu"
model = nn.Linear(8, 1).to(device)
for step in range(3):
    x = torch.randn(4 + step, 8, device=device)
    print(step, model(x).sum().item())
"""


def run_cli(*arguments, env=None):
    environment = {key: value for key, value in os.environ.items() if key != "TORCHPORT_TARGET"}
    return subprocess.run([sys.executable, "-m", "torchport", "check", *arguments],
                          capture_output=True, text=True, timeout=120, env={**environment, **(env or {})})


def test_check_runs_the_script_on_the_target_and_reports_json(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    result = run_cli("--target", "trainium", "--output-format", "json", "--output", str(tmp_path / "r.json"), str(script))
    assert result.returncode == 1, result.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["target"]["name"] == "neuron"
    assert report["shapes"]["predicted_compilations"] >= 3  # three batch sizes
    assert report["host_syncs"]["total"] == 3
    assert any("train.py:8" in site["site"] for site in report["host_syncs"]["sites"])


def test_bad_target_and_missing_script_are_one_line_errors(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    result = run_cli("--target", "tpuu", str(script))
    assert result.returncode == 2 and "Unknown target 'tpuu'" in result.stderr and "Traceback" not in result.stderr
    result = run_cli("--target", "neuron", str(tmp_path / "missing.py"))
    assert result.returncode == 2 and "does not exist" in result.stderr


def test_output_in_a_missing_folder_fails_before_the_script_runs(tmp_path):
    marker = tmp_path / "ran"
    script = tmp_path / "train.py"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    output = tmp_path / "missing" / "r.json"
    result = run_cli("--target", "neuron", "--output", str(output), str(script))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert str(output) in result.stderr and "does not exist" in result.stderr
    assert not marker.exists()
    result = run_cli("--target", "neuron", "--output", str(tmp_path), str(script))
    assert result.returncode == 2 and "is a folder" in result.stderr and not marker.exists()


def test_report_is_written_atomically_and_replaces_an_old_one(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    output = tmp_path / "r.json"
    output.write_text("old report")
    result = run_cli("--target", "cpu", "--output-format", "json", "--output", str(output), str(script))
    assert result.returncode in (0, 1), result.stderr
    assert json.loads(output.read_text())["target"]["name"] == "cpu"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["r.json", "train.py"]


def test_target_flag_and_environment_conflict_like_scan(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    output = tmp_path / "r.json"
    for command in ("check", "scan"):
        arguments = [sys.executable, "-m", "torchport", command, "--target", "xla", str(script)]
        result = subprocess.run(arguments, capture_output=True, text=True, timeout=120,
                                env={**os.environ, "TORCHPORT_TARGET": "neuron"})
        assert result.returncode == 2, (command, result.stderr)
        assert "--target 'xla' conflicts with TORCHPORT_TARGET='neuron'" in result.stderr
    result = run_cli("--output-format", "json", "--output", str(output), str(script), env={"TORCHPORT_TARGET": "xla"})
    assert result.returncode in (0, 1), result.stderr
    assert json.loads(output.read_text())["target"]["name"] == "xla"
    result = run_cli("--target", "xla", "--output-format", "json", "--output", str(output), str(script),
                     env={"TORCHPORT_TARGET": "xla"})
    assert result.returncode in (0, 1), result.stderr


USER_PROFILE_SCRIPT = """
import torch
print("memory", torch.cuda.get_device_properties(0).total_memory)
try:
    torch.ones(2, dtype=torch.float64, device="cuda")
    print("float64 accepted")
except Exception as error:
    print("float64 refused:", error)
"""


@pytest.mark.parametrize("own_names", ["", "name: mychip\ntitle: My chip\n",
                                       "name: mychip\ntitle: My chip\nemulated_name: mychip-emulated\n"])
def test_check_follows_a_user_profile_that_extends_a_builtin_one(tmp_path, own_names):
    profile = tmp_path / "mychip.yaml"
    profile.write_text(
        "extends: neuron\n" + own_names + "memory_bytes: 123456789\n"
        "dtypes:\n  float64: {status: refused, source: my manual, message: no float64 on my chip}\n"
    )
    script = tmp_path / "train.py"
    script.write_text(USER_PROFILE_SCRIPT)
    output = tmp_path / "r.json"
    result = run_cli("--target", str(profile), "--output-format", "json", "--output", str(output), str(script))
    assert result.returncode in (0, 1), result.stderr
    assert "memory 123456789" in result.stdout
    assert "float64 refused: no float64 on my chip" in result.stdout
    report = json.loads(output.read_text())
    assert report["memory"]["target_bytes"] == 123456789
    assert report["target"]["name"] == ("mychip" if own_names else "neuron")


def test_a_program_that_fails_on_the_target_is_never_ready(tmp_path):
    script = tmp_path / "crash.py"
    script.write_text("import torch\nx = torch.ones(2).cuda()\nraise ValueError('boom')\n")
    result = run_cli("--target", "neuron", "--output-format", "json", "--output", str(tmp_path / "r.json"), str(script))
    assert result.returncode == 1
    assert "ValueError: boom" in result.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["script_exit_code"] == 1
    assert report["verdict"].startswith("blocked: the program failed")
