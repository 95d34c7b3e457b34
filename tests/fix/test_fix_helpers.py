"""Fixes that need more than a renamed call: helpers written into the module, and the forms written
for an older torch (below 2.6, and 2.7, which lacks some torch.accelerator functions). Each fixed
snippet is executed here (CPU only, no torchport)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from torchport.fix.engine import fix_source
from torchport.rules.registry import all_rules

CODES = tuple(rule.code for rule in all_rules())

TIMING = '''import json
from time import time

import torch

wall = time()
start = torch.cuda.Event(enable_timing=True)
end = torch.cuda.Event(enable_timing=True)
start.record(torch.cuda.current_stream())
x = torch.ones(64, 64) @ torch.ones(64, 64)
end.record()
end.synchronize()
print(json.dumps({"ms": start.elapsed_time(end), "wall": time() - wall, "done": end.query()}))
'''

#: Snippets written for CUDA that must run on this CPU-only machine once fixed, for both torch forms.
SNIPPETS = {
    "events": TIMING,
    "streams": (
        "import torch\ns = torch.cuda.Stream()\nx = torch.ones(3)\nwith torch.cuda.stream(s):\n    y = x * 2\n"
        "torch.cuda.current_stream().wait_stream(s)\ny.record_stream(torch.cuda.current_stream())\n"
        "torch.cuda.current_stream().synchronize()\nprint(y.sum().item())\n"
    ),
    "device context": (
        "import torch\nwith torch.cuda.device(0):\n    n = torch.cuda.device_count()\n"
        "    parts = [torch.ones(1, device=f'cuda:{i}') for i in range(n)]\nprint(len(parts))\n"
    ),
    "properties": (
        "import torch\nname = torch.cuda.get_device_name(0)\nprops = torch.cuda.get_device_properties(0)\n"
        "major, minor = torch.cuda.get_device_capability()\nbf16 = torch.cuda.get_device_capability()[0] >= 8\n"
        "print(name, props.total_memory > 0, props.multi_processor_count >= 1, major, bf16)\n"
    ),
    "assert and nvtx": (
        "import torch\nassert torch.cuda.is_available(), 'needs a GPU'\ntorch.cuda.nvtx.range_push('step')\n"
        "with torch.cuda.nvtx.range('forward'):\n    y = torch.ones(2) * 3\ntorch.cuda.nvtx.range_pop()\n"
        "print(y.sum().item(), torch.cuda.is_initialized())\n"
    ),
    "pinned and checkpoint": (
        "import io\nimport torch\nbuffer = torch.randn(4, 4).pin_memory()\nsaved = io.BytesIO()\n"
        "torch.save(buffer, saved)\nsaved.seek(0)\nback = torch.load(saved, map_location='cuda:0')\n"
        "print(torch.cuda.max_memory_allocated() >= 0, back.shape)\n"
    ),
    # `.cuda(None)` is the current device (imagenet's `args.gpu` left unset); `.to(None)` would not move
    "cuda of an unset device": (
        "import torch\ndef pick():\n    return None\ndev = pick()\nmodel = torch.nn.Linear(2, 2).cuda(dev)\n"
        "x = torch.ones(1, 2).cuda(dev, non_blocking=True)\nprint(model(x).device.type)\n"
    ),
}


def _run(source: str, tmp_path, expect_warning: str | None = None) -> str:
    """Run the fixed program with plain python in a process of its own (this test process may hold an
    accelerator registered by other tests, such as the emulated device); returns what it printed."""
    script = tmp_path / "fixed.py"
    script.write_text(source)
    environment = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path,
                            env=environment, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    if expect_warning is not None:
        assert "UserWarning" in result.stderr and expect_warning in result.stderr, result.stderr
    return result.stdout


@pytest.mark.parametrize("floor", [None, (2, 7), (2, 5)], ids=["current torch", "torch 2.7", "torch<2.6"])
@pytest.mark.parametrize("name", sorted(SNIPPETS))
def test_fixed_snippet_runs_without_cuda_and_fixing_again_changes_nothing(name, floor, tmp_path):
    assert not torch.cuda.is_available()
    result = fix_source(SNIPPETS[name], f"{name}.py", CODES, unsafe=True, floor=floor)
    assert result.error is None and result.changed
    fixable = [f"{item.code}:{item.line}" for item in result.remaining if item.fix is not None]
    assert not fixable, f"fix left fixable findings: {fixable}\n{result.fixed}"
    if floor == (2, 5):
        assert "torch.accelerator" not in result.fixed, result.fixed
    if floor == (2, 7):  # torch 2.7 has neither the device_index context nor the memory functions
        assert "accelerator.device_index" not in result.fixed and "accelerator.max_memory" not in result.fixed
    again = fix_source(result.fixed, f"{name}.py", CODES, unsafe=True, floor=floor)
    assert again.fixed == result.fixed
    assert _run(result.fixed, tmp_path, expect_warning="needs a GPU" if name == "assert and nvtx" else None).strip()


def test_host_event_is_written_once_and_times_with_the_host_clock_when_time_is_rebound(tmp_path):
    fixed = fix_source(TIMING, "bench.py", CODES, unsafe=True).fixed
    assert fixed.count("class _HostEvent") == 1
    assert fixed.index("class _HostEvent") > fixed.index("import torch")
    assert fixed.index("class _HostEvent") < fixed.index("wall = time()")
    printed = _run(fixed, tmp_path)
    assert '"done": true' in printed and '"ms": ' in printed
    ms = float(printed.split('"ms": ')[1].split(",")[0])
    assert ms >= 0


def test_device_count_used_as_a_number_is_one_without_an_accelerator_but_tests_keep_their_answer(tmp_path):
    source = "import torch\nn = torch.cuda.device_count()\nmany = torch.cuda.device_count() > 1\nprint(n, many)\n"
    fixed = fix_source(source, "count.py", CODES, unsafe=True).fixed
    assert _run(fixed, tmp_path).split() == ["1", "False"]


def test_cuda_of_a_value_that_may_be_none_asks_for_the_current_device_on_an_accelerator():
    fixed = fix_source(SNIPPETS["cuda of an unset device"], "unset.py", CODES, unsafe=True).fixed
    # on a machine with an accelerator the unset value means its current device, as `.cuda(None)` does
    assert ".to((dev if dev is not None else torch.accelerator.current_device_index()) if " in fixed, fixed
    legacy = fix_source(SNIPPETS["cuda of an unset device"], "unset.py", CODES, unsafe=True, legacy=True).fixed
    assert "torch.accelerator" not in legacy and "torch.cuda.current_device()" in legacy, legacy
