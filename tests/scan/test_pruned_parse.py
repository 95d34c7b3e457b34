"""Parsing only the statements that hold a trigger must find what a whole-file parse finds."""

from __future__ import annotations

import pytest

from torchport.rules import engine
from torchport.scan.runner import _all_codes

SOURCES = {
    "plain": (
        "import os\n\n\ndef unrelated():\n    return os.getcwd()\n\n\n"
        "def step(model, batch):\n    for x in batch:\n        total = model(x).item()\n    return total\n"
    ),
    "class-members": (
        "import torch\n\n\nclass Trainer:\n    '''Docs.\n\nimport torch as th\nth.cuda.synchronize()\n'''\n\n"
        "    def a(self):\n        return 1\n\n    @property\n    def b(self):\n"
        "        return torch.cuda.is_available()\n\n    def c(self):\n        return (\n    2)\n"
    ),
    "strings-and-brackets": (
        "import torch\nTEMPLATE = '''\ndevice = torch.device('cuda')\n'''\nx = foo(\n"
        "torch.cuda.synchronize())\ns = ')'\n\n\ndef f():\n    torch.cuda.synchronize()\n"
    ),
    "decorated-and-else": (
        "import torch\n@decorator\n@other(\n    1)\ndef f():\n    pass\nif torch.cuda.is_available():\n"
        "    a = 1\nelse:\n    b = torch.cuda.device_count()\ntry:\n    import apex\nexcept ImportError:\n    pass\n"
    ),
    "continuation": "import torch\nx = 1 + \\\ntorch.cuda.device_count()\ny = torch.cuda.current_device()\n",
    "local-import": (
        "def g():\n    from torch import cuda as c\n    return 1\n\n\ndef h():\n    return c.synchronize()\n"
    ),
    "odd-quote": "import torch\nQ = '\"\"\"'\ndef f():\n    return torch.cuda.synchronize()\n",
    "syntax-error-elsewhere": "import torch\ndef f(:\n    pass\ntorch.cuda.synchronize()\n",
}


def _findings(source: str):
    result = engine.analyze_python(source.encode(), "example.py", _all_codes())
    return result.error, [(item.code, item.line, item.column, item.end_line, item.end_column) for item in result.findings]


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_pruned_parse_finds_what_a_whole_parse_finds(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    pruned = _findings(SOURCES[name])
    monkeypatch.setattr(engine, "_pruned_source", lambda source, positions: None)
    whole = _findings(SOURCES[name])
    assert pruned == whole


def test_pruned_source_blanks_statements_without_triggers() -> None:
    source = SOURCES["plain"].encode()
    positions = engine._trigger_positions(source, engine.python_triggers(_all_codes()))
    pruned = engine._pruned_source(source, positions)
    assert pruned is not None and b"getcwd" not in pruned and b".item()" in pruned
    assert pruned.count(b"\n") == source.count(b"\n")


def test_nvidia_smi_without_any_torch_import() -> None:
    error, findings = _findings("import subprocess\n\n\ndef f():\n    pass\n\n\nsubprocess.run(['nvidia-smi', '-L'])\n")
    assert error is None and [item[0] for item in findings] == ["TP509"]
