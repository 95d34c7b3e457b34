"""The backend registry: names, aliases, the one priority order, and errors for bad names."""

import pytest

from torchport import backends
from torchport.errors import DeviceUnavailableError, UnknownDeviceError


def test_every_builtin_backend_is_registered_once_in_priority_order():
    names = [backend.name for backend in backends.all_backends()]
    assert [name for name in names if name in backends.PRIORITY] == list(backends.PRIORITY)
    assert names[-1] == "cpu"  # the host is the last resort, after any third-party accelerator
    assert len(names) == len(set(names))


@pytest.mark.parametrize(
    "alias, name",
    [("gpu", "cuda"), ("trainium", "neuron"), ("inferentia", "neuron"), ("tpu", "xla"), ("ascend", "npu")],
)
def test_aliases_resolve_to_their_backend(alias, name):
    assert backends.get(alias).name == name


def test_auto_picks_the_first_usable_backend_and_says_why_earlier_ones_were_skipped():
    chosen, skipped = backends.auto()
    order = [backend.name for backend in backends.all_backends() if backend.auto_selectable]
    assert chosen.probe().usable
    assert list(skipped) == order[: order.index(chosen.name)]
    assert all(reason for reason in skipped.values())


def test_unknown_device_lists_valid_names():
    with pytest.raises(UnknownDeviceError) as info:
        backends.resolve("tpuu")
    assert "'tpuu'" in str(info.value) and "neuron" in str(info.value)


def test_known_but_unusable_device_gives_reason_and_next_step():
    with pytest.raises(DeviceUnavailableError) as info:
        backends.resolve("trainium")
    message = str(info.value)
    assert "torch_neuronx is not installed" in message and "Install torch-neuronx" in message


def test_probe_never_raises_for_any_backend():
    for backend in backends.all_backends():
        probe = backend.probe()
        assert isinstance(probe.usable, bool) and probe.reason


def test_each_profiles_profiler_activity_is_one_torch_profiles_and_cuda_is_cudas():
    # `ProfilerActivity.CUDA` in an application becomes this activity on the target (or is dropped)
    import torch

    activities = {name: backends.get(name).profiler_activity for name in backends.names() if name != "auto"}
    assert activities["cuda"] == "CUDA" and activities["xpu"] == "XPU"
    assert activities["cpu"] is None and activities["neuron"] is None
    assert activities["xpu-emulated"] is None  # its kernels run on the host (torch warned "XPU is not available")
    for name, activity in activities.items():
        assert activity is None or hasattr(torch.profiler.ProfilerActivity, activity), name
