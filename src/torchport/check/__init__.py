"""Runtime census on an emulated target: ops, dtypes, shapes, host syncs, memory; and its reports."""

from __future__ import annotations

__all__: list[str] = []
