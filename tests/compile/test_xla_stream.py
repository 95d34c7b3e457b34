"""The variable-length stream on XLA's CPU runtime (PJRT_DEVICE=CPU) in .venv-xla, with openxla as
the compiler: model graphs compiled <= buckets with torchport.compile, one per length without."""

import json
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
XLA_PYTHON = os.path.join(ROOT, ".venv-xla", "bin", "python")

pytestmark = pytest.mark.skipif(
    not os.path.exists(XLA_PYTHON), reason="no .venv-xla: run scripts/setup-xla-env.sh to test compiling for xla"
)


@pytest.mark.slow
def test_variable_length_stream_on_xla_cpu_compiles_once_per_bucket():
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "xla_stream.py")
    completed = subprocess.run(
        [XLA_PYTHON, script, "100", "17", "512", "6"], env={**os.environ, "PJRT_DEVICE": "CPU"},
        capture_output=True, text=True, timeout=1500,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    line = next(line for line in completed.stdout.splitlines() if line.startswith("RESULT "))
    result = json.loads(line[len("RESULT "):])
    report = result["bucketed_report"]
    assert report["compiler"] == "openxla"
    # 17..512 pads to 32, 64, 128, 256, 512; one more when the first two calls share a shape.
    assert report["compilations"] <= 5 + int(result["first_two_equal"])
    assert report["bucket_hits"] >= 90
    assert result["bucketed_max_error"] <= 1e-4
    assert result["plain_compilations"] == result["plain_lengths"] == 6
    assert result["plain_max_error"] <= 1e-4
