"""Performance sweep and cost per unit of work; the speech model counts seconds of audio."""

import pytest
import yaml

import compare_models as models
from torchport.compare import Unit, compare, load_prices
from torchport.compare.cost import PriceTable
from torchport.compare.performance import percentile
from torchport.errors import UsageError


def test_sweep_measures_every_batch_size_on_both_sides():
    result = compare(models.agreeing_model, models.stack_inputs, reference="cpu", target="cpu:bf16",
                     parity=False, batch_sizes=[1, 4], iterations=5, warmup=1)
    for side_name in ("reference", "target"):
        side = result.performance[side_name]
        assert [batch.batch_size for batch in side.batches] == [1, 4]
        for batch in side.batches:
            assert len(batch.latencies_ms) == 5
            assert batch.p50_ms <= batch.p95_ms <= batch.p99_ms
            assert batch.samples_per_second > 0 and batch.warmup_seconds > 0
            assert batch.peak_memory_bytes > 0
            assert batch.compilations is None  # eager on cpu reports none
    # Larger batches hold more activations.
    reference = result.performance["reference"]
    assert reference.at(4).peak_memory_bytes > reference.at(1).peak_memory_bytes


def test_percentile_interpolates():
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 0.5) == 3.0
    assert percentile([1.0, 2.0], 0.99) == pytest.approx(1.99)
    assert percentile([], 0.5) == 0.0


def test_speech_encoder_cost_is_in_audio_seconds_per_dollar(tmp_path):
    prices = {
        "instances": {"small": {"price_per_hour": 1.0}, "large": {"price_per_hour": 2.0}},
        "devices": {"cpu": "small"},
    }
    path = tmp_path / "prices.yaml"
    path.write_text(yaml.safe_dump(prices))
    result = compare(models.small_speech_encoder, models.speech_inputs, reference="cpu", target="cpu:bf16",
                     parity=False, batch_sizes=[2], iterations=3, warmup=1,
                     unit=Unit("audio_seconds", models.AUDIO_SECONDS), prices=str(path))
    cost = result.cost
    assert cost.unit == {"name": "audio_seconds", "per_sample": models.AUDIO_SECONDS}
    reference = result.performance["reference"].at(2)
    assert reference.units_per_second == pytest.approx(reference.samples_per_second * models.AUDIO_SECONDS)
    assert cost.reference_units_per_dollar == pytest.approx(reference.units_per_second * 3600.0)
    target = result.performance["target"].at(2)
    assert cost.ratio == pytest.approx(target.units_per_second / reference.units_per_second)
    assert "audio seconds per USD" in cost.summary


def test_shipped_price_table_cites_sources_and_covers_the_backends():
    table = load_prices()
    for name, entry in table.instances.items():
        assert entry["price_per_hour"] > 0
        assert entry["source"].startswith("https://") and entry["noted"]
    for backend_name in ("cpu", "cuda", "neuron", "xla"):
        assert table.instance_for(backend_name) is not None
    assert "EXAMPLES" in open(table.source).read()


def test_missing_price_is_explained_not_fatal():
    table = PriceTable(instances={"a": {"price_per_hour": 1.0}}, devices={}, source="inline")
    result = compare(models.agreeing_model, models.stack_inputs, reference="cpu", target="cpu:bf16",
                     parity=False, batch_sizes=[1], iterations=2, warmup=1, prices=table)
    assert result.cost.ratio is None and "No price for 'cpu'" in result.cost.summary


@pytest.mark.parametrize(
    "content, message",
    [("instances: [", "not valid YAML"),
     ("instances: {a: {price_per_hour: -1}}\ndevices: {}", "positive number"),
     ("instances: {a: {price_per_hour: 1}}\ndevices: {cpu: b}", "does not price"),
     ("devices: {}", "wrong layout")],
)
def test_bad_price_tables_say_what_is_wrong(tmp_path, content, message):
    path = tmp_path / "prices.yaml"
    path.write_text(content)
    with pytest.raises(UsageError, match=message):
        load_prices(path)


def test_throughput_and_memory_gates():
    result = compare(models.agreeing_model, models.stack_inputs, reference="cpu", target="cpu:bf16",
                     parity=False, batch_sizes=[2], iterations=3, warmup=1,
                     min_throughput_ratio=1000.0, max_memory_ratio=1000.0)
    checks = {check.name: check for check in result.performance_checks}
    assert not checks["throughput_ratio"].passed
    assert checks["memory_ratio"].passed
    assert result.status == "fail" and any("throughput" in reason for reason in result.reasons)
