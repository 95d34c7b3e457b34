"""Paths a PrivateUse1 device takes that only CUDA implements: served on the emulated device, and what it
cannot run is named as an emulator gap ("not emulated"), apart from what the profile refuses."""

import dataclasses
import textwrap

import pytest
import torch
from torch import nn

from torchport import emulated
from torchport.check import check_script
from torchport.check.census import Census
from torchport.check.report import build_report
from torchport.emulated.errors import NotEmulatedError
from torchport.errors import EmulatedDeviceError

DEVICE = emulated.DEVICE_TYPE


def _step(module, inputs):
    output = module(*inputs)
    output = output[0] if isinstance(output, tuple) else output
    output.pow(2).sum().backward()
    return output.detach().cpu(), [parameter.grad.cpu() for parameter in module.parameters()]


@pytest.mark.parametrize("build, shape", [
    (lambda: nn.GRU(4, 6, num_layers=2, batch_first=True, bidirectional=True), (3, 5, 4)),
    (lambda: nn.GRU(4, 6, bias=False), (5, 3, 4)),
    (lambda: nn.GRUCell(4, 6), (3, 4)),
    (lambda: nn.LSTM(4, 6, proj_size=3), (5, 3, 4)),
])
def test_fused_rnn_cells_match_the_cpu_forward_and_backward(target, build, shape):
    target("neuron")
    emulated.set_downcast_enabled(False)
    torch.manual_seed(0)
    module, inputs = build(), torch.randn(shape)
    expected_output, expected_grads = _step(module, [inputs])
    module.zero_grad()
    output, grads = _step(module.to(DEVICE), [inputs.to(DEVICE)])
    torch.testing.assert_close(output, expected_output, rtol=1e-5, atol=1e-6)
    for grad, expected in zip(grads, expected_grads):
        torch.testing.assert_close(grad, expected, rtol=1e-4, atol=1e-5)


def test_a_traced_convolution_is_recorded_in_the_graph_not_baked_in(target):
    # torch.jit.trace on the device must record the convolution: a host kernel at `convolution`
    # hid it from the tracer, whose graph then held the example's output as a constant
    target("neuron")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 2)).eval()
    host_inputs = torch.randn(1, 3, 8, 8)
    expected = model(host_inputs)
    model.to(DEVICE)
    with torch.no_grad():
        traced = torch.jit.trace(model, torch.randn(1, 3, 8, 8, device=DEVICE))
        assert "aten::_convolution" in str(traced.inlined_graph)
        assert torch.allclose(traced(host_inputs.to(DEVICE)).cpu(), expected, atol=1e-6)


def test_per_channel_fake_quant_resizes_its_statistics_on_the_device_as_on_the_cpu(target):
    # QAT's fused observer grows its size-1 running statistics and scale to one per channel in
    # place without returning them; the device tensors must follow, or convert() quantizes with
    # one scale for every channel
    target("neuron")
    torch.manual_seed(0)
    weight = torch.randn(4, 3, 3, 3)

    def observe(device):
        buffers = [torch.tensor([]), torch.tensor([]), torch.tensor([1.0]), torch.tensor([0], dtype=torch.int32)]
        buffers = [buffer.to(device) for buffer in buffers]
        on = torch.ones(1, dtype=torch.long, device=device)
        output = torch.fused_moving_avg_obs_fake_quant(weight.to(device), on, on, *buffers, 0.01, -128, 127, 0,
                                                       True, True)
        return [tensor.cpu() for tensor in (output, *buffers)]

    for expected, actual in zip(observe("cpu"), observe(DEVICE)):
        assert actual.shape == expected.shape and torch.equal(actual, expected)


def test_take_along_dim_and_wrapped_numbers(target):
    target("neuron")
    values = torch.randn(4, 6)
    order = values.argsort(1)
    result = torch.take_along_dim(values.to(DEVICE), order.to(DEVICE), 1)
    assert result.device.type == DEVICE
    assert torch.equal(result.cpu(), torch.take_along_dim(values, order, 1))
    assert torch.equal(torch.take_along_dim(values.to(DEVICE), order.to(DEVICE)).cpu(), torch.take_along_dim(values, order))


