"""check_model: compilations predicted per distinct shape, buckets that cut them as stated, fp64 measured."""

import json

import torch
from torch import nn

from torchport.check import check_model, check_script


class TinyEncoder(nn.Module):
    """Embedding + GRU-free mixer: every op sees the sequence length."""

    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(32, 16)
        self.mix = nn.Linear(16, 16)
        self.head = nn.Linear(16, 4)

    def forward(self, tokens):
        hidden = torch.tanh(self.mix(self.embedding(tokens)))
        return self.head(hidden.mean(dim=1))


def variable_length_samples():
    generator = torch.Generator().manual_seed(0)
    lengths = [5, 7, 9, 12, 13, 17, 20, 31, 33, 40]
    return [torch.randint(1, 32, (2, length), generator=generator) for length in lengths]


def test_variable_lengths_compile_once_per_shape_and_buckets_cut_it_as_stated(target):
    torch.manual_seed(0)
    samples = variable_length_samples()
    report = check_model(TinyEncoder(), samples, target="neuron")
    shapes = report.data["shapes"]
    assert shapes["static_shapes_required"]
    assert shapes["predicted_compilations"] == len(samples)  # one per distinct length
    bucketing = shapes["bucketing"]
    assert bucketing["dimensions"][0]["dimension"] == 1
    assert bucketing["dimensions"][0]["buckets"] == [8, 16, 32, 40]
    assert bucketing["distinct_shapes_before"] == 10 and bucketing["distinct_shapes_after"] == 4
    # Re-running padded to the buckets compiles exactly as many graphs as stated.
    assert bucketing["verified_compilations_after"] == 4
    assert any("compilations" in fix["problem"] for fix in report.data["fixes"])


def test_fp64_model_is_flagged_with_its_measured_error(target):
    torch.manual_seed(0)
    model = TinyEncoder().double()
    samples = [torch.randint(1, 32, (2, 8))]
    report = check_model(model, samples, target="neuron")
    hazards = report.data["dtypes"]["downcasts"]
    assert any(hazard["from"] == "float64" and hazard["to"] == "float32" and hazard["changed"] for hazard in hazards)
    effect = report.data["dtypes"]["numeric_effect"]
    assert 1e-12 < effect["max_abs_error"] < 1e-3 and effect["max_rel_error"] > 0
    assert any("float64 is computed as float32" in fix["problem"] for fix in report.data["fixes"])
    clean = check_model(TinyEncoder(), samples, target="cuda")
    assert clean.data["dtypes"]["downcasts"] == [] and clean.data["dtypes"]["numeric_effect"] is None


def test_report_renders_text_json_and_self_contained_html(target, tmp_path):
    torch.manual_seed(0)
    report = check_model(TinyEncoder(), variable_length_samples()[:3], target="neuron",
                         loss_function=lambda result, tokens: result.sum())
    text = report.text()
    assert "predicted compilations" in text and "verdict" in text
    data = json.loads(report.json())
    assert data["ops"] and data["memory"]["peak_bytes"] > 0 and data["memory"]["target_bytes"] == 96 * 2**30
    page = report.html()
    assert page.startswith("<!doctype html>") and "http" not in page.split("<body>")[1]
    report.write(str(tmp_path / "report.html"), "html")
    assert (tmp_path / "report.html").read_text() == page


def test_unsupported_op_blocks_the_verdict_with_a_call_site(target):
    class UsesNonzero(nn.Module):
        def forward(self, values):
            return values[values.nonzero(as_tuple=True)].sum()

    report = check_model(UsesNonzero(), [torch.tensor([0.0, 1.0, 2.0])], target="neuron")
    assert report.verdict.startswith("blocked") and "aten::nonzero" in report.verdict
    nonzero = next(op for op in report.data["ops"] if op["name"] == "aten::nonzero")
    assert nonzero["status"] == "unsupported" and any("test_check_api.py" in site for site in nonzero["sites"])
    assert report.data["host_syncs"]["total"] >= 1


class ReadsTheRecorder(nn.Module):
    """Stands for any model that computes differently while check records it."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, values):
        from torchport import emulated

        return self.linear(values) + (0.0 if emulated.get_recorder() is None else 1.0)


class DropoutModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.drop = nn.Dropout(0.5)

    def forward(self, values):
        return self.drop(self.linear(values))


def test_a_census_that_would_change_the_model_is_not_taken_and_the_report_says_so(target):
    torch.manual_seed(0)
    report = check_model(ReadsTheRecorder(), [torch.randn(2, 4)], target="neuron")
    assert report.verdict.startswith("not checked: the op census was not taken in full (recording its ops changes "
                                     "what the model computes")
    (item,) = report.data["not_checked"]
    assert item["what"].startswith("the op census (ops and their status, call sites, shapes")
    assert report.data["ops"] == []
    assert "not checked: the op census" in report.text() and "<h2>Not checked</h2>" in report.html()


def test_a_census_that_fails_stops_recording_and_the_workload_still_runs(target, monkeypatch):
    from torchport.check import census

    def broken(values):
        raise ValueError("census bug")

    monkeypatch.setattr(census, "_signature", broken)  # a bug in the census's own bookkeeping
    torch.manual_seed(0)
    report = check_model(TinyEncoder(), [torch.randint(1, 32, (2, 8))], target="neuron")
    assert report.verdict.startswith("not checked: the op census was not taken in full (recording failed at "
                                     "record_op(aten::")
    assert "ValueError: census bug" in report.data["not_checked"][0]["why"]
    assert report.data["not_checked"][0]["what"].endswith("from this point on")


def test_recorded_and_unrecorded_runs_agree_for_ordinary_models_including_dropout(target):
    torch.manual_seed(0)
    samples = [torch.randn(2, 4), torch.randn(2, 4)]
    for model in (DropoutModel(), TinyEncoder()):
        inputs = samples if isinstance(model, DropoutModel) else [torch.randint(1, 32, (2, 8))]
        report = check_model(model, inputs, target="neuron")
        assert report.data["not_checked"] == [] and report.data["ops"]
        assert not report.verdict.startswith("not checked")
    # check seeds its runs in a forked generator: the caller's random stream is untouched.
    model = DropoutModel()
    torch.manual_seed(1)
    expected = torch.rand(3)
    torch.manual_seed(1)
    check_model(model, samples, target="neuron")
    assert torch.equal(torch.rand(3), expected)


def test_a_program_is_never_stopped_by_a_failing_census(target, monkeypatch, tmp_path, capsys):
    from torchport.check import census, check_script

    def broken(values):
        raise ValueError("census bug")

    monkeypatch.setattr(census, "_signature", broken)
    script = tmp_path / "step.py"
    script.write_text("import torch\nweights = torch.ones(3, device='cuda')\nprint('total', (weights * 2).sum().item())\n")
    report = check_script(str(script), [], target="neuron")
    assert "total 6.0" in capsys.readouterr().out
    assert report.data["program"]["ended"] == "returned" and report.data["script_exit_code"] == 0
    assert report.verdict.startswith("not checked: the op census was not taken in full (recording failed at ")


def test_a_checked_script_sees_the_library_settings_and_the_caller_gets_its_environment_back(target, tmp_path, capsys):
    import os

    script = tmp_path / "settings.py"
    script.write_text("import os\nprint('setting', os.environ.get('ACCELERATE_TORCH_DEVICE'))\n")
    before = dict(os.environ)
    check_script(str(script), [], target="neuron")
    # Accelerate (a dev dependency) is steered to the emulated device while the script runs ...
    assert "setting emulated" in capsys.readouterr().out
    # ... and the caller's environment is as it was afterwards
    assert dict(os.environ) == before
