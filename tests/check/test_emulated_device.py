"""The emulated device: a real PyTorch device that behaves like the target profile says.

Real models (GPT-2, BERT, T5 from tiny configs, a CNN, an LSTM, an AMP loop) match the CPU exactly
when no downcast applies, and differ as expected when the profile downcasts.
"""

import io

import pytest
import torch
import torch.nn.attention
from torch import nn

from torchport import emulated as device
from torchport.errors import EmulatedDeviceError

EMULATED = device.DEVICE_TYPE


def train_step(model, inputs, loss_of, optimizer_holder={}):
    """One optimizer step; the optimizer is created on first use per model."""
    optimizer = optimizer_holder.get(id(model))
    if optimizer is None:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        optimizer_holder[id(model)] = optimizer
    loss = loss_of(model, inputs)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return loss


def assert_identical(cpu_results, emulated_results):
    assert len(cpu_results) == len(emulated_results)
    for expected, actual in zip(cpu_results, emulated_results):
        assert actual.dtype == expected.dtype and torch.equal(actual, expected), (expected, actual)


# -- a device, not the CPU --------------------------------------------------------------------


def test_tensors_live_on_the_device_and_mixing_with_cpu_fails(target):
    target("neuron")
    on_device = torch.ones(3, device=EMULATED)
    assert on_device.device.type == EMULATED and not on_device.is_cpu
    with pytest.raises(RuntimeError, match="same device"):
        on_device + torch.ones(3)
    with pytest.raises(TypeError, match="numpy"):  # as for a CUDA tensor: .cpu() first
        on_device.numpy()
    # A 0-dim CPU tensor is allowed, as on CUDA.
    assert torch.equal((on_device * torch.tensor(2.0)).cpu(), torch.full((3,), 2.0))


def test_indexing_mixes_as_cuda_allows(target):
    # a device tensor takes host or device indices; a host tensor only host ones (the class-weight
    # table left on the host by .cuda(), indexed by the device labels, raises on a GPU)
    target("neuron")
    table, labels = torch.arange(4.0), torch.tensor([0, 2])
    on_device = table.to(EMULATED)
    assert on_device[labels].tolist() == on_device[labels.to(EMULATED)].tolist() == [0.0, 2.0]
    assert table[labels].tolist() == [0.0, 2.0]
    for index in (labels.to(EMULATED), (table > 1).to(EMULATED)):
        with pytest.raises(RuntimeError, match=r"indices should be either on cpu or on the same device"):
            table[index]
    with pytest.raises(RuntimeError, match=r"indices should be either on cpu or on the same device"):
        table[labels.to(EMULATED)] = 1.0


def test_accelerator_api_reports_synchronizes_and_counts_memory(target):
    target("neuron")
    assert torch.accelerator.current_accelerator().type == EMULATED
    module = torch.get_device_module(EMULATED)
    module.reset_peak_memory_stats()
    before = torch.accelerator.memory_allocated()
    block = torch.empty(1024, 1024, device=EMULATED)
    assert torch.accelerator.memory_allocated() - before == 4 * 1024 * 1024
    assert module.memory_allocated() == torch.accelerator.memory_allocated()
    del block
    assert torch.accelerator.memory_allocated() == before
    assert torch.accelerator.max_memory_allocated() >= before + 4 * 1024 * 1024
    torch.accelerator.synchronize()
    module.synchronize()
    assert module.get_device_properties().total_memory == 96 * 2**30


def test_fp64_is_computed_in_fp32_on_neuron_with_the_dtype_kept(target):
    target("neuron")
    value = torch.tensor([1.0 + 1e-12], dtype=torch.float64)
    on_device = value.to(EMULATED)
    assert on_device.dtype == torch.float64
    assert on_device.cpu().item() == 1.0  # the 1e-12 is below fp32 resolution
    assert ((on_device * 3).cpu() == 3.0).all()
    device.set_downcast_enabled(False)
    assert value.to(EMULATED).cpu().item() == value.item()


def test_int64_wraps_like_int32_on_neuron_and_not_on_xla(target):
    target("neuron")
    large = torch.tensor([2**31 + 5], dtype=torch.int64)
    assert large.to(EMULATED).cpu().item() == -(2**31) + 5
    target("xla")
    assert large.to(EMULATED).cpu().item() == 2**31 + 5


def test_mps_refuses_fp64_with_the_targets_message(target):
    target("mps")
    with pytest.raises(EmulatedDeviceError, match="float64"):
        torch.zeros(2, dtype=torch.float64, device=EMULATED)
    with pytest.raises(EmulatedDeviceError, match="float64"):
        torch.zeros(2, dtype=torch.float64).to(EMULATED)


def test_unsupported_op_runs_on_the_host_or_fails_in_strict_mode(target):
    target("neuron")
    values = torch.tensor([0.0, 1.0, 0.0, 2.0], device=EMULATED)
    assert torch.equal(values.nonzero().cpu(), torch.tensor([[1], [3]]))
    device.set_strict(True)
    with pytest.raises(EmulatedDeviceError, match="nonzero is unsupported on target 'neuron'"):
        values.nonzero()


def test_save_and_load_keep_device_views_and_honour_map_location(target):
    target("cpu")
    weights = torch.randn(3, 4).to(EMULATED)
    buffer = io.BytesIO()
    torch.save({"weights": weights, "row": weights[1]}, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer)
    assert loaded["weights"].device.type == EMULATED
    assert torch.equal(loaded["weights"].cpu(), weights.cpu())
    loaded["row"].add_(1)  # the view still shares the loaded storage
    assert torch.equal(loaded["weights"][1].cpu(), loaded["row"].cpu())
    buffer.seek(0)
    assert torch.load(buffer, map_location="cpu")["weights"].device.type == "cpu"


