"""Fixed programs must keep running: run each CUDA-style program and its fixed version on CPU and
compare their outputs; the fix must also be idempotent and leave comments in place."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from torchport.cli.main import main

PROGRAMS = sorted((Path(__file__).parent / "programs").glob("*.py"))
_RUNNER = r"""
import contextlib, io, json, runpy, sys, warnings
warnings.simplefilter("ignore")
outputs = {}
for path in sys.argv[1:]:
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        runpy.run_path(path, run_name="__main__")
    outputs[path] = buffer.getvalue()
print(json.dumps(outputs))
"""


def _run_all(paths: list[Path]) -> dict[str, str]:
    environment = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    completed = subprocess.run(
        [sys.executable, "-c", _RUNNER, *map(str, paths)], capture_output=True, text=True, env=environment, timeout=300
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads(completed.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def fixed_programs(tmp_path_factory):
    """(original, safe-fixed, unsafe-fixed) copies of every program."""
    root = tmp_path_factory.mktemp("programs")
    triples = []
    for program in PROGRAMS:
        safe = root / f"safe_{program.name}"
        unsafe = root / f"unsafe_{program.name}"
        shutil.copy(program, safe)
        shutil.copy(program, unsafe)
        assert main(["fix", str(safe), "--exit-zero"]) == 0
        assert main(["fix", str(unsafe), "--unsafe-fixes", "--exit-zero"]) == 0
        triples.append((program, safe, unsafe))
    return triples


def test_fixed_programs_print_the_same_on_cpu(fixed_programs):
    paths = [path for triple in fixed_programs for path in triple]
    outputs = _run_all(paths)
    for original, safe, unsafe in fixed_programs:
        expected = outputs[str(original)]
        assert expected.strip(), f"{original.name} printed nothing: the comparison would be vacuous"
        assert outputs[str(safe)] == expected, f"safe fixes changed the output of {original.name}"
        assert outputs[str(unsafe)] == expected, f"unsafe fixes changed the output of {original.name}"


def test_fix_rewrites_toward_neutral_apis_and_keeps_comments(fixed_programs):
    original, safe, unsafe = fixed_programs[[path.name for path, _, _ in fixed_programs].index("i2_training.py")]
    text = safe.read_text()
    assert text != original.read_text()
    assert "torch.accelerator.is_available()" in text
    assert 'torch.amp.autocast("cuda"' in text and 'amp.GradScaler("cuda"' in text
    assert "torch.accelerator.set_device_index(0)" in text
    assert "# pick the GPU when there is one" in text
    assert "torch.cuda.is_available()" in text, "unsafe TP107 fixes must not apply without --unsafe-fixes"
    assert "torch.cuda.is_available()" not in unsafe.read_text()


def test_fix_is_idempotent(fixed_programs, capsys):
    for _, safe, unsafe in fixed_programs:
        before = safe.read_text(), unsafe.read_text()
        main(["fix", str(safe), "--exit-zero"])
        main(["fix", str(unsafe), "--unsafe-fixes", "--exit-zero"])
        assert (safe.read_text(), unsafe.read_text()) == before


def test_diff_writes_nothing(tmp_path, capsys):
    target = tmp_path / "prog.py"
    shutil.copy(Path(__file__).parent / "programs" / "i2_training.py", target)
    before = target.read_bytes()
    code = main(["fix", "--diff", str(target)])
    out = capsys.readouterr().out
    assert code == 1
    assert out.startswith("--- a/") and "+device = (torch.accelerator" in out
    assert target.read_bytes() == before


def test_unparsable_file_is_reported_and_left_alone(tmp_path, capsys):
    broken = tmp_path / "broken.py"
    broken.write_text("import torch\ntorch.cuda.synchronize(\n")
    before = broken.read_bytes()
    assert main(["fix", str(broken)]) == 1, "a file that was not processed must not look clean"
    err = capsys.readouterr().err
    assert f"not processed: {broken}: syntax error" in err and "1 file not processed" in err
    assert broken.read_bytes() == before
