"""The contract for source files, table-driven: `scan` and `fix` x {non-UTF-8 and BOM sources, NUL
bytes, a syntax error, a 4 MB line, symlink loop, dangling symlink and escape, read-only and
hard-linked files, concurrent edit}. Every input file is processed or listed as not processed
with the reason; not processed is never "clean" or "ready"; fix writes only what it read.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from contract_helpers import snapshot

from torchport.cli.main import main

CUDA_LINE = "model = torch.nn.Linear(2, 2).cuda()\n"
LATIN1 = "# -*- coding: latin-1 -*-\nimport torch\n# caf\xe9\n" + CUDA_LINE


def _write(folder: Path, name: str, data: bytes | str) -> Path:
    path = folder / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    return path


@pytest.fixture
def run_cli(monkeypatch, capsys, tmp_path):
    """main(arguments) in `tmp_path`: (exit code, stdout, stderr)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TORCHPORT_CACHE_DIR", str(tmp_path / ".cache"))
    monkeypatch.delenv("TORCHPORT_TARGET", raising=False)

    def invoke(*arguments: str):
        code = main(list(arguments))
        captured = capsys.readouterr()
        assert "Traceback" not in captured.err and "internal error" not in captured.err, captured.err
        return code, captured.out, captured.err

    return invoke


def _readiness(output: str) -> dict:
    return json.loads(output)["readiness"]


# -- scan: processed, or listed as not parsed; never "ready" when something was not ---------------------
NOT_PARSED = {
    "nul-byte": lambda p: _write(p, "a.py", b"import torch\nx.cuda()\x00\n"),
    "syntax-error": lambda p: _write(p, "a.py", "import torch\nx = (\n" + CUDA_LINE),
    "dangling-symlink": lambda p: os.symlink(p / "gone.py", p / "a.py"),
    "symlink-loop": lambda p: os.symlink(p / "a.py", p / "a.py"),
    "over-the-size-limit": lambda p: (_write(p, "pyproject.toml", "[tool.torchport]\nmax-file-size = 0.0001\n"),
                                      _write(p, "a.py", "import torch\n" + CUDA_LINE * 4)),
}


@pytest.mark.parametrize("name", list(NOT_PARSED))
def test_scan_lists_what_it_could_not_parse_and_calls_no_target_ready(name, tmp_path, run_cli):
    NOT_PARSED[name](tmp_path)
    before = snapshot(tmp_path)
    code, output, _ = run_cli("scan", "--output-format", "json", ".")
    document = json.loads(output)
    assert code == 0 and document["findings"] == []
    assert [item["path"] for item in document["not_parsed"]] == ["./a.py"] or \
        [os.path.basename(item["path"]) for item in document["not_parsed"]] == ["a.py"]
    assert all(row["verdict"] == "not checked" for row in document["readiness"].values())
    assert run_cli("scan", "--strict", ".")[0] == 1
    assert snapshot(tmp_path) == before


PROCESSED = {
    "utf-8-bom": lambda p: _write(p, "a.py", b"\xef\xbb\xbfimport torch\n" + CUDA_LINE.encode()),
    "latin-1-with-coding-line": lambda p: _write(p, "a.py", LATIN1.encode("latin-1")),
    # Only the statements that hold a trigger are parsed: a stray latin-1 byte elsewhere hides nothing.
    "latin-1-without-coding-line": lambda p: _write(p, "a.py", b"import torch\n# caf\xe9\n\n" + CUDA_LINE.encode()),
    "crlf-line-ends": lambda p: _write(p, "a.py", ("import torch\r\n" + CUDA_LINE.replace("\n", "\r\n")).encode()),
}


@pytest.mark.parametrize("name", list(PROCESSED))
def test_scan_reads_bom_coding_lines_and_crlf(name, tmp_path, run_cli):
    PROCESSED[name](tmp_path)
    code, output, _ = run_cli("scan", "--output-format", "json", ".")
    document = json.loads(output)
    assert code == 1 and document["not_parsed"] == []
    assert [(item["code"], item["line"]) for item in document["findings"]] == [("TP102", 4 if "latin" in name else 2)]


def test_scan_output_stays_linear_on_4000_findings_in_one_line(tmp_path, run_cli):
    line = "xs = [" + ", ".join(["t.cuda()"] * 4000) + "]\n"  # about 84 KB on one line
    _write(tmp_path, "a.py", "import torch\n" + line)
    started = time.perf_counter()
    code, output, _ = run_cli("scan", "--no-cache", ".")
    assert time.perf_counter() - started < 60
    assert code == 1 and "4000 findings" in output
    assert len(output) < 4000 * 400  # the line is not repeated in each finding
    assert max(len(text) for text in output.splitlines()) < 400


def test_scan_of_a_4_mb_line_finishes_and_shows_an_excerpt(tmp_path, run_cli):
    _write(tmp_path, "a.py", "import torch\nx = t.cuda(); data = '" + "a" * (4 * 2**20) + "'\n")
    started = time.perf_counter()
    code, output, _ = run_cli("scan", "--no-cache", ".")
    assert time.perf_counter() - started < 60
    assert code == 1 and "1 finding" in output and len(output) < 20_000


def test_scan_reports_control_characters_in_names_escaped(tmp_path, run_cli):
    _write(tmp_path, "evil\x1b[2J\nname.py", "import torch\n" + CUDA_LINE)
    code, output, _ = run_cli("scan", ".")
    assert code == 1 and "\x1b" not in output and "evil\\x1b[2J\\nname.py" in output


