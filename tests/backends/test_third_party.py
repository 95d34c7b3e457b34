"""A third party adds a device with a Backend subclass and `register`; auto never picks a device
whose probe says no, and resolve gives the probe's reason."""

import pytest

from torchport import backends
from torchport.backends.base import Backend, Probe
from torchport.errors import DeviceUnavailableError


def test_registered_backend_resolves_by_name_and_alias_and_reports_its_probe():
    @backends.register
    class ToyBackend(Backend):
        name = "toyaccel"
        aliases = ("toy",)
        dist_backend = "gloo"
        auto_selectable = True

        def probe(self) -> Probe:
            return Probe(False, "the toy driver is not loaded", "Load the toy driver.")

    try:
        assert backends.get("toy").name == "toyaccel"
        assert "toyaccel" in backends.names()
        with pytest.raises(DeviceUnavailableError, match="the toy driver is not loaded"):
            backends.resolve("toy")
        chosen, skipped = backends.auto()
        assert chosen.name == "cpu" and skipped["toyaccel"] == "the toy driver is not loaded"
    finally:
        backends._registry.pop("toyaccel", None)
        backends._aliases.pop("toy", None)
