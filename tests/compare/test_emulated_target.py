"""Against an emulated target (PrivateUse1 device computing on the CPU, behaving like Neuron)."""

import compare_models as models
from compare_devices import EMULATED as TARGET
from compare_devices import requires_emulated
from torchport.compare import compare

pytestmark = requires_emulated


def test_agreeing_model_passes_against_the_emulated_target_without_downcast():
    result = compare(models.agreeing_model, models.stack_inputs, reference="cpu", target=TARGET,
                     performance=False, batch_sizes=[4])
    assert result.status == "pass", result.reasons
    assert not result.self_comparison
    assert all(node.judged_as == "float32" for node in result.parity.nodes)


def test_fp64_buffer_is_downcast_by_the_target_and_that_layer_is_named_first():
    result = compare(models.fp64_model, models.stack_inputs, reference="cpu", target=TARGET,
                     performance=False, batch_sizes=[4])
    assert result.status == "fail"
    assert result.parity.first_divergence == "middle"
    assert result.parity.node("first").passed and result.parity.node("middle").inputs_agree


def test_perturbed_layer_is_named_first_on_the_emulated_target():
    result = compare(models.perturbed_model, models.stack_inputs, reference="cpu", target=TARGET,
                     performance=False, batch_sizes=[4])
    assert result.parity.first_divergence == "middle"


def test_emulated_target_reports_memory_from_its_allocator():
    result = compare(models.agreeing_model, models.stack_inputs, reference="cpu", target=TARGET,
                     parity=False, batch_sizes=[1, 8], iterations=2, warmup=1)
    target = result.performance["target"]
    assert {batch.memory_source for batch in target.batches} == {"device allocator"}
    assert target.at(8).peak_memory_bytes > target.at(1).peak_memory_bytes > 0
    assert result.cost.target_instance == "trn1.2xlarge" and result.cost.ratio is not None


def test_the_emulated_target_against_itself_is_a_self_comparison():
    result = compare(models.agreeing_model, models.stack_inputs, reference=TARGET, target="trainium-emulated",
                     performance=False, batch_sizes=[2])
    assert result.status == "self-comparison" and result.exit_code == 1


def test_small_gpt_training_curves_agree_over_20_steps_on_the_emulated_target():
    result = compare(models.small_gpt, reference="cpu", target=TARGET, parity=False, performance=False,
                     training_step=models.gpt_training_step, batch_factory=models.gpt_batch, train_steps=20)
    training = result.training
    assert training.passed and result.status == "pass", training.reasons
    assert len(training.target_loss) == 20
    assert max(training.loss_rel_diff) < 1e-5 and max(training.grad_norm_rel_diff) < 1e-4
    assert training.target_loss[-1] < training.target_loss[0]
