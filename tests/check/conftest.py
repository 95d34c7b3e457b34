"""Fixtures for the emulated device tests: activate a profile, restore the default afterwards."""

import pytest
import torch

from torchport import emulated as device


@pytest.fixture
def target():
    """Activate a target profile by name for one test; strict mode and downcasts reset afterwards."""

    def activate(name: str):
        return device.activate(name)

    yield activate
    device.set_strict(False)
    device.set_downcast_enabled(True)
    device.set_recorder(None)
    device.activate("cpu")


@pytest.fixture
def run_both():
    """`run_both(build, step, steps)`: run `step(model, inputs)` on the CPU and the emulated device."""
    return _run_both


def _run_both(build, step, steps: int = 3):
    results = {}
    for name in ("cpu", device.DEVICE_TYPE):
        torch.manual_seed(0)
        model, inputs = build()
        model = model.to(name)
        inputs = [value.to(name) for value in inputs]
        outputs = [step(model, inputs) for _ in range(steps)]
        results[name] = [output.detach().to("cpu") for output in outputs]
    return results["cpu"], results[device.DEVICE_TYPE]