def test_numbers_passed_for_tensors_keep_the_type_promotion_of_wrapped_numbers(target):
    target("neuron")
    emulated.set_downcast_enabled(False)
    first, second, sign = (torch.tensor(value, dtype=torch.bfloat16) for value in (1.5, 0.25, 1.0))
    expected = nn.functional.margin_ranking_loss(first, second, sign, margin=0.1)
    result = nn.functional.margin_ranking_loss(first.to(DEVICE), second.to(DEVICE), sign.to(DEVICE), margin=0.1)
    assert result.dtype == expected.dtype == torch.bfloat16  # add(0-dim bf16, 0.1) stays bf16, as on the CPU
    assert torch.equal(result.cpu(), expected)


def test_non_blocking_copy_to_the_host_and_pinned_memory(target):
    target("neuron")
    values = torch.randn(3, 4)
    assert torch.equal(values.to(DEVICE).to("cpu", non_blocking=True), values)
    pinned = values.t().pin_memory()
    assert pinned.is_pinned() and not values.is_pinned()
    assert pinned.stride() == values.t().stride() and torch.equal(pinned, values.t())
    assert torch.equal(pinned.to(DEVICE, non_blocking=True).cpu(), values.t())
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(values), batch_size=2, pin_memory=True)
    assert all(batch.is_pinned() for (batch,) in loader)


@pytest.mark.parametrize("make, expected", [
    (lambda: torch.empty(4, pin_memory=True), None),
    (lambda: torch.zeros(2, 3, pin_memory=True), torch.zeros(2, 3)),
    (lambda: torch.full((2,), 7.0, pin_memory=True), torch.full((2,), 7.0)),
    (lambda: torch.arange(5, pin_memory=True), torch.arange(5)),
    (lambda: torch.tensor([[1.0, 2.0]], pin_memory=True), torch.tensor([[1.0, 2.0]])),
    (lambda: torch.empty_strided((2, 3), (1, 2), pin_memory=True), None),
    (lambda: torch.ones_like(torch.zeros(3, dtype=torch.int32), pin_memory=True), torch.ones(3, dtype=torch.int32)),
    (lambda: torch.zeros(2).new_ones(3, pin_memory=True), torch.ones(3)),
], ids=["empty", "zeros", "full", "arange", "tensor", "empty_strided", "ones_like", "new_ones"])
def test_factories_with_pin_memory_give_pinned_host_memory_where_the_target_pins(target, make, expected):
    target("neuron")  # capabilities.pinned_memory: true
    made = make()
    assert made.device.type == "cpu" and made.is_pinned()
    if expected is not None:
        assert torch.equal(made, expected) and made.dtype == expected.dtype
    staged = made.copy_(torch.arange(made.numel()).reshape(made.shape).to(made.dtype))
    assert torch.equal(staged.to(DEVICE, non_blocking=True).cpu(), staged)
    assert not torch.empty(4).is_pinned()  # without pin_memory=True nothing changes
    with pytest.raises(EmulatedDeviceError, match="only dense CPU tensors can be pinned"):
        torch.empty(4, device=DEVICE, pin_memory=True)


def test_the_emulated_twin_follows_the_profile_on_pinned_memory():
    from torchport import backends, profiles

    for name in ("neuron", "xla", "mps"):
        expected = profiles.load(name).capabilities["pinned_memory"]
        assert backends.get(f"{name}-emulated").supports_pinned_memory is expected


