"""The pytest plugin runs a project's own tests with its CUDA code on the emulated target."""

import os
import subprocess
import sys

SUITE = """
import torch

def test_written_for_cuda():
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tensor = torch.ones(3, device=device)
    assert tensor.device.type == "cuda" and tensor.device.__str__() == "emulated:0"  # the view, the truth
    assert torch.get_device_module(tensor.device).memory_allocated() >= 12
"""


def test_suite_runs_on_the_emulated_target_only_when_asked(tmp_path):
    (tmp_path / "test_project.py").write_text(SUITE)
    command = [sys.executable, "-m", "pytest", "-q", str(tmp_path)]  # loaded by its pytest11 entry point
    retargeted = subprocess.run([*command, "--torchport-device", "neuron-emulated"], capture_output=True,
                                text=True, timeout=120, cwd=tmp_path)
    assert retargeted.returncode == 0, retargeted.stdout + retargeted.stderr
    plain = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert plain.returncode == 1 and "emulated" in plain.stdout  # the CPU run fails the device assertion


PYTHON_STAYS_PYTHON = """
import builtins
from unittest import mock

import pytest
import torch


def test_assertion_is_explained():
    total = torch.ones(2, device="cuda").sum().item()
    assert total == 3


def test_mock_patch_of_a_builtin(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCHPORT_PLUGIN_PROBE", "1")
    with mock.patch("builtins.print") as fake:
        print("hidden")
    assert fake.called and tmp_path.is_dir()


@pytest.mark.parametrize("size", [1, 2])
def test_marker_and_cuda_path(size):
    assert torch.cuda.is_available() and torch.zeros(size, device="cuda").is_cuda


def test_cuda_graph():
    torch.cuda.CUDAGraph()


def test_kernel_with_a_fallback():
    try:
        import triton  # noqa: F401
    except ImportError:
        pass


def test_conftest_fixture_is_retargeted(batch):
    assert batch.is_cuda and batch.device.type == "cpu"
"""

CONFTEST = """
import pytest
import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture
def batch():
    return torch.ones(2, device=DEVICE)
"""


def test_python_stays_python_and_unsupported_features_are_skipped_or_failed(tmp_path):
    (tmp_path / "test_app.py").write_text(PYTHON_STAYS_PYTHON)
    (tmp_path / "conftest.py").write_text(CONFTEST)
    command = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", str(tmp_path),
               "--torchport-device", "cpu"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    output = done.stdout
    assert "1 failed, 4 passed, 2 skipped" in output, output
    assert "assert 2.0 == 3" in output  # pytest's assertion rewriting kept
    assert "torch.cuda.CUDAGraph at" in output and "test_app.py:27" in output and "then failed" in output
    assert "import triton at" in output and "passed through a fallback" in output
    failing = subprocess.run([*command, "--torchport-unsupported=fail"], capture_output=True, text=True,
                             timeout=300, cwd=tmp_path)
    assert "3 failed, 4 passed" in failing.stdout, failing.stdout


AMP_SUITE = """
import torch


def test_autocast_dtype():
    with torch.autocast("cuda", dtype=torch.float16):
        y = torch.nn.Linear(4, 4).cuda()(torch.ones(2, 4).cuda())
    assert y.dtype == torch.float16
"""


