"""`torchport check` predicts the compilations a static-shape target runs with and without the buckets
torchport.compile would pad to."""

import torch

from torchport.check import check_model

from compile_models import TinyAttention


def test_check_predicts_compilations_with_and_without_compile_buckets():
    torch.manual_seed(0)
    lengths = [17, 20, 33, 40, 64, 100, 17]
    samples = [torch.randint(0, 32, (2, length)) for length in lengths]
    report = check_model(TinyAttention(), samples, target="neuron")
    prediction = report.data["shapes"]["compile_prediction"]
    assert prediction["without_buckets"] == 6  # distinct lengths
    assert prediction["with_buckets"] == 3  # 32, 64, 128
    assert prediction["varying_dimensions"] == [{"input": "input", "dimension": 1}]
    assert "torchport.compile: 6 compilation(s) without buckets, 3 with its power-of-two buckets" in report.text()
