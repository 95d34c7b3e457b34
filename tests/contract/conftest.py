"""Fixtures of the contract suite."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def project(tmp_path) -> Path:
    """A folder with a CUDA-written script, a clean script, and a pyproject without [tool.torchport]."""
    (tmp_path / "train.py").write_text("import torch\nmodel = torch.nn.Linear(2, 2).cuda()\n")
    (tmp_path / "clean.py").write_text("import torch\nx = torch.zeros(2)\n")
    return tmp_path
