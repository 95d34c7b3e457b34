"""Reports: the JSON document follows the published schema, the Markdown summary names what failed,
and the HTML page renders in headless Chromium with its plots present."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest

import compare_models as models
from torchport.compare import compare, write_html, write_json, write_markdown
from torchport.compare.reports.json_report import schema, schema_path
from torchport.compare.reports.markdown import render_markdown

REPOSITORY = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def full_result():
    """A failing comparison with parity, training, a two-size sweep and cost."""
    return compare(models.fp64_model, models.stack_inputs, reference="cpu", target="cpu:fp32",
                   batch_sizes=[1, 4], iterations=4, warmup=1, train_steps=4,
                   training_step=lambda model, batch: model(*batch).pow(2).mean())


def test_published_schema_is_the_shipped_schema_and_is_valid():
    assert json.loads((REPOSITORY / "docs" / "compare-schema.json").read_text()) == schema()
    jsonschema.Draft202012Validator.check_schema(schema())
    assert schema_path().name == "schema.json"


def test_full_document_validates_and_round_trips(full_result, tmp_path):
    path = write_json(full_result, tmp_path / "result.json")
    document = json.loads(path.read_text())
    jsonschema.validate(document, schema())
    assert document["status"] == "fail" and document["exit_code"] == 1
    assert document["parity"]["first_divergence"] == "middle"
    assert document["training"]["steps"] == 4
    assert [batch["batch_size"] for batch in document["performance"]["target"]["batches"]] == [1, 4]


def test_self_comparison_and_parity_only_documents_validate():
    result = compare(models.agreeing_model, models.stack_inputs, reference="cpu", target="cpu",
                     performance=False, batch_sizes=[2])
    document = result.to_dict()
    jsonschema.validate(document, schema())
    assert document["status"] == "self-comparison" and document["passed"] is False
    assert document["performance"] is None and document["cost"] is None


def test_schema_rejects_a_document_with_an_unknown_status(full_result):
    document = full_result.to_dict()
    document["status"] = "probably fine"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(document, schema())


def test_markdown_summary_names_status_first_divergence_and_cost(full_result, tmp_path):
    text = write_markdown(full_result, tmp_path / "summary.md").read_text()
    assert text.startswith("# torchport compare: FAIL")
    assert "First divergence: **`middle`**" in text
    assert "| **middle** |" in text
    assert "## Training" in text and "## Performance" in text and "## Cost" in text


def test_markdown_of_a_self_comparison_says_it_is_not_a_pass():
    result = compare(models.agreeing_model, models.stack_inputs, reference="cpu", target="cpu",
                     performance=False, batch_sizes=[2])
    assert "SELF-COMPARISON (not a pass)" in render_markdown(result)


def chromium_binary():
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def run_chromium(arguments, profile):
    command = [chromium_binary(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
               *arguments]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(chromium_binary() is None,
                    reason="headless Chromium is not installed (apt-get install -y chromium; .ci/run installs it)")
def test_html_report_renders_in_headless_chromium_with_its_plots(full_result, tmp_path):
    page = write_html(full_result, tmp_path / "report.html")
    html = page.read_text()
    # Self-contained: nothing fetched from elsewhere.
    assert "<link" not in html and "<script" not in html
    assert not re.search(r'(src|href)="https?:', html)
    dumped = run_chromium(["--dump-dom", page.as_uri()], tmp_path / "profile-dom")
    assert dumped.returncode == 0, dumped.stderr[-2000:]
    dom = dumped.stdout
    for plot_id in ("plot-layer-error", "plot-latency", "plot-throughput", "plot-training"):
        assert f'id="{plot_id}"' in dom, plot_id
    assert dom.count("<path") > 50  # the plots carry their drawing, not an empty frame
    assert 'id="first-divergence">middle<' in dom
    assert 'id="status">FAIL<' in dom

    screenshot = tmp_path / "report.png"
    shot = run_chromium([f"--screenshot={screenshot}", "--window-size=1200,3000", page.as_uri()],
                        tmp_path / "profile-shot")
    assert shot.returncode == 0 and screenshot.exists(), shot.stderr[-2000:]
    from matplotlib import image

    pixels = image.imread(str(screenshot))[..., :3]
    reddish = ((pixels[..., 0] > 0.7) & (pixels[..., 1] < 0.35) & (pixels[..., 2] < 0.35)).sum()
    blueish = ((pixels[..., 2] > 0.6) & (pixels[..., 0] < 0.3)).sum()
    assert reddish > 500 and blueish > 500, (reddish, blueish)  # the failing bars and the reference series


def test_reports_replace_an_existing_file_whole_and_leave_no_temporary_files(full_result, tmp_path, monkeypatch):
    import os

    for write, name in ((write_json, "r.json"), (write_markdown, "r.md"), (write_html, "r.html")):
        path = tmp_path / name
        path.write_text("old report")
        assert write(full_result, path) == path
        assert path.read_text() != "old report" and len(path.read_text()) > 100
    assert sorted(path.name for path in tmp_path.iterdir()) == ["r.html", "r.json", "r.md"]
    # A write that fails midway leaves the old file as it was and no temporary file behind.
    path = tmp_path / "r.json"
    before = path.read_text()

    def failing_replace(source, destination):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="No space left"):
        write_json(full_result, path)
    assert path.read_text() == before
    assert sorted(path.name for path in tmp_path.iterdir()) == ["r.html", "r.json", "r.md"]