def test_a_target_without_pinned_memory_refuses_pinning_and_the_loader_leaves_batches_unpinned(target):
    target("xla")  # capabilities.pinned_memory: false
    reason = r"target 'xla' has no pinned host memory \(torch_xla: host tensors are staged by PJRT"
    with pytest.raises(EmulatedDeviceError, match=r"torch\.empty\(pin_memory=True\): " + reason):
        torch.empty(4, pin_memory=True)
    with pytest.raises(EmulatedDeviceError, match=r"Tensor\.pin_memory\(\): " + reason):
        torch.randn(2).pin_memory()
    values = torch.randn(4, 3)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(values), batch_size=2, pin_memory=True)
    with pytest.warns(UserWarning, match="target 'xla' has no pinned host memory"):
        batches = [batch for (batch,) in loader]
    assert not any(batch.is_pinned() for batch in batches)
    assert torch.equal(torch.cat(batches), values)


def test_run_keeps_pinned_staging_buffers_on_a_target_that_pins_and_drops_them_where_it_cannot(tmp_path):
    import json
    import subprocess
    import sys

    script = tmp_path / "staging.py"
    script.write_text(textwrap.dedent(
        """
        import json
        import torch
        staging = torch.empty(4, 3, pin_memory=True)
        staging.copy_(torch.arange(12.0).reshape(4, 3))
        on_device = staging.to("cuda", non_blocking=True)
        print("RESULT " + json.dumps({"pinned": staging.is_pinned(), "sum": on_device.sum().item()}))
        """
    ))
    results = {}
    for device in ("neuron-emulated", "xla-emulated"):
        done = subprocess.run([sys.executable, "-m", "torchport", "run", "--device", device, str(script)],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        line = next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))
        results[device] = json.loads(line[len("RESULT "):])
    assert results["neuron-emulated"] == {"pinned": True, "sum": 66.0}
    assert results["xla-emulated"] == {"pinned": False, "sum": 66.0}


@pytest.mark.parametrize("norm_first, batch_first", [(False, True), (True, True)])
def test_transformer_encoder_eval_with_a_padding_mask_matches_the_cpu_bit_for_bit(target, norm_first, batch_first):
    target("neuron")
    emulated.set_downcast_enabled(False)
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, 16, batch_first=batch_first, norm_first=norm_first)
    encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=True).eval()
    inputs = torch.randn(3, 5, 8) if batch_first else torch.randn(5, 3, 8)
    mask = torch.tensor([[False] * 5, [False] * 3 + [True] * 2, [False] * 4 + [True]])
    with torch.no_grad():
        expected = encoder(inputs, src_key_padding_mask=mask)
        output = encoder.to(DEVICE)(inputs.to(DEVICE), src_key_padding_mask=mask.to(DEVICE))
    assert output.device.type == DEVICE and not output.is_nested
    assert torch.equal(output.cpu(), expected)


def test_nested_tensors_on_the_device_compute_what_the_cpu_computes(target):
    target("neuron")
    first, second = torch.randn(2, 3), torch.randn(4, 3)
    for make in (lambda device: torch.nested.nested_tensor([first, second], device=device),
                 lambda device: torch.nested.as_nested_tensor([first.to(device), second.to(device)])):
        expected, made = make("cpu"), make(DEVICE)
        assert made.is_nested and made.device.type == DEVICE
        back = (made.relu() * 2).cpu()
        assert back.is_nested and back.device.type == "cpu"
        for got, want in zip(back.unbind(), (expected.relu() * 2).unbind()):
            assert torch.equal(got, want)
        padded = torch.nested.to_padded_tensor(made, -1.0)
        assert padded.device.type == DEVICE
        assert torch.equal(padded.cpu(), torch.nested.to_padded_tensor(expected, -1.0))


def test_sparse_tensors_are_named_as_not_emulated_and_counted_in_the_report(target):
    profile = target("neuron")
    census = Census(profile)
    with census.recording():
        with pytest.raises(NotEmulatedError, match=r"aten::_to_sparse is not emulated yet.*not a fact about target 'neuron'"):
            torch.eye(3, device=DEVICE).to_sparse()
        indices, values = torch.tensor([[0, 1], [1, 0]]), torch.tensor([1.0, 2.0])
        with pytest.raises(NotEmulatedError, match="sparse_coo"):
            torch.sparse_coo_tensor(indices, values, (2, 2), device=DEVICE)
    report = build_report(census, numeric_effect=None, buckets=None, workload="sparse")
    assert report.data["not_emulated_count"] == 2
    assert report.data["not_emulated"][0]["op"] == "aten::_to_sparse"
    assert "not emulated yet (not checked; an emulator gap, not a neuron fact): aten::_to_sparse x1" in report.text()
    assert "<h2>Not emulated yet (not checked; emulator gaps, not target facts)</h2>" in report.html()
    assert "<code>aten::_sparse_coo_tensor_with_dims_and_tensors</code> x1" in report.html()
    # An emulator gap is never written into the profile.
    assert "layouts" not in profile.data and profile.op_rule("aten::_to_sparse") is None


