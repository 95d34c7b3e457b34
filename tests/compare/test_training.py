"""Training mode: loss curve and gradient norm compared step by step on a small GPT."""

import compare_models as models
from torchport.compare import compare


def test_small_gpt_curves_agree_over_20_steps_between_fp32_sides():
    result = compare(models.small_gpt, reference="cpu", target="cpu:fp32", parity=False, performance=False,
                     training_step=models.gpt_training_step, batch_factory=models.gpt_batch, train_steps=20)
    training = result.training
    assert training.steps == 20 and len(training.reference_loss) == 20 and len(training.target_grad_norm) == 20
    assert training.passed and result.status == "pass"
    assert max(training.loss_rel_diff) <= training.tolerance["loss_rel"]
    # The model really trained: same batches each side, loss falls on both.
    assert training.reference_loss[-1] < training.reference_loss[0]
    assert all(norm > 0 for norm in training.reference_grad_norm)


def test_small_gpt_bf16_policy_stays_within_bf16_tolerance_but_is_not_identical():
    result = compare(models.small_gpt, reference="cpu", target="cpu:bf16", parity=False, performance=False,
                     training_step=models.gpt_training_step, batch_factory=models.gpt_batch, train_steps=20)
    training = result.training
    assert training.judged_as == "bfloat16"
    assert max(training.loss_rel_diff) > 0.0
    assert training.passed, training.reasons


def test_diverging_training_names_the_first_bad_step():
    from torchport.compare import current_side

    def drifting_step(model, batch):
        loss = model(**batch).loss
        return loss * 1.5 if current_side() == "target" else loss

    result = compare(models.small_gpt, reference="cpu", target="cpu:fp32", parity=False, performance=False,
                     training_step=drifting_step, batch_factory=models.gpt_batch, train_steps=3)
    assert not result.training.passed and result.status == "fail"
    assert result.training.first_divergent_step == 0
    assert any("loss differs" in reason for reason in result.reasons)