def test_out_variants_and_views_write_through(target):
    target("cpu")
    base = torch.zeros(4, 4, device=EMULATED)
    base[1].fill_(3.0)
    base.t()[2].add_(1.0)
    expected = torch.zeros(4, 4)
    expected[1].fill_(3.0)
    expected.t()[2].add_(1.0)
    assert torch.equal(base.cpu(), expected)
    result = torch.empty(0, device=EMULATED)
    torch.mul(base, 2, out=result)
    assert result.shape == (4, 4) and torch.equal(result.cpu(), expected * 2)


# -- real models, exact against the CPU ------------------------------------------------------


def test_cnn_training_matches_cpu_exactly(target, run_both):
    target("cpu")

    def build():
        model = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 8, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 5),
        )
        return model, [torch.randn(4, 3, 16, 16), torch.randint(0, 5, (4,))]

    def step(model, inputs):
        return train_step(model, inputs, lambda m, i: nn.functional.cross_entropy(m(i[0]), i[1]))

    assert_identical(*run_both(build, step))


def test_lstm_training_matches_cpu_exactly(target, run_both):
    target("cpu")

    class Tagger(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = nn.Embedding(50, 16)
            self.lstm = nn.LSTM(16, 32, num_layers=2, batch_first=True)
            self.head = nn.Linear(32, 7)

        def forward(self, tokens):
            return self.head(self.lstm(self.embedding(tokens))[0])

    def build():
        return Tagger(), [torch.randint(0, 50, (3, 12)), torch.randint(0, 7, (3, 12))]

    def step(model, inputs):
        return train_step(
            model, inputs, lambda m, i: nn.functional.cross_entropy(m(i[0]).flatten(0, 1), i[1].flatten())
        )

    cpu_results, emulated_results = run_both(build, step)
    # Like CUDA, the emulated device takes PyTorch's fused LSTM cell (the CPU sums the gate biases
    # in another order), so results agree to rounding rather than bit for bit.
    for expected, actual in zip(cpu_results, emulated_results):
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-6)


def test_amp_training_loop_matches_cpu_autocast_exactly(target, run_both):
    target("cpu")

    def build():
        model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 4))
        return model, [torch.randn(8, 16), torch.randint(0, 4, (8,))]

    def step(model, inputs):
        device_type = inputs[0].device.type
        with torch.autocast(device_type, dtype=torch.bfloat16):
            logits = model(inputs[0])
            assert logits.dtype == torch.bfloat16  # autocast really casts on the emulated device
            loss = nn.functional.cross_entropy(logits, inputs[1])
        assert loss.dtype == torch.float32
        loss.backward()
        with torch.no_grad():
            for parameter in model.parameters():
                parameter -= 0.1 * parameter.grad
                parameter.grad = None
        return loss

    assert_identical(*run_both(build, step))


transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()


def test_gpt2_training_matches_cpu_exactly_with_tied_weights(target, run_both):
    target("cpu")
    config = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=64, n_positions=32)

    def build():
        return transformers.GPT2LMHeadModel(config), [torch.randint(0, 64, (2, 12))]

    def step(model, inputs):
        return train_step(model, inputs, lambda m, i: m(i[0], labels=i[0]).loss)

    cpu_results, emulated_results = run_both(build, step)
    assert_identical(cpu_results, emulated_results)
    assert emulated_results[-1] < emulated_results[0]


def test_bert_and_t5_forward_match_cpu_exactly(target, run_both):
    target("cpu")
    bert = transformers.BertConfig(
        vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64
    )
    t5 = transformers.T5Config(
        vocab_size=64, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2, decoder_start_token_id=0
    )
    builds = [
        (lambda: (transformers.BertForMaskedLM(bert).eval(), [torch.randint(0, 64, (2, 10))]),
         lambda m, i: m(i[0]).logits),
        (lambda: (transformers.T5ForConditionalGeneration(t5).eval(), [torch.randint(0, 64, (2, 10))]),
         lambda m, i: m(input_ids=i[0], labels=i[0]).logits),
    ]
    # PyTorch picks fused attention kernels per device type; the emulated device gets the math
    # path, so the CPU reference uses it too.
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        for build, forward in builds:
            assert_identical(*run_both(build, forward, steps=1))


def test_gpt2_in_fp64_on_neuron_differs_from_cpu_by_fp32_rounding(target, run_both):
    target("neuron")
    config = transformers.GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=64, n_positions=32)

    def build():
        return transformers.GPT2LMHeadModel(config).double().eval(), [torch.randint(0, 64, (2, 8))]

    cpu_results, emulated_results = run_both(build, lambda m, i: m(i[0]).logits, steps=1)
    difference = (cpu_results[0] - emulated_results[0]).abs().max().item()
    assert emulated_results[0].dtype == torch.float64
    assert 1e-9 < difference < 1e-3  # fp32 rounding, not garbage


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_torch_compile_runs_on_the_device(target, backend):
    target("cpu")
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    inputs = torch.randn(4, 8)
    expected = model(inputs)
    compiled = torch.compile(model.to(EMULATED), backend=backend)
    actual = compiled(inputs.to(EMULATED))
    actual.sum().backward()
    assert actual.device.type == EMULATED
    assert torch.equal(actual.detach().cpu(), expected.detach())
