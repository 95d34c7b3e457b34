"""`scan` and `fix` read the code cells of Jupyter notebooks; fix writes them back, outputs kept."""

from __future__ import annotations

import json

from torchport.cli.main import main

CELLS = [
    {"cell_type": "markdown", "metadata": {}, "source": ["# Train on the GPU\n", "torch.cuda.synchronize()"]},
    {"cell_type": "code", "execution_count": 1, "metadata": {}, "outputs": [],
     "source": ["%matplotlib inline\n", "import torch\n", "device = 'cuda'  # the GPU"]},
    {"cell_type": "code", "execution_count": 2, "metadata": {},
     "outputs": [{"output_type": "stream", "name": "stdout", "text": ["2.0\n"]}],
     "source": ["x = torch.ones(2).cuda()\n", "!nvidia-smi\n", "torch.cuda.synchronize()\n", "print(x.sum().item())"]},
]


def _notebook(tmp_path):
    path = tmp_path / "train.ipynb"
    path.write_text(json.dumps({"cells": CELLS, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1) + "\n")
    return path


def test_scan_reports_code_cells_only(tmp_path, capsys):
    _notebook(tmp_path)
    assert main(["scan", "--no-cache", "--output-format", "json", str(tmp_path)]) == 1
    report = json.loads(capsys.readouterr().out)
    codes = sorted(finding["code"] for finding in report["findings"])
    assert codes == ["TP101", "TP102", "TP201"], "the markdown cell's text must not be reported"


def test_fix_rewrites_cells_keeps_magics_and_outputs_and_runs(tmp_path, capsys):
    path = _notebook(tmp_path)
    assert main(["fix", "--unsafe-fixes", str(path)]) == 0
    notebook = json.loads(path.read_text())
    first, second = ("".join(cell["source"]) for cell in notebook["cells"][1:])
    assert first.startswith("%matplotlib inline\nimport torch\ndevice = torch.accelerator")
    assert first.endswith("# the GPU")
    assert second.startswith("x = torch.ones(2).to(device)\n!nvidia-smi\n")
    assert notebook["cells"][0]["source"] == CELLS[0]["source"]
    assert notebook["cells"][2]["outputs"] == CELLS[2]["outputs"]
    code = "\n".join(line for cell in (first, second) for line in cell.splitlines() if line[:1] not in "%!")
    namespace: dict = {}
    exec(compile(code, str(path), "exec"), namespace)  # the fixed cells run here, without CUDA
    assert namespace["x"].sum().item() == 2.0
    before = path.read_bytes()
    assert main(["fix", "--unsafe-fixes", str(path)]) == 0
    assert path.read_bytes() == before


def test_a_broken_notebook_is_not_processed(tmp_path, capsys):
    path = tmp_path / "broken.ipynb"
    path.write_text("{not json")
    assert main(["fix", str(path)]) == 1
    assert "not a notebook" in capsys.readouterr().err


def test_jupyter_autosaved_copies_are_not_read(tmp_path, capsys):
    checkpoints = tmp_path / ".ipynb_checkpoints"
    checkpoints.mkdir()
    copy = _notebook(checkpoints)
    before = copy.read_bytes()
    assert main(["fix", "--unsafe-fixes", str(tmp_path)]) == 0
    assert copy.read_bytes() == before
