"""`torchport.use()` typed in a notebook or at the interactive prompt retargets what runs after it:
IPython cells, `code.InteractiveConsole`, `python -i` (with and without a script). Objects created
before the call stay where they are, and the session is told so once."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

USE = "import torchport; torchport.use('neuron-emulated', precision='keep')"
AFTER = [
    "x = torch.ones(2, device='cuda')",
    "print('x=' + x.device.__str__().split(':')[0], 'is_cuda=' + str(x.is_cuda), 'available=' + str(torch.cuda.is_available()))",
    "from torch.cuda.amp import GradScaler",
    "print('scaler=' + str(isinstance(GradScaler(enabled=False), torch.amp.GradScaler)))",
    "def place(device):",
    "    return torch.zeros(1, device=device).device.__str__().split(':')[0]",
    "",
    "print('place=' + place('cuda:0'))",
    "print('before=' + before.device.__str__().split(':')[0])",
]
EXPECTED = {"x": "emulated", "is_cuda": "True", "available": "True", "scaler": "True", "place": "emulated",
            "before": "cpu"}


def _run(arguments, cwd, stdin="", extra_env=None):
    env = {**os.environ, **(extra_env or {})}
    env.pop("TORCHPORT_QUIET", None)
    return subprocess.run([sys.executable, *arguments], input=stdin, capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=300)


def _values(stdout: str) -> dict:
    pairs = {}
    for word in stdout.replace(">>>", " ").replace("...", " ").split():
        key, sep, value = word.partition("=")
        if sep:
            pairs[key] = value
    return pairs


def _check(result):
    assert result.returncode == 0, result.stderr[-3000:]
    assert {key: _values(result.stdout).get(key) for key in EXPECTED} == EXPECTED, result.stdout
    # told once that what was created before use() stays where it is, naming it
    assert result.stderr.count("created before use() stay where they are (before)") == 1, result.stderr


def test_interactive_console_retargets_statements_after_use(tmp_path):
    lines = ["import torch", "before = torch.zeros(2)", USE, *AFTER]
    script = (
        "import code\n"
        "console = code.InteractiveConsole({'__name__': '__console__'})\n"
        f"for line in {lines!r}:\n"
        "    console.push(line)\n"
    )
    (tmp_path / "console.py").write_text(script)
    _check(_run(["console.py"], tmp_path))


def test_python_prompt_retargets_statements_after_use(tmp_path):
    stdin = "\n".join(["import torch", "before = torch.zeros(2)", USE, *AFTER]) + "\n"
    result = _run(["-i"], tmp_path, stdin)
    _check(result)
    assert "statements typed from now on are retargeted" in result.stderr


def test_python_i_script_keeps_the_prompt_retargeted(tmp_path):
    (tmp_path / "script.py").write_text(f"{USE}\nimport torch\nmodel = torch.nn.Linear(2, 2).cuda()\n")
    stdin = "y = torch.ones(2, device='cuda')\nprint('y=' + y.device.__str__().split(':')[0], 'model=' + next(model.parameters()).device.__str__().split(':')[0])\n"
    result = _run(["-i", "script.py"], tmp_path, stdin)
    assert result.returncode == 0, result.stderr[-3000:]
    assert _values(result.stdout)["y"] == "emulated" and _values(result.stdout)["model"] == "emulated"
    assert "SystemExit" not in result.stderr  # the session ends with the retargeted prompt
    assert "created before use()" not in result.stderr  # the script's model is on the target


@pytest.mark.skipif(importlib.util.find_spec("IPython") is None, reason="IPython is not installed")
def test_ipython_cells_after_use_are_retargeted(tmp_path):
    cells = ["import torch\nbefore = torch.zeros(2)", USE, "\n".join(AFTER)]
    script = (
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "shell = InteractiveShell.instance()\n"
        f"for cell in {cells!r}:\n"
        "    result = shell.run_cell(cell)\n"
        "    if result.error_in_exec is not None:\n"
        "        raise SystemExit(repr(result.error_in_exec))\n"
    )
    (tmp_path / "cells.py").write_text(script)
    _check(_run(["cells.py"], tmp_path))


@pytest.mark.skipif(importlib.util.find_spec("ipykernel") is None or importlib.util.find_spec("jupyter_client") is None,
                    reason="ipykernel and jupyter_client are not installed")
def test_jupyter_kernel_cells_after_use_are_retargeted(tmp_path):
    """A real Jupyter kernel (ipykernel, driven over its messaging protocol as a notebook drives it)."""
    from jupyter_client.manager import start_new_kernel

    env = {**os.environ}
    env.pop("TORCHPORT_QUIET", None)
    manager, client = start_new_kernel(kernel_name="python3", cwd=str(tmp_path), env=env, startup_timeout=120)
    stdout, stderr, errors = [], [], []

    def collect(message):
        kind, content = message["header"]["msg_type"], message["content"]
        if kind == "stream":
            (stdout if content["name"] == "stdout" else stderr).append(content["text"])
        elif kind == "error":
            errors.append(f"{content['ename']}: {content['evalue']}")

    try:
        for cell in ["import torch\nbefore = torch.zeros(2)", USE, "\n".join(AFTER)]:
            client.execute_interactive(cell, output_hook=collect, timeout=120)
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    assert not errors, errors
    result = subprocess.CompletedProcess([], 0, "".join(stdout), "".join(stderr))
    _check(result)
