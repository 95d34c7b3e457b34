"""scan: outputs (text, json, SARIF validated against the 2.1.0 schema), exit codes, selection,
targets, configuration, noqa, the cache, and robustness on hostile inputs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from torchport.cli.main import main
from torchport.rules.engine import analyze_python
from torchport.rules.registry import all_rules
from torchport.scan.runner import scan_paths

SCHEMA = json.loads((Path(__file__).parent / "fixtures" / "sarif-schema-2.1.0.json").read_text())
ALL_CODES = tuple(rule.code for rule in all_rules())

PROGRAM = """import torch as th
from torch import cuda
from torch.cuda import amp
device = 'cuda' if th.cuda.is_available() else 'cpu'
model = Net().cuda()
cuda.synchronize()
with amp.autocast():
    x = th.zeros(3, dtype=th.float64)
th.cuda.synchronize()  # noqa: TP201
"""


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHPORT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TORCHPORT_TARGET", raising=False)
    root = tmp_path / "project"
    root.mkdir()
    (root / "train.py").write_text(PROGRAM)
    (root / "requirements.txt").write_text("torch\nflash-attn==2.6.3\n")
    (root / "launch.sh").write_text("#!/bin/sh\nCUDA_VISIBLE_DEVICES=0 python train.py\n")
    (root / "clean.py").write_text("import torch\nprint(torch.accelerator.is_available())\n")
    return root


def _json(capsys, *args) -> tuple[int, dict]:
    code = main(["scan", *args, "--output-format", "json"])
    return code, json.loads(capsys.readouterr().out)


def test_name_resolution_and_noqa(project, capsys):
    code, document = _json(capsys, str(project))
    assert code == 1
    found = {(item["code"], item["line"]) for item in document["findings"] if item["path"].endswith("train.py")}
    assert ("TP106", 4) in found  # th.cuda.is_available via `import torch as th`
    assert ("TP201", 6) in found  # cuda.synchronize via `from torch import cuda`
    assert ("TP208", 7) in found  # amp.autocast via `from torch.cuda import amp`
    assert ("TP401", 8) in found
    assert ("TP201", 9) not in found  # suppressed by noqa
    codes = {item["code"] for item in document["findings"]}
    assert {"TP602", "TP604"} <= codes


def test_text_report_groups_and_summarises(project, capsys):
    assert main(["scan", str(project)]) == 1
    out = capsys.readouterr().out
    assert "train.py\n" in out and "| model = Net().cuda()" in out and "fix: " in out
    assert "by severity:" in out and "by rule:" in out and "torchport fix can rewrite" in out
    assert "Readiness:" in out and "neuron  blocked" in out


def test_sarif_is_valid_2_1_0(project, capsys):
    assert main(["scan", str(project), "--output-format", "sarif"]) == 1
    document = json.loads(capsys.readouterr().out)
    jsonschema.validate(document, SCHEMA)
    run = document["runs"][0]
    assert run["results"] and all(result["locations"][0]["physicalLocation"]["region"]["startColumn"] >= 1
                                  for result in run["results"])
    rule_ids = [rule["id"] for rule in run["tool"]["driver"]["rules"]]
    assert all(rule_ids[result["ruleIndex"]] == result["ruleId"] for result in run["results"])


def test_exit_codes_output_file_and_exit_zero(project, tmp_path, capsys):
    assert main(["scan", str(project / "clean.py")]) == 0
    report = tmp_path / "out.json"
    assert main(["scan", str(project), "--output-format", "json", "--output", str(report), "--exit-zero"]) == 0
    assert json.loads(report.read_text())["summary"]["findings"] > 0
    assert main(["scan", str(tmp_path / "missing")]) == 2
    assert main(["scan", str(project), "--target", "gpu-9000"]) == 2
    assert main(["scan", str(project), "--select", "ZZ9"]) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and "Unknown target" in err and "matches no rule" in err
    assert "Traceback" not in err


def test_select_ignore_and_target_severity(project, capsys):
    _, document = _json(capsys, str(project), "--select", "TP2")
    assert {item["code"][:3] for item in document["findings"]} == {"TP2"}
    _, document = _json(capsys, str(project), "--ignore", "TP2,TP6")
    assert not {item["code"][:3] for item in document["findings"]} & {"TP2", "TP6"}
    _, neuron = _json(capsys, str(project), "--target", "neuron")
    _, cpu = _json(capsys, str(project), "--target", "cpu")
    float64 = [item for item in neuron["findings"] if item["code"] == "TP401"]
    assert float64 and float64[0]["severity"] == "error"
    assert not [item for item in cpu["findings"] if item["code"] == "TP401"]  # off on cpu
    _, alias = _json(capsys, str(project), "--target", "trainium")
    assert alias["target"] == "neuron"


def test_pyproject_configuration(project, capsys):
    (project / "pyproject.toml").write_text('[tool.torchport]\nignore = ["TP4"]\ntarget = "cpu"\nexclude = ["*.sh"]\n')
    _, document = _json(capsys, str(project))
    assert document["target"] == "cpu"
    assert not [item for item in document["findings"] if item["code"].startswith(("TP4", "TP604"))]
    (project / "pyproject.toml").write_text('[tool.torchport]\nselct = ["TP1"]\n')
    assert main(["scan", str(project)]) == 2
    assert "Unknown key" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["scan", "fix"])
def test_pyproject_with_a_toml_syntax_error_is_a_usage_error(project, capsys, command):
    broken = project / "pyproject.toml"
    broken.write_text('[tool.torchport]\nignore = [TP4]\n')
    assert main([command, str(project)]) == 2
    error = capsys.readouterr().err
    assert str(broken) in error and "line 2" in error and "Fix the TOML syntax" in error
    assert main([command, str(project), "--config", str(broken)]) == 2
    assert str(broken) in capsys.readouterr().err


def test_cache_reuses_results(project, tmp_path):
    cache = tmp_path / "cache-dir"
    first = scan_paths([str(project)], cache_dir=cache, progress=False)
    second = scan_paths([str(project)], cache_dir=cache, progress=False)
    assert first.cached_files == 0 and second.cached_files == second.files == first.files
    assert [item.to_dict() for item in second.findings] == [item.to_dict() for item in first.findings]
    (project / "train.py").write_text(PROGRAM + "th.cuda.synchronize()\n")
    third = scan_paths([str(project)], cache_dir=cache, progress=False)
    assert third.cached_files == first.files - 1
    assert len(third.findings) == len(first.findings) + 1


def test_hostile_files_are_reported_not_parsed(tmp_path):
    root = tmp_path / "hostile"
    root.mkdir()
    (root / "syntax.py").write_text("import torch\ndef f(:\n    torch.cuda.synchronize()\n")
    (root / "python2.py").write_text("import torch\nprint 'device', torch.cuda.is_available()\n")
    (root / "binary.py").write_bytes(b"import torch\x00\xff\xfe torch.cuda.synchronize()\n")
    (root / "latin.py").write_bytes(b"# -*- coding: utf-8 -*-\nimport torch\nx = '\xe9\xff' ; torch.cuda.synchronize()\n")
    (root / "huge.py").write_text("import torch\n" + "x = torch.cuda.is_available()\n" * 200_000)
    (root / "deep.py").write_text("import torch\nx = " + "(" * 5000 + "torch.cuda.is_available()" + ")" * 5000 + "\n")
    os.symlink("self_loop", root / "self_loop")
    os.symlink(str(root), root / "back_to_root")
    result = scan_paths([str(root)], use_cache=False, progress=False)
    reasons = {Path(path).name: reason for path, reason in result.not_parsed.items()}
    assert "syntax error" in reasons["syntax.py"]
    assert "Python 2" in reasons["python2.py"]
    assert "binary.py" in reasons and "latin.py" in reasons
    assert "MB limit" in reasons["huge.py"]
    assert "deep.py" in reasons
    assert "symlink loop" in reasons["self_loop"] and "symlink loop" in reasons["back_to_root"]


def test_scanning_torch_itself_does_not_crash():
    import torch

    root = Path(torch.__file__).parent / "cuda"
    result = scan_paths([str(root)], use_cache=False, progress=False, jobs=2)
    assert result.files > 10 and result.findings
    assert all(not reason.startswith("internal error") for reason in result.not_parsed.values())


_SNIPPETS = [PROGRAM, "x = 'cuda'\n", "import torch\n@torch.cuda.amp.custom_fwd\ndef f(): pass\n",
             "from torch.cuda import is_available as ok\nif ok(): pass\n"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    snippet=st.sampled_from(_SNIPPETS),
    cut=st.integers(min_value=0, max_value=400),
    insert=st.text(alphabet=st.characters(codec="utf-8"), max_size=12),
)
def test_mutated_sources_never_crash(snippet, cut, insert):
    source = (snippet[:cut] + insert + snippet[cut:]).encode("utf-8", errors="surrogatepass")
    result = analyze_python(source, "fuzz.py", ALL_CODES)
    assert result.error is None or isinstance(result.error, str)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_never_crash(data):
    analyze_python(b"import torch\ntorch.cuda.synchronize()\n" + data, "fuzz.py", ALL_CODES)


def test_output_in_a_missing_folder_is_a_usage_error(project, tmp_path, capsys):
    output = tmp_path / "missing" / "r.json"
    assert main(["scan", str(project), "--output", str(output)]) == 2
    assert str(output) in capsys.readouterr().err and not output.exists()
