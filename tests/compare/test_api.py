"""The public surface: `torchport.compare(...)` is callable, names load lazily, devices parse."""

import subprocess
import sys

import pytest

import compare_models as models
from compare_devices import EMULATED, requires_emulated
from torchport.compare import DeviceSpec, parse_device
from torchport.errors import UnknownDeviceError


@requires_emulated
def test_the_package_is_callable_as_the_compare_function():
    import torchport.compare

    result = torchport.compare(models.agreeing_model, models.stack_inputs, reference="cpu", target=EMULATED,
                               performance=False, batch_sizes=[2])
    assert result.status == "pass"
    assert set(torchport.compare.__all__) <= set(dir(torchport.compare))


def test_importing_the_package_loads_no_engine_modules():
    code = ("import sys, torchport.compare; "
            "print(sorted(name for name in sys.modules if name.startswith('torchport.compare.')))")
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert completed.stdout.strip() == "[]"


@pytest.mark.parametrize(
    "text, expected",
    [("cpu", DeviceSpec("cpu", "native")), ("host:bfloat16", DeviceSpec("cpu", "bf16")),
     ("CPU:half", DeviceSpec("cpu", "fp16")), ("cpu:no-fp64", DeviceSpec("cpu", "no-fp64")),
     ("cpu:fp32", DeviceSpec("cpu", "no-fp64")), ("trainium-emulated", DeviceSpec("neuron-emulated", "native"))],
)
def test_device_spellings(text, expected):
    assert parse_device(text) == expected


def test_precision_argument_overrides_the_suffix_and_labels_read_back():
    spec = parse_device("cpu:bf16", precision="fp32")
    assert spec.label == "cpu:no-fp64" and parse_device(spec.label) == spec
    with pytest.raises(UnknownDeviceError):
        parse_device("quantum")
