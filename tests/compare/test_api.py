"""The public surface: `torchport.compare(...)` is callable, names load lazily, devices parse."""

import json
import subprocess
import sys
import warnings

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
    [("cpu", DeviceSpec("cpu", "keep")), ("cpu:native", DeviceSpec("cpu", "keep")),
     ("host:bfloat16", DeviceSpec("cpu", "bf16")),
     ("CPU:half", DeviceSpec("cpu", "fp16")), ("cpu:no-fp64", DeviceSpec("cpu", "no-fp64")),
     ("cpu:fp32", DeviceSpec("cpu", "no-fp64")), ("trainium-emulated", DeviceSpec("neuron-emulated", "keep"))],
)
def test_device_spellings(text, expected):
    assert parse_device(text) == expected


def test_compare_stores_the_policy_words_of_the_one_vocabulary():
    from torchport import precision
    from torchport.compare.devices import PRECISIONS

    assert tuple(PRECISIONS) == precision.SUPPORTED["compare"]
    for policy, spellings in PRECISIONS.items():
        for spelling in spellings:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                stored = parse_device(f"cpu:{spelling}").precision
            assert stored == policy == precision.resolve(policy, "compare")
    assert parse_device("cpu").label == "cpu" and parse_device("cpu:keep").label == "cpu"


def test_a_baseline_written_with_the_old_native_spelling_still_gates(tmp_path):
    from torchport.compare.baseline import find_regressions, load_baseline

    def document(device_suffix, units_per_second):
        side = {"device": f"cpu{device_suffix}", "compiled": False,
                "batches": [{"batch_size": 4, "units_per_second": units_per_second, "peak_memory_bytes": 100}]}
        return {"kind": "torchport.compare", "reference": f"cpu{device_suffix}", "target": "cpu:fp32",
                "parity": None, "training": None, "cost": None,
                "performance": {"reference": side, "target": dict(side)}}

    old_file = tmp_path / "old.json"
    old_file.write_text(json.dumps(document(":native", 1000.0)))
    old = load_baseline(str(old_file))
    assert (old["reference"], old["target"], old["performance"]["reference"]["device"]) == ("cpu", "cpu:no-fp64", "cpu")
    new = document("", 10.0)
    for baseline in (old, json.loads(old_file.read_text())):  # a file, and a document passed in memory
        regressions = find_regressions(new, baseline)
        assert [regression.kind for regression in regressions] == ["throughput", "throughput"]
        assert all("native" not in regression.message for regression in regressions)
        assert regressions[0].name == "reference cpu batch 4"


def test_precision_argument_overrides_the_suffix_and_labels_read_back():
    spec = parse_device("cpu:bf16", precision="fp32")
    assert spec.label == "cpu:no-fp64" and parse_device(spec.label) == spec
    with pytest.raises(UnknownDeviceError):
        parse_device("quantum")
