"""The contract, table-driven: every subcommand x {missing path, folder where a file is expected,
unwritable output, output equal to an input}. Each row asserts the exit code, the one-line message
and that no file in the project changed (nothing half-written, no source replaced).

These rows fail before any program runs, so they call `main()` in this process (fast); the rows
that run programs are in test_program_endings.py.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from contract_helpers import one_line_error, snapshot
from torchport.cli.main import main

CASE = "import torch\n\ndef case():\n    return torch.nn.Linear(2, 2), torch.randn(3, 2)\n"


@dataclass
class Row:
    id: str
    arguments: Callable[[Path], list[str]]
    message: str  # a fragment of the one-line error
    code: int = 2


def _read_only_folder(project: Path) -> str:
    if os.geteuid() == 0:
        pytest.skip("root writes into a read-only folder")
    folder = project / "locked"
    folder.mkdir()
    folder.chmod(0o555)
    return str(folder / "report.out")


def _read_only_file(project: Path) -> str:
    path = project / "old.out"
    path.write_text("previous report\n")
    path.chmod(0o444)
    return str(path)


def _case(project: Path) -> str:
    (project / "case.py").write_text(CASE)
    return f"{project / 'case.py'}:case"


ROWS = [
    # missing path
    Row("scan-missing-path", lambda p: ["scan", str(p / "nope.py")], "does not exist"),
    Row("scan-missing-config", lambda p: ["scan", "--config", str(p / "nope.toml"), str(p)], "does not exist"),
    Row("fix-missing-path", lambda p: ["fix", str(p / "nope.py")], "does not exist"),
    Row("check-missing-script", lambda p: ["check", "--target", "neuron", str(p / "nope.py")], "does not exist"),
    Row("run-missing-script", lambda p: ["run", "--device", "cpu", str(p / "nope.py")], "not found"),
    Row("run-missing-scope", lambda p: ["run", "--device", "cpu", "--scope", str(p / "nope"), str(p / "train.py")],
        "--scope"),
    Row("compare-missing-entry", lambda p: ["compare", f"{p / 'nope.py'}:case"], "nope.py"),
    Row("rule-missing-code", lambda p: ["rule", "TP999"], "TP999"),
    # a folder where a file is expected
    Row("scan-config-folder", lambda p: ["scan", "--config", str(p), str(p)], "is a folder"),
    Row("scan-output-folder", lambda p: ["scan", "--output", str(p), str(p / "train.py")], "is a folder"),
    Row("check-script-folder", lambda p: ["check", "--target", "neuron", str(p)], "is a folder"),
    Row("check-output-folder", lambda p: ["check", "--target", "neuron", "--output", str(p), str(p / "train.py")],
        "is a folder"),
    Row("run-script-folder", lambda p: ["run", "--device", "cpu", str(p)], "is a folder"),
    Row("run-report-folder", lambda p: ["run", "--device", "cpu", "--report", str(p), str(p / "train.py")],
        "is a folder"),
    Row("compare-json-folder", lambda p: ["compare", _case(p), "--json", str(p)], "is a folder"),
    # unwritable output: a missing folder, a read-only folder, a read-only file
    Row("scan-output-missing-folder", lambda p: ["scan", "--output", str(p / "no" / "r.json"), str(p)],
        "does not exist"),
    Row("scan-output-read-only-folder", lambda p: ["scan", "--output", _read_only_folder(p), str(p / "train.py")],
        "not writable"),
    Row("scan-output-read-only-file", lambda p: ["scan", "--output", _read_only_file(p), str(p / "train.py")],
        "read-only"),
    Row("check-output-missing-folder",
        lambda p: ["check", "--target", "neuron", "--output", str(p / "no" / "r.json"), str(p / "train.py")],
        "does not exist"),
    Row("run-report-missing-folder",
        lambda p: ["run", "--device", "cpu", "--report", str(p / "no" / "r.json"), str(p / "train.py")],
        "does not exist"),
    # compare checks every report path before any work: no report is written when one cannot be
    Row("compare-html-missing-folder",
        lambda p: ["compare", _case(p), "--json", str(p / "r.json"), "--html", str(p / "no" / "r.html")],
        "does not exist"),
    # output equal to an input
    Row("scan-output-is-the-input", lambda p: ["scan", "--output", str(p / "train.py"), str(p / "train.py")],
        "is also an input"),
    Row("scan-output-is-a-scanned-file", lambda p: ["scan", "--output", str(p / "clean.py"), str(p)],
        "is also an input"),
    Row("check-output-is-the-script",
        lambda p: ["check", "--target", "neuron", "--output", str(p / "train.py"), str(p / "train.py")],
        "is also an input"),
    Row("run-report-is-the-script",
        lambda p: ["run", "--device", "cpu", "--report", str(p / "train.py"), str(p / "train.py")],
        "is also an input"),
    Row("compare-json-is-the-entry", lambda p: ["compare", _case(p), "--json", str(p / "case.py")],
        "is also an input"),
    Row("compare-two-reports-one-path",
        lambda p: ["compare", _case(p), "--json", str(p / "r.out"), "--markdown", str(p / "r.out")],
        "is also an input"),
]


def _pyproject(project: Path, line: str) -> str:
    (project / "pyproject.toml").write_text(f"[tool.torchport]\n{line}\n")
    return str(project)


def _baseline(project: Path, document) -> str:
    (project / "old.json").write_text(json.dumps(document))
    return str(project / "old.json")


def _truncated(project: Path) -> str:
    (project / "old.json").write_text('{"kind": "torchport.comp')
    return str(project / "old.json")


_COMPARE = {"kind": "torchport.compare"}

def _failing_case(project: Path, body: str) -> str:
    (project / "failing.py").write_text("import sys\nimport torch\n\n" + body)
    return f"{project / 'failing.py'}:case"


FORWARD_RAISES = ("class Broken(torch.nn.Module):\n    def forward(self, x):\n        raise RuntimeError('boom')\n\n"
                  "def case():\n    return Broken(), torch.randn(2, 2)\n")

# the user's code failing inside compare is named as theirs, with its line, never as an internal error
ROWS += [
    Row("compare-entry-exits", lambda p: ["compare", _failing_case(p, "def case():\n    sys.exit(3)\n")],
        "called sys.exit(3)"),
    Row("compare-entry-module-raises", lambda p: ["compare", _failing_case(p, "raise ImportError('no dep')\n")],
        "raised ImportError: no dep"),
    Row("compare-model-forward-raises", lambda p: ["compare", _failing_case(p, FORWARD_RAISES), "--no-performance",
                                                   "--target", "cpu:bf16"], "failing.py:6"),
]

# values accepted without checking, or reported as internal errors, before
ROWS += [
    Row("scan-max-file-size-true", lambda p: ["scan", _pyproject(p, "max-file-size = true")], "max-file-size"),
    Row("scan-max-file-size-nan", lambda p: ["scan", _pyproject(p, "max-file-size = nan")], "max-file-size"),
    Row("scan-max-file-size-inf", lambda p: ["scan", _pyproject(p, "max-file-size = inf")], "max-file-size"),
    Row("scan-unknown-key-suggests", lambda p: ["scan", _pyproject(p, "exclud = ['build']")], "'exclud' -> 'exclude'"),
    Row("scan-exclude-example-is-a-glob", lambda p: ["scan", _pyproject(p, "exclude = 3")], 'exclude = ["build/*"'),
    Row("scan-target-not-a-string", lambda p: ["scan", _pyproject(p, "target = 3")], "target"),
    Row("check-timeout-nan", lambda p: ["check", "--timeout", "nan", str(p / "train.py")], "--timeout"),
    Row("check-timeout-zero", lambda p: ["check", "--timeout", "0", str(p / "train.py")], "--timeout"),
    Row("compare-min-throughput-ratio-nan", lambda p: ["compare", _case(p), "--min-throughput-ratio", "nan"],
        "--min-throughput-ratio"),
    Row("compare-max-memory-ratio-negative", lambda p: ["compare", _case(p), "--max-memory-ratio", "-1"],
        "--max-memory-ratio"),
    Row("compare-negative-regression-tolerance", lambda p: ["compare", _case(p), "--regression-tolerance", "-0.1"],
        "--regression-tolerance"),
    Row("compare-huge-batch-size", lambda p: ["compare", _case(p), "--batch-sizes", "99999999999"], "--batch-sizes"),
    Row("compare-baseline-not-json", lambda p: ["compare", _case(p), "--baseline", _truncated(p)], "is not JSON"),
    Row("compare-baseline-parity-a-list", lambda p: ["compare", _case(p), "--baseline",
                                                     _baseline(p, {**_COMPARE, "parity": [1, 2]})], "parity"),
    Row("compare-baseline-batch-without-numbers", lambda p: ["compare", _case(p), "--baseline", _baseline(
        p, {**_COMPARE, "performance": {"target": {"batches": [{"batch_size": "8"}]}}})],
        "performance.target.batches[0]"),
    Row("compare-baseline-training-a-string", lambda p: ["compare", _case(p), "--baseline",
                                                         _baseline(p, {**_COMPARE, "training": "yes"})], "training"),
]


@pytest.mark.parametrize("row", ROWS, ids=[row.id for row in ROWS])
def test_bad_path_is_one_line_error_and_changes_no_file(row, project, capsys, monkeypatch):
    monkeypatch.chdir(project)
    monkeypatch.setenv("TORCHPORT_CACHE_DIR", str(project / ".cache"))
    for variable in ("TORCHPORT_TARGET", "TORCHPORT_DEVICE", "TORCHPORT_REPORT", "TORCHPORT_SCOPE"):
        monkeypatch.delenv(variable, raising=False)
    arguments = row.arguments(project)
    before = snapshot(project)
    try:
        code = main(arguments)
    finally:
        for folder in project.iterdir():
            if folder.is_dir():
                folder.chmod(0o755)
    error = one_line_error(capsys.readouterr().err)
    assert code == row.code, error
    assert row.message in error
    assert snapshot(project) == before
    assert not any(name.endswith(".tmp") for name in os.listdir(project))
