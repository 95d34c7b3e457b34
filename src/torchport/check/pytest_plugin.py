"""pytest plugin: ``pytest --torchport-device neuron-emulated`` runs a suite with its code retargeted.

Loading the plugin only adds the option; nothing is imported or registered unless it is given.
"""

from __future__ import annotations

import os

__all__ = ["pytest_addoption", "pytest_configure"]


def pytest_addoption(parser) -> None:
    """Add --torchport-device (env TORCHPORT_DEVICE)."""
    group = parser.getgroup("torchport")
    group.addoption(
        "--torchport-device",
        default=None,
        help="run the tests with the project's CUDA code retargeted to this device, "
        "e.g. neuron-emulated (env TORCHPORT_TEST_DEVICE)",
    )


def pytest_configure(config) -> None:
    """Retarget the project's own code (the rootdir) to the chosen device before tests import it."""
    device = config.getoption("--torchport-device") or os.environ.get("TORCHPORT_TEST_DEVICE")
    if not device:
        return
    from torchport.retarget.api import activate

    activate(device, scope=[str(config.rootpath)], precision="keep", strict=False)
