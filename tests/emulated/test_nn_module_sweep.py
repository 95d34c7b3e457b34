"""Every torch.nn module class on the emulated device, forward and backward in training mode and forward
in eval mode: agrees with the CPU (outputs, input and parameter gradients), is refused by the profile,
or says it is not emulated. Never a wrong answer, never a crash."""

import warnings

import pytest

pytest.importorskip("expecttest")  # torch.testing._internal needs it (the dev extra installs it)

from emulated_sweep import NOT_A_COMPUTATION, nn_classes, sweep_nn_modules  # noqa: E402

INPUTS_PER_MODULE = 2


@pytest.mark.slow
def test_every_nn_module_agrees_forward_and_backward(neuron_device):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sweep = sweep_nn_modules(INPUTS_PER_MODULE)
    print()
    print(sweep.table())
    counts = sweep.counts()
    assert counts["wrong"] == 0, [str(outcome) for outcome in sweep.named("wrong")]
    assert counts["crashed"] == 0, [str(outcome) for outcome in sweep.named("crashed")]
    # Every class torch.nn exports was tried; only containers and bases are without a computation.
    swept = {outcome.name.split("[")[0].split(".")[0] for outcome in sweep.outcomes}
    assert swept == {cls.__name__ for cls in nn_classes()}
    # Each class that computes was compared at least once (a ModuleInfo sample the CPU itself rejects,
    # as for FractionalMaxPool, is backed by a valid sample of the sweep's own).
    compared = {outcome.name.split("[")[0].split(".")[0] for outcome in sweep.outcomes
                if outcome.status != "not applicable"}
    assert compared == swept - set(NOT_A_COMPUTATION)
    # No emulator gap left: TransformerEncoder's eval fast path (nested tensors) agrees too.
    assert sweep.named("not emulated") == []
    assert "TransformerEncoder[0].eval" in {outcome.name for outcome in sweep.named("agreeing")}
    agreeing = {outcome.name.split("[")[0] for outcome in sweep.named("agreeing")}
    assert {"GRU", "LSTM", "RNN", "GRUCell", "TransformerEncoder", "TransformerDecoder", "MultiheadAttention"} <= agreeing