def test_a_profile_that_refuses_sparse_refuses_it_with_the_target_error(target):
    profile = target("neuron")
    refusing = dataclasses.replace(profile, data={**profile.data, "layouts": {
        "sparse_coo": {"status": "refused", "note": "no sparse kernels", "fix": "keep the tensor dense"}}})
    emulated.activate(refusing)
    with pytest.raises(EmulatedDeviceError, match=r"aten::_to_sparse: layout torch.sparse_coo is not supported on target "
                       r"'neuron' \(no sparse kernels\)\. Fix: keep the tensor dense") as caught:
        torch.eye(3, device=DEVICE).to_sparse()
    assert not isinstance(caught.value, NotEmulatedError)


def test_a_program_stopped_by_an_emulator_gap_is_not_checked_rather_than_blocked(target, tmp_path):
    script = tmp_path / "sparse_step.py"
    script.write_text(textwrap.dedent(
        """
        import torch
        weights = torch.randn(4, 4, device="cuda")
        print(weights.sum().item())
        weights.to_sparse()
        """
    ))
    report = check_script(str(script), [], target="neuron")
    assert report.verdict.startswith("not checked: the program stopped at aten::_to_sparse, which the emulated device")
    assert report.data["not_emulated_count"] == 1


def test_the_device_holds_the_profiles_memory_and_runs_out_as_cuda_does(target):
    # out-of-memory handling written for CUDA (`except torch.cuda.OutOfMemoryError`, fairseq's
    # `"out of memory" in str(e)`, Accelerate's find_executable_batch_size) sees the target's limit,
    # in the target's own words
    from torchport.profiles import load

    target(dataclasses.replace(load("neuron"), memory_bytes=64 * 2**20))
    kept = torch.empty(8 * 2**20, device=DEVICE)  # 32 MiB of the 64
    with pytest.raises(torch.OutOfMemoryError, match="RESOURCE_EXHAUSTED. Tried to allocate 0.04 GiB"):
        torch.empty(10 * 2**20, device=DEVICE)
    with pytest.raises(torch.OutOfMemoryError, match="RESOURCE_EXHAUSTED"):
        torch.cat((kept, kept))  # an op's output counts as well
    module = torch.get_device_module(DEVICE)
    assert module.memory_stats()["num_ooms"] >= 2
    free, total = module.mem_get_info()
    assert total == 64 * 2**20 and free == total - module.memory_allocated() <= 32 * 2**20
    del kept
    assert torch.ones(12 * 2**20, device=DEVICE).sum().item() == 12 * 2**20  # freed memory is free again
    # more than the device holds and the host can give: the device's capacity error, whatever this
    # host's memory (it was the host's words, which Accelerate's batch-size finder retries on, and the
    # target's where the host could reserve the bytes)
    target("neuron")
    with pytest.raises(torch.OutOfMemoryError, match=r"^RESOURCE_EXHAUSTED\. Tried to allocate 4096\.00 GiB"):
        torch.empty(2**40, device=DEVICE)
    # within the device's capacity, more than the host can give: the device's error in the host's words
    target(dataclasses.replace(load("neuron"), memory_bytes=2**50))
    with pytest.raises(torch.OutOfMemoryError, match=r"RESOURCE_EXHAUSTED in .*\(neuron-emulated\)"):
        torch.empty(2**40, device=DEVICE)
    # in the target's own words, which handlers written for it match (`"CUDA out of memory" in str(e)`)
    target(dataclasses.replace(load("cuda"), memory_bytes=64 * 2**20))
    with pytest.raises(torch.OutOfMemoryError, match=r"^CUDA out of memory\. Tried to allocate 0\.25 GiB"):
        torch.empty(64 * 2**20, device=DEVICE)


