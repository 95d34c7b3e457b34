"""Bring the emulated target up before any compare test runs a backward (see compare_devices)."""

import compare_devices  # noqa: F401
