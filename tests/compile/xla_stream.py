"""Run in .venv-xla with PJRT_DEVICE=CPU: a variable-length stream through torchport.compile on the
xla device (openxla), with and without buckets; prints one JSON line."""

import json
import os
import random
import sys

import torch
import torch_xla  # noqa: F401 - registers the xla device
import torch_xla.debug.metrics as metrics

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torchport  # noqa: E402
from compile_models import TinyAttention  # noqa: E402


def xla_compiles() -> int:
    data = metrics.metric_data("CompileTime")
    return int(data[0]) if data else 0


def stream(compiled, model_cpu, batches, device):
    worst = 0.0
    for ids in batches:
        got = compiled(ids.to(device)).cpu()
        expected = model_cpu(ids)
        worst = max(worst, float((got - expected).abs().max()))
    return worst


def main() -> None:
    count, low, high, plain_count = (int(value) for value in sys.argv[1:5])
    torch.manual_seed(0)
    model_cpu = TinyAttention().eval()
    device = torch.device("xla")
    model = TinyAttention().eval()
    model.load_state_dict(model_cpu.state_dict())
    model = model.to(device)
    generator = random.Random(0)
    batches = [torch.randint(0, 32, (2, generator.randint(low, high))) for _ in range(count)]
    result = {"lengths": len({ids.shape[1] for ids in batches})}

    compiled = torchport.compile(model, target="xla")
    before = xla_compiles()
    result["bucketed_max_error"] = stream(compiled, model_cpu, batches, device)
    result["bucketed_xla_compiles"] = xla_compiles() - before
    result["bucketed_report"] = compiled.report.to_dict()
    result["first_two_equal"] = batches[0].shape == batches[1].shape

    plain = torchport.compile(model, target="xla", buckets=None)
    before = xla_compiles()
    result["plain_max_error"] = stream(plain, model_cpu, batches[:plain_count], device)
    result["plain_xla_compiles"] = xla_compiles() - before
    result["plain_lengths"] = len({ids.shape[1] for ids in batches[:plain_count]})
    result["plain_compilations"] = plain.report.compilations
    print("RESULT " + json.dumps(result, default=str))


if __name__ == "__main__":
    main()