def test_ddp_searching_for_unused_parameters_is_named_as_not_emulated(target, tmp_path):
    # the reducer needs a C++ pinned allocator for it: refused at construction with the ways on,
    # rather than deep in the first backward ("register PrivateUse1HooksInterface")
    import torch.distributed as dist

    from torchport.emulated import distributed

    target("neuron")
    distributed.install()
    dist.init_process_group(distributed.BACKEND_NAME, init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        with pytest.raises(NotEmulatedError, match=r"find_unused_parameters=True\) is not emulated.*--device cpu"):
            nn.parallel.DistributedDataParallel(nn.Linear(4, 2).to(DEVICE), find_unused_parameters=True)
        model = nn.parallel.DistributedDataParallel(nn.Linear(4, 2).to(DEVICE))
        model(torch.ones(3, 4, device=DEVICE)).sum().backward()
        assert model.module.weight.grad.cpu().tolist() == [[3.0] * 4] * 2
    finally:
        dist.destroy_process_group()


def test_distributed_checkpoint_saves_and_loads_device_tensors(target, tmp_path):
    # torch.distributed.checkpoint's loaders ask the device module for its current stream
    import warnings

    import torch.distributed.checkpoint as dcp

    target("neuron")
    state_dict = {"weight": torch.arange(6.0, device=DEVICE).view(2, 3), "step": torch.tensor(7, device=DEVICE)}
    restored = {"weight": torch.zeros(2, 3, device=DEVICE), "step": torch.tensor(0, device=DEVICE)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "assuming the intent is to save in a single process"
        dcp.save(state_dict, checkpoint_id=str(tmp_path))
        dcp.load(restored, checkpoint_id=str(tmp_path))
    assert restored["weight"].device.type == DEVICE
    assert restored["weight"].cpu().tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]] and restored["step"].item() == 7


def test_numbers_an_op_computes_with_are_narrowed_as_the_tensors_are(target):
    # pytorch-metric-learning's miners mark "no value" with finfo(dtype).max and compare with the same
    # constant: on a target computing float64 as float32 both sides are float32's rounding (inf), so
    # only the row holding a real value differs. The tensor narrowed and the constant not made every
    # row differ; an int64 constant beyond int32 wraps as the tensor's values did
    target("neuron")
    sentinel = torch.finfo(torch.float64).max
    mask = torch.ones(4, 4, dtype=torch.float64, device=DEVICE) * sentinel
    mask[0, 1] = 1
    assert torch.any(mask != sentinel, dim=1).tolist() == [True, False, False, False]
    assert (mask.clamp(max=sentinel) == mask).all()  # an optional Scalar argument
    big = torch.full((2,), 2**40, dtype=torch.int64, device=DEVICE)
    assert (big == 2**40).tolist() == [True, True]
    assert torch.add(big, big, alpha=2**40).tolist() == (big + big * 2**40).tolist()  # a keyword Scalar
    # a float number with int64 tensors computes in the default float dtype: kept as given
    assert (torch.arange(3, device=DEVICE) * 0.1).cpu().tolist() == (torch.arange(3) * 0.1).tolist()
    # a 0-dim device tensor an op writes is the device's, not a number: the write lands in it
    written = torch.tensor(16777217, device=DEVICE)
    written.lt_(torch.tensor(5.0, dtype=torch.float64, device=DEVICE))
    assert written.item() == 0
    # a number the narrowing changed is a changed value in the check's report (sys.maxsize as "no limit")
    census = Census(target("neuron"))
    indices = torch.arange(3, device=DEVICE)
    with census.recording():
        indices.clamp(max=2**63 - 1)
    assert census.downcasts[("aten::clamp", "int64", "int32")][1] >= 1
