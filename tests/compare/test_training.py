"""Training mode: loss curve and gradient norm compared step by step on a small GPT."""

import compare_models as models
from compare_devices import EMULATED, requires_emulated
from torchport.compare import compare


@requires_emulated
def test_small_gpt_curves_agree_over_20_steps_between_two_devices():
    result = compare(models.small_gpt, reference="cpu", target=EMULATED, parity=False, performance=False,
                     training_step=models.gpt_training_step, batch_factory=models.gpt_batch, train_steps=20)
    assert not result.self_comparison
    training = result.training
    assert training.steps == 20 and len(training.reference_loss) == 20 and len(training.target_grad_norm) == 20
    assert training.passed and result.status == "pass"
    assert max(training.loss_rel_diff) <= training.tolerance["loss_rel"]
    # The model really trained: same batches each side, loss falls on both.
    assert training.reference_loss[-1] < training.reference_loss[0]
    assert all(norm > 0 for norm in training.reference_grad_norm)


def test_small_gpt_against_a_policy_that_changes_nothing_is_a_self_comparison():
    """The GPT holds no float64 tensor: cpu:no-fp64 trains it exactly as cpu does."""
    result = compare(models.small_gpt, reference="cpu", target="cpu:no-fp64", parity=False, performance=False,
                     training_step=models.gpt_training_step, batch_factory=models.gpt_batch, train_steps=2)
    assert result.status == "self-comparison" and result.exit_code == 1
    assert not result.side_effects["target"].changed


def test_small_gpt_bf16_policy_stays_within_bf16_tolerance_but_is_not_identical():
    result = compare(models.small_gpt, reference="cpu", target="cpu:bf16", parity=False, performance=False,
                     training_step=models.gpt_training_step, batch_factory=models.gpt_batch, train_steps=20)
    training = result.training
    assert training.judged_as == "bfloat16"
    assert max(training.loss_rel_diff) > 0.0
    assert training.passed, training.reasons


@requires_emulated
def test_diverging_training_names_the_first_bad_step():
    from torchport.compare import current_side

    def drifting_step(model, batch):
        loss = model(**batch).loss
        return loss * 1.5 if current_side() == "target" else loss

    result = compare(models.small_gpt, reference="cpu", target=EMULATED, parity=False, performance=False,
                     training_step=drifting_step, batch_factory=models.gpt_batch, train_steps=3)
    assert not result.training.passed and result.status == "fail"
    assert result.training.first_divergent_step == 0
    assert any("loss differs" in reason for reason in result.reasons)
