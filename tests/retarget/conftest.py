"""Run small programs under torchport in a subprocess (retargeting is process-wide by design)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass

import pytest


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str

    def values(self) -> dict:
        """Lines of the form `key=value` printed by the program."""
        pairs = {}
        for line in self.stdout.splitlines():
            key, sep, value = line.partition("=")
            if sep:
                pairs[key.strip()] = value.strip()
        return pairs


@pytest.fixture
def program(tmp_path):
    """program(source, *torchport_args, form='run'|'use'|'plain', args=[...], env={...})"""

    def run(source: str, *options: str, form: str = "run", args=(), env=None, name="app.py") -> Result:
        script = tmp_path / name
        body = textwrap.dedent(source)
        if form == "use":
            body = 'import torchport; torchport.use("cpu", precision="keep")\n' + body
        script.write_text(body)
        environment = {key: value for key, value in os.environ.items() if key != "CUDA_VISIBLE_DEVICES"}
        environment.update({"TORCHPORT_QUIET": "1", **(env or {})})
        if form in ("run",):
            command = [sys.executable, "-m", "torchport", "run", *options, str(script), *args]
        else:
            command = [sys.executable, str(script), *args]
        completed = subprocess.run(command, capture_output=True, text=True, env=environment,
                                   cwd=tmp_path, timeout=300)
        return Result(completed.returncode, completed.stdout, completed.stderr)

    return run
