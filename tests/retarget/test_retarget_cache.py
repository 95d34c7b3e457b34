"""Rewritten application code is cached by source, target and rewriter, like pytest's rewritten asserts.

Each run is a fresh process (retargeting is process-wide). A small driver runs `torchport run` in
process, records which files `ast.parse` saw, and prints the cache's counters at the end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

DRIVER = textwrap.dedent("""
    import ast, json, sys
    parsed = []
    _parse = ast.parse
    def parse(source, filename="<unknown>", *args, **kwargs):
        parsed.append(str(filename))
        return _parse(source, filename, *args, **kwargs)
    ast.parse = parse
    from torchport.cli.main import main
    from torchport.retarget import transform
    status = main(["run", *sys.argv[1:]])
    print("DRIVER " + json.dumps({"status": status, "parsed": parsed, "stats": transform.CACHE_STATS}))
""")

APP = """\
import sys
import torch
order = sys.argv[1].split(",") if len(sys.argv) > 1 else ["first", "second"]
for name in order:
    module = __import__(name)
    print(name, module.make().device.__str__().split(":")[0])
x = torch.ones(2, device="cuda")
print("main", x.device.__str__().split(":")[0], torch.cuda.is_available())
"""

MODULE = """\
import torch


def make():
    return torch.zeros(2, device="cuda")
"""


@pytest.fixture
def project(tmp_path):
    root = tmp_path / "project"
    root.mkdir()
    (root / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    (root / "app.py").write_text(APP)
    (root / "first.py").write_text(MODULE)
    (root / "second.py").write_text(MODULE.replace("zeros", "ones"))
    return root


def _run(project, *arguments, env=None):
    """Run the driver; returns (stdout lines of the program, the driver's record)."""
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    environment.update(TORCHPORT_QUIET="1", TORCHPORT_CACHE_DIR=str(project.parent / "cache"), **(env or {}))
    completed = subprocess.run([sys.executable, "-c", DRIVER, *arguments], capture_output=True, text=True,
                               cwd=project, env=environment, timeout=300)
    assert completed.returncode == 0, completed.stderr
    lines = completed.stdout.splitlines()
    record = json.loads(lines[-1].removeprefix("DRIVER "))
    assert record["status"] == 0, completed.stderr
    return lines[:-1], record


def _application_parses(project, record):
    return sorted(os.path.basename(path) for path in record["parsed"] if path.startswith(str(project)))


def _entries(project):
    folder = project.parent / "cache" / "retarget" / "code"
    return sorted(os.listdir(folder)) if folder.is_dir() else []


def test_the_second_run_reads_the_rewritten_code_from_the_cache(project):
    first_output, first = _run(project, "--device", "cpu", "app.py")
    assert _application_parses(project, first) == ["app.py", "first.py", "second.py"]
    assert first["stats"]["written"] == 3
    assert len(_entries(project)) == 3
    second_output, second = _run(project, "--device", "cpu", "app.py")
    assert _application_parses(project, second) == []  # nothing of the application parsed again
    assert second["stats"]["hit"] == 3 and second["stats"]["miss"] == 0
    assert second_output == first_output == ["first cpu", "second cpu", "main cpu True"]
    assert not any(name.endswith(".pyc") for _, _, files in os.walk(project) for name in files)


def test_an_edited_module_is_rewritten_again_and_runs_as_edited(project):
    _run(project, "--device", "cpu", "app.py")
    (project / "second.py").write_text(MODULE.replace('device="cuda"', 'device="meta"'))
    (project / "app.py").write_text(APP.replace('print("main"', 'print("edited"'))
    output, record = _run(project, "--device", "cpu", "app.py")
    assert output == ["first cpu", "second meta", "edited cpu True"]
    assert _application_parses(project, record) == ["app.py", "second.py"]
    assert record["stats"]["hit"] == 1


def test_two_targets_do_not_share_entries(project):
    _run(project, "--device", "cpu", "app.py")
    output, record = _run(project, "--device", "neuron-emulated", "app.py")
    assert record["stats"]["hit"] == 0 and record["stats"]["written"] == 3
    assert output == ["first emulated", "second emulated", "main emulated True"]
    entries = _entries(project)
    assert len(entries) == 6
    assert sum(".cpu." in name for name in entries) == 3
    assert sum(".neuron-emulated." in name for name in entries) == 3


def test_call_sites_keep_their_counts_when_cached_modules_load_in_another_order(project, tmp_path):
    """Site ids depend on what a process imported before: a cached module gets this run's ids."""
    _run(project, "--device", "cpu", "app.py", "first,second")
    report = tmp_path / "report.json"
    output, record = _run(project, "--device", "cpu", "--report", str(report), "app.py", "second,second,first")
    assert record["stats"]["hit"] == 3
    assert output == ["second cpu", "second cpu", "first cpu", "main cpu True"]
    counts = {(os.path.basename(entry["site"]), entry["api"]): entry["count"]
              for entry in json.loads(report.read_text())["redirected"]}
    assert counts[("first.py:5", "device=")] == 1
    assert counts[("second.py:5", "device=")] == 2  # called twice
    assert counts[("app.py:7", "device=")] == 1


def test_a_corrupt_or_foreign_entry_is_ignored_and_rebuilt(project):
    _run(project, "--device", "cpu", "app.py")
    folder = project.parent / "cache" / "retarget" / "code"
    entries = sorted(folder.iterdir())
    entries[0].write_bytes(entries[0].read_bytes()[:-7])  # truncated
    entries[1].write_bytes(b"garbage")
    blob = bytearray(entries[2].read_bytes())
    blob[-3] ^= 0xFF  # one flipped byte in the code
    entries[2].write_bytes(bytes(blob))
    output, record = _run(project, "--device", "cpu", "app.py")
    assert output == ["first cpu", "second cpu", "main cpu True"]
    assert record["stats"]["hit"] == 0 and record["stats"]["written"] == 3
    _, again = _run(project, "--device", "cpu", "app.py")
    assert again["stats"]["hit"] == 3


def test_nothing_is_written_when_python_writes_no_bytecode(project):
    output, record = _run(project, "--device", "cpu", "app.py", env={"PYTHONDONTWRITEBYTECODE": "1"})
    assert output == ["first cpu", "second cpu", "main cpu True"]
    assert record["stats"]["written"] == 0 and _entries(project) == []


def test_a_cache_folder_that_cannot_be_created_costs_only_the_cache(project):
    (project.parent / "cache").write_text("a file where the cache folder would be")
    output, record = _run(project, "--device", "cpu", "app.py")
    assert output == ["first cpu", "second cpu", "main cpu True"]
    assert record["stats"]["written"] == 0 and record["stats"]["miss"] == 3
