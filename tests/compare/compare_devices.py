"""The emulated target (a PrivateUse1 device computing on the CPU, behaving like Neuron): the real
second device the compare tests measure against the CPU."""

import pytest

from torchport import backends

EMULATED = "neuron-emulated"


def _emulated_probe():
    try:
        return backends.get(EMULATED).probe()
    except Exception as error:  # the backend is not registered in this checkout
        return type("Missing", (), {"usable": False, "reason": f"{type(error).__name__}: {error}"})()


probe = _emulated_probe()
requires_emulated = pytest.mark.skipif(not probe.usable,
                                       reason=f"backend {EMULATED!r} is not usable here: {probe.reason}")
if probe.usable:
    # Bring the device up on import (conftest imports this at collection), before any test runs a
    # backward: autograd sizes its per-device queues once per process, at the first backward.
    backends.get(EMULATED).device(0)
