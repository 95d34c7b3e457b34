"""Runtime census on an emulated target: ops, dtypes, shapes, host syncs, memory; and its reports."""

from __future__ import annotations

__all__ = ["check_model", "check_script"]


def __getattr__(name: str):
    # Keep importing torchport.check cheap (the pytest plugin imports it): load on first use.
    if name in __all__:
        from torchport.check import api

        return getattr(api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
