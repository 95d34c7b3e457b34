"""Fixtures of the emulated device's own tests: each leaves the device as the next test expects it."""

import pytest

from torchport import emulated


@pytest.fixture
def target():
    """Activate a target profile by name for one test; strict mode, downcasts and the recorder reset afterwards."""
    yield emulated.activate
    emulated.set_strict(False)
    emulated.set_downcast_enabled(True)
    emulated.set_recorder(None)
    emulated.activate("cpu")


@pytest.fixture
def neuron_device(target):
    """The device following the neuron profile with downcasts off (the sweeps test the emulator, not the target)."""
    profile = target("neuron")
    emulated.set_downcast_enabled(False)
    return profile
