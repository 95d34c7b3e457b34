"""Every OpInfo op on the emulated device: agrees with the CPU, is refused by the profile, or says it is
not emulated. Never a wrong answer, never a crash."""

import warnings

import pytest

pytest.importorskip("expecttest")  # torch.testing._internal needs it (the dev extra installs it)

from emulated_sweep import sweep_ops  # noqa: E402

SAMPLES_PER_OP = 1


@pytest.mark.slow
def test_every_opinfo_op_agrees_is_refused_or_is_not_emulated(neuron_device):
    from torch.testing._internal.common_methods_invocations import op_db

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sweep = sweep_ops(op_db, SAMPLES_PER_OP)
    print()
    print(sweep.table())
    counts = sweep.counts()
    assert counts["wrong"] == 0, [str(outcome) for outcome in sweep.named("wrong")]
    assert counts["crashed"] == 0, [str(outcome) for outcome in sweep.named("crashed")]
    # Every op was tried: the sweep covers the whole database, not a chosen subset.
    assert len({outcome.name.split("[")[0] for outcome in sweep.outcomes}) == len(
        {op.name + (f".{op.variant_test_name}" if op.variant_test_name else "") for op in op_db}
    )
    assert counts["agreeing"] > 0.9 * len(sweep.outcomes)
    # neuron refuses complex dtypes: the FFTs are refused by the profile, not crashes or gaps.
    assert any(outcome.name.startswith("fft.fft[") for outcome in sweep.named("refused by profile"))
    # Not emulated yet: only the sparse layouts, each named as the emulator's gap.
    assert all("sparse" in outcome.detail for outcome in sweep.named("not emulated"))


@pytest.mark.slow
def test_every_differentiable_opinfo_op_backward_agrees_is_refused_or_is_not_emulated(neuron_device):
    from torch.testing._internal.common_methods_invocations import op_db

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sweep = sweep_ops(op_db, SAMPLES_PER_OP, backward=True)
    print()
    print(sweep.table())
    counts = sweep.counts()
    assert counts["wrong"] == 0, [str(outcome) for outcome in sweep.named("wrong")]
    assert counts["crashed"] == 0, [str(outcome) for outcome in sweep.named("crashed")]
    # sgn's gradient of a real input is autograd's storage-less zero tensor: held as zeros on the device.
    assert "sgn[0]" in {outcome.name for outcome in sweep.named("agreeing")}
    assert counts["agreeing"] > 0.9 * (len(sweep.outcomes) - counts["not applicable"])
    assert all("sparse" in outcome.detail for outcome in sweep.named("not emulated"))