def test_scan_reads_a_cache_of_the_wrong_shape_as_empty(tmp_path, run_cli):
    _write(tmp_path, "a.py", "import torch\n" + CUDA_LINE)
    first = run_cli("scan", "--output-format", "json", ".")
    for cache in (tmp_path / ".cache").glob("scan-*.json"):
        entries = json.loads(cache.read_text())
        cache.write_text(json.dumps({key: {"e": None, "f": [{"code": 5}], "n": "x"} for key in entries}))
    assert run_cli("scan", "--output-format", "json", ".") == first
    for cache in (tmp_path / ".cache").glob("scan-*.json"):
        cache.write_text("[1, 2, 3]")
    assert run_cli("scan", "--output-format", "json", ".") == first


# -- fix: writes only what it read; lists what it did not process ---------------------------------------
FIX_NOT_PROCESSED = {
    "nul-byte": lambda p: _write(p, "a.py", b"import torch\nx.cuda()\x00\n"),
    "syntax-error": lambda p: _write(p, "a.py", "import torch\nx = (\n" + CUDA_LINE),
    "dangling-symlink": lambda p: os.symlink(p / "gone.py", p / "a.py"),
    "symlink-loop": lambda p: os.symlink(p / "a.py", p / "a.py"),
    "symlink-escape": lambda p: (p / "outside").mkdir() or _write(p / "outside", "b.py", "import torch\n" + CUDA_LINE)
    and (p / "given").mkdir() or os.symlink(p / "outside" / "b.py", p / "given" / "a.py"),
}


@pytest.mark.parametrize("name", list(FIX_NOT_PROCESSED))
def test_fix_lists_what_it_did_not_process_and_exits_1(name, tmp_path, run_cli):
    FIX_NOT_PROCESSED[name](tmp_path)
    before = snapshot(tmp_path)
    target = "given" if name == "symlink-escape" else "."
    code, _output, error = run_cli("fix", "--unsafe-fixes", target)
    assert code == 1
    assert "not processed" in error and "a.py" in error
    assert snapshot(tmp_path) == before


def test_fix_keeps_bom_crlf_and_mode(tmp_path, run_cli):
    path = _write(tmp_path, "a.py", b"\xef\xbb\xbfimport torch\r\n" + CUDA_LINE.replace("\n", "\r\n").encode())
    path.chmod(0o640)
    code, _output, error = run_cli("fix", "--unsafe-fixes", ".")
    data = path.read_bytes()
    assert b".cuda()" not in data, error
    assert data.startswith(b"\xef\xbb\xbfimport torch\r\n") and b"\n" not in data.replace(b"\r\n", b"")
    assert path.stat().st_mode & 0o777 == 0o640


def test_fix_rewrites_latin_1_with_its_coding_line_in_latin_1(tmp_path, run_cli):
    path = _write(tmp_path, "a.py", LATIN1.encode("latin-1"))
    code, _output, error = run_cli("fix", "--unsafe-fixes", ".")
    data = path.read_bytes()
    assert "not processed" in error or b".cuda()" not in data, error
    assert b"caf\xe9" in data  # still latin-1, whatever fix did
    if "not processed" in error:
        assert code == 1 and data == LATIN1.encode("latin-1")


def test_fix_leaves_read_only_files_unless_forced(tmp_path, run_cli):
    path = _write(tmp_path, "a.py", "import torch\n" + CUDA_LINE)
    path.chmod(0o444)
    code, _output, error = run_cli("fix", "--unsafe-fixes", ".")
    assert code == 1 and "not processed" in error and ".cuda()" in path.read_text()
    code, _output, error = run_cli("fix", "--unsafe-fixes", "--force", ".")
    assert ".cuda()" not in path.read_text() and path.stat().st_mode & 0o777 == 0o444


def test_fix_keeps_hard_links_or_leaves_the_file(tmp_path, run_cli):
    path = _write(tmp_path, "a.py", "import torch\n" + CUDA_LINE)
    os.link(path, tmp_path / "b.txt")
    code, _output, error = run_cli("fix", "--unsafe-fixes", str(path))
    linked = (tmp_path / "b.txt").read_text()
    assert path.read_text() == linked  # never two different files where there was one
    if ".cuda()" in linked:
        assert code == 1 and "not processed" in error
    assert os.stat(path).st_ino == os.stat(tmp_path / "b.txt").st_ino


def test_fix_does_not_replace_a_file_edited_while_it_ran(tmp_path, run_cli, monkeypatch):
    from torchport.fix import engine

    path = _write(tmp_path, "a.py", "import torch\n" + CUDA_LINE)
    real_fix_source = engine.fix_source

    def edited_meanwhile(*arguments, **options):
        result = real_fix_source(*arguments, **options)
        with open(path, "a") as stream:
            stream.write("print('the user saved this line')\n")
        return result

    monkeypatch.setattr(engine, "fix_source", edited_meanwhile)
    code, _output, error = run_cli("fix", "--unsafe-fixes", ".")
    assert "the user saved this line" in path.read_text()
    assert code == 1 and "not processed" in error


def test_interrupted_scan_writes_no_report_and_no_temporary_file(tmp_path, run_cli, monkeypatch):
    from torchport.scan import runner

    _write(tmp_path, "a.py", "import torch\n" + CUDA_LINE)

    def interrupted(*arguments, **options):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "scan_paths", interrupted)
    code, _output, error = run_cli("scan", "--output", "report.json", ".")
    assert code == 130 and "interrupted" in error
    assert sorted(path.name for path in tmp_path.iterdir()) == ["a.py"]