def test_the_run_summary_is_in_pytests_output_and_names_the_precision_policys_decisions(tmp_path):
    # a test checking CUDA's fp16 autocast fails under the default `auto` policy (bf16 on a CPU that
    # computes it natively, fp32 on one that does not): pytest's output says why, as `torchport run`
    # does, and `keep` runs fp16 as asked
    from torchport.backends.cpu import has_native_bf16

    runs = "autocast bfloat16" if has_native_bf16() else "autocast off (fp32)"
    (tmp_path / "test_amp.py").write_text(AMP_SUITE)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path), "--torchport-device", "cpu"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert "1 failed" in done.stdout, done.stdout
    assert "torchport: cuda -> cpu:" in done.stdout
    assert f"precision (auto): cuda autocast float16: {runs} on cpu" in done.stdout
    assert "torchport: cuda -> cpu:" not in done.stderr  # once, in pytest's output
    kept = subprocess.run([*command, "--torchport-precision", "keep"], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert "1 passed" in kept.stdout, kept.stdout


KERNEL_CHOSEN_AT_IMPORT = """
try:
    import triton
    HAS_TRITON = True
except ImportError:
    HAS_TRITON = False


def fused(x):  # the library's fallback when Triton is missing
    return x * 2
"""


def test_a_cuda_only_path_chosen_at_import_is_named_though_no_test_reached_it(tmp_path):
    # the library picks its Triton kernel or its fallback once, while test files are imported: no
    # single test reaches `import triton`, yet every test of `fused` ran the fallback
    (tmp_path / "kernels.py").write_text(KERNEL_CHOSEN_AT_IMPORT)
    (tmp_path / "test_kernels.py").write_text(
        "import torch\nfrom kernels import fused\n\n\ndef test_fused():\n"
        "    assert torch.equal(fused(torch.ones(2).cuda()), torch.full((2,), 2.0).cuda())\n")
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path), "--torchport-device", "cpu"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout
    assert "unsupported on cpu outside any test (while importing): import triton at" in done.stdout
    assert "kernels.py:3" in done.stdout
    failing = subprocess.run([*command, "--torchport-unsupported=fail"], capture_output=True, text=True, timeout=300,
                             cwd=tmp_path)
    assert failing.returncode == 1 and "the run fails" in failing.stdout, failing.stdout
    quiet = subprocess.run([*command, "--torchport-unsupported=fail"], capture_output=True, text=True, timeout=300,
                           cwd=tmp_path, env={**os.environ, "TORCHPORT_QUIET": "1"})
    assert quiet.returncode == 1 and "the run fails" in quiet.stdout and "CUDA usage(s)" not in quiet.stdout


def test_sites_reached_in_an_xfail_test_or_a_fixtures_teardown_are_that_tests(tmp_path):
    (tmp_path / "test_inside.py").write_text(
        "import pytest\n\n\n@pytest.fixture\ndef kernels():\n    yield\n    try:\n        import flash_attn\n"
        "    except ImportError:\n        pass\n\n\n@pytest.mark.xfail(reason='no kernel here')\ndef test_xfail():\n"
        "    import triton\n\n\ndef test_teardown(kernels):\n    pass\n")
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path), "--torchport-device", "cpu",
               "--torchport-unsupported=fail"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert "outside any test" not in done.stdout, done.stdout
    assert "1 passed, 1 xfailed" in done.stdout and done.returncode == 0, done.stdout


def test_an_installed_librarys_cuda_only_import_at_import_time_is_named(tmp_path):
    # the library (installed: its dist-info, a requirement on torch) is not rewritten; its failed
    # `import triton` is still noted at its own line
    site = tmp_path / "site"
    (site / "kernlib-0.1.dist-info").mkdir(parents=True)
    (site / "kernlib-0.1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: kernlib\nVersion: 0.1\n"
                                                              "Requires-Dist: torch\n")
    (site / "kernlib").mkdir()
    (site / "kernlib" / "__init__.py").write_text(KERNEL_CHOSEN_AT_IMPORT)
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text("")
    (project / "test_kernlib.py").write_text(
        "import torch\nfrom kernlib import fused\n\n\ndef test_fused():\n"
        "    assert torch.equal(fused(torch.ones(2).cuda()), torch.full((2,), 2.0).cuda())\n")
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(project), "--torchport-device", "cpu"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=project,
                          env={**os.environ, "PYTHONPATH": str(site)})
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout + done.stderr
    assert f"outside any test (while importing): import triton at {site / 'kernlib' / '__init__.py'}:3" in done.stdout


FIRST_STEP_AND_COMPILE = """
import torch


def test_first_optimizer_step():  # the run's first step imports Dynamo, which probes for Triton
    model = torch.nn.Linear(4, 1).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(2, 4, device="cuda")).sum().backward()
    optimizer.step()
    assert model.weight.is_cuda


def test_first_compile():  # and compiling imports Inductor, which probes again
    compiled = torch.compile(lambda x: torch.sin(x) * 2)
    x = torch.randn(8, device="cuda")
    assert torch.allclose(compiled(x), torch.sin(x) * 2)
"""


def test_torchs_own_probes_for_triton_are_not_a_test_reaching_a_cuda_only_feature(tmp_path):
    # a GPU machine runs both tests; torch asking whether Triton is installed is not the test choosing
    # a Triton kernel: both run and pass, also under --torchport-unsupported=fail
    (tmp_path / "test_steps.py").write_text(FIRST_STEP_AND_COMPILE)
    command = [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", str(tmp_path),
               "--torchport-device", "cpu", "--torchport-unsupported=fail"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0 and "2 passed" in done.stdout, done.stdout + done.stderr
    assert "import triton" not in done.stdout, done.stdout
