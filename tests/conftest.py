"""Isolation shared by every test directory."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True)
def _environment_restored():
    """Environment variables a test sets in this process (torchport's framework settings made by an
    in-process retarget, for instance) do not reach later tests or the programs they start."""
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)
