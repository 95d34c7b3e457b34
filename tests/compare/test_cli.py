"""`torchport compare`: reports written, exit codes for CI, baseline regressions, one-line errors."""

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from compare_devices import EMULATED, requires_emulated
from torchport.cli.main import main
from torchport.compare.reports.json_report import schema

HERE = Path(__file__).resolve().parent
QUICK = ["--batch-sizes", "1,2", "--iterations", "3", "--warmup", "1", "--output-format", "markdown"]


@pytest.fixture(autouse=True)
def importable_cases(monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.delenv("TORCHPORT_COMPARE_TARGET", raising=False)
    monkeypatch.delenv("TORCHPORT_COMPARE_REFERENCE", raising=False)


def test_agreeing_bf16_run_passes_and_writes_all_three_reports(tmp_path, capsys):
    paths = {name: tmp_path / f"result.{name}" for name in ("json", "html", "md")}
    code = main(["compare", "compare_cases:agreeing", "--reference", "cpu", "--target", "cpu:bf16", *QUICK,
                 "--json", str(paths["json"]), "--html", str(paths["html"]), "--markdown", str(paths["md"])])
    assert code == 0, capsys.readouterr().out
    document = json.loads(paths["json"].read_text())
    jsonschema.validate(document, schema())
    assert document["status"] == "pass" and document["target"] == "cpu:bf16"
    assert 'id="plot-throughput"' in paths["html"].read_text()
    assert paths["md"].read_text().startswith("# torchport compare: PASS")
    assert "# torchport compare: PASS" in capsys.readouterr().out


def test_fused_speech_encoder_under_bf16_passes_with_memory_measured(capsys):
    """The reported crash: Conv1d + TransformerEncoder in eval mode, bf16 target, performance phase on."""
    code = main(["compare", "compare_cases:fused_speech", "--target", "cpu:bf16", "--batch-sizes", "1,2",
                 "--iterations", "1", "--warmup", "1", "--output-format", "json"])
    document = json.loads(capsys.readouterr().out)
    assert code == 0, document["reasons"]
    jsonschema.validate(document, schema())
    assert document["parity"]["coverage"]["model_output_tensors"] == 1
    for side in document["performance"].values():
        for batch in side["batches"]:
            assert batch["peak_memory_bytes"] > 0 and batch["memory_note"] is None
    assert document["cost"]["unit"]["name"] == "audio_seconds"


def test_a_model_whose_output_holds_no_tensor_exits_1_saying_so(tmp_path, capsys):
    case = tmp_path / "counts_case.py"
    case.write_text(
        "import torch\n"
        "class Counts(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return {'positive': int((x > 0).sum())}\n"
        "def case():\n"
        "    return Counts(), (torch.randn(2, 4),)\n"
    )
    assert main(["compare", f"{case}:case", "--target", "cpu:bf16", "--no-performance"]) == 1
    output = capsys.readouterr().out
    assert "FAIL" in output and "nothing of the model's output was compared" in output


@requires_emulated
def test_perturbed_layer_exits_1_naming_it_and_exit_zero_overrides(capsys):
    arguments = ["compare", "compare_cases:perturbed", "--target", EMULATED, "--no-performance",
                 "--output-format", "json"]
    assert main(arguments) == 1
    document = json.loads(capsys.readouterr().out)
    assert document["parity"]["first_divergence"] == "middle"
    assert document["model"] == "perturbed stack"
    assert main([*arguments, "--exit-zero"]) == 0


def test_self_comparison_exits_1_and_says_so(capsys):
    assert main(["compare", "compare_cases:agreeing", "--reference", "cpu", "--target", "cpu",
                 "--no-performance", "--output-format", "markdown"]) == 1
    assert "SELF-COMPARISON (not a pass)" in capsys.readouterr().out


def test_a_policy_that_changes_nothing_exits_1_as_a_self_comparison(capsys):
    """cpu:fp32 (no-fp64) only downcasts float64 tensors; this model has none."""
    assert main(["compare", "compare_cases:agreeing", "--reference", "cpu", "--target", "cpu:fp32",
                 "--no-performance", "--output-format", "json"]) == 1
    document = json.loads(capsys.readouterr().out)
    assert document["status"] == "self-comparison" and document["self_comparison"] is True
    assert document["target"] == "cpu:no-fp64"
    jsonschema.validate(document, schema())


@requires_emulated
def test_environment_variable_sets_the_target_and_a_conflict_is_an_error(monkeypatch, capsys):
    monkeypatch.setenv("TORCHPORT_COMPARE_TARGET", EMULATED)
    assert main(["compare", "compare_cases:agreeing", "--no-performance", "--output-format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["target"] == EMULATED
    assert main(["compare", "compare_cases:agreeing", "--target", "cpu:bf16", "--no-performance"]) == 2
    assert "conflicts with TORCHPORT_COMPARE_TARGET" in capsys.readouterr().err


@requires_emulated
def test_baseline_reports_throughput_and_parity_regressions(tmp_path, capsys):
    baseline = tmp_path / "baseline.json"
    assert main(["compare", "compare_cases:agreeing", "--target", "cpu:bf16", *QUICK, "--json", str(baseline)]) == 0
    assert main(["compare", "compare_cases:agreeing", "--target", "cpu:bf16", *QUICK,
                 "--baseline", str(baseline), "--regression-tolerance", "1000"]) == 0
    capsys.readouterr()
    # A baseline a thousand times faster than this machine: every batch regressed.
    document = json.loads(baseline.read_text())
    for side in document["performance"].values():
        for batch in side["batches"]:
            batch["units_per_second"] *= 1000.0
    document["cost"]["ratio"] = None  # the target/reference ratio moves with machine load; not tested here
    faster = tmp_path / "faster.json"
    faster.write_text(json.dumps(document))
    assert main(["compare", "compare_cases:agreeing", "--target", "cpu:bf16", *QUICK,
                 "--baseline", str(faster), "--output-format", "json"]) == 1
    result = json.loads(capsys.readouterr().out)
    kinds = {regression["kind"] for regression in result["regressions"]}
    assert kinds == {"throughput"} and len(result["regressions"]) == 4
    jsonschema.validate(result, schema())
    # A model whose layer stops agreeing, against a baseline where it agreed.
    assert main(["compare", "compare_cases:perturbed", "--target", EMULATED, "--no-performance",
                 "--baseline", str(baseline), "--output-format", "json"]) == 1
    result = json.loads(capsys.readouterr().out)
    assert any(regression["kind"] == "parity" and regression["name"] == "middle" for regression in result["regressions"])


@requires_emulated
def test_training_case_runs_training_mode(capsys):
    assert main(["compare", "compare_cases:gpt_training", "--target", EMULATED, "--train-steps", "3",
                 "--no-performance", "--no-parity", "--output-format", "json"]) == 0
    training = json.loads(capsys.readouterr().out)["training"]
    assert training["steps"] == 3 and training["passed"]


@pytest.mark.parametrize(
    "arguments, message",
    [(["no_such_module:make"], "cannot import module 'no_such_module'"),
     (["compare_cases:missing"], "has no function 'missing'"),
     (["compare_cases"], "is not MODULE:FUNCTION"),
     (["compare_cases:not_a_model"], "not a torch.nn.Module"),
     (["compare_cases:broken"], "raised RuntimeError: weights file missing"),
     (["compare_cases:agreeing", "--target", "warp-drive"], "Unknown device 'warp-drive'"),
     (["compare_cases:agreeing", "--target", "cuda"], "Backend 'cuda' is not available"),
     (["compare_cases:agreeing", "--threshold", "float32.max_abs"], "is not DTYPE.LIMIT=NUMBER"),
     (["compare_cases:agreeing", "--batch-sizes", "0,x"], "positive integers"),
     (["compare_cases:agreeing", "--prices", "/nonexistent.yaml", "--target", "cpu:bf16"], "Cannot read price table"),
     (["compare_cases:agreeing", "--baseline", "/nonexistent.json", "--target", "cpu:bf16"], "Cannot read baseline")],
)
def test_bad_input_is_one_line_with_exit_2(arguments, message, capsys):
    assert main(["compare", *arguments, "--iterations", "1", "--batch-sizes", "1"] if "--batch-sizes" not in arguments
                else ["compare", *arguments]) == 2
    error = capsys.readouterr().err
    assert message in error and "Traceback" not in error
    assert error.count("\n") == 1


def test_console_entry_point_prints_no_traceback_for_bad_input():
    completed = subprocess.run([sys.executable, "-m", "torchport", "compare", "nowhere:make"],
                               capture_output=True, text=True, timeout=120)
    assert completed.returncode == 2
    assert completed.stderr.startswith("torchport: error: Entry point 'nowhere:make'")
    assert "Traceback" not in completed.stderr
