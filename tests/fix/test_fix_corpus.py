"""The acceptance corpus, fixed: every CUDA-written program, after `torchport fix --unsafe-fixes`,
runs with plain python (no torchport anywhere) on this CPU-only machine.

The programs are the corpus of tests/scenarios/corpus/cuda (training with AMP and GradScaler, DDP
under torchrun, checkpoints, argparse and config defaults, benchmarks with synchronize and events,
inference), plus those in tests/fix/programs/cuda: idioms the corpus lacks, mined from public code
(event timers, stream copies, DDP set-up helpers, imported amp names, device logging). Each prints
`RESULT {json}` last (losses that must fall, checkpoints reloaded, checksums). Its success signal is
its twin: for the corpus the hand-ported CPU program in tests/scenarios/corpus/ported, which is what
`torchport run --device cpu --precision keep` reproduces exactly (tests/scenarios/test_corpus.py);
for tests/fix/programs/cuda, the RESULT `torchport run --device cpu --precision keep` prints for the
original, in the same run (numbers depend on the CPU's kernels, so no twin result is stored). Where
the fixed program takes that same code path, its RESULT must equal the twin's. Programs that cannot
become runnable, or take another path, are listed below with the reason; both lists are strict.

Each fixed program is also fixed again (no change: idempotent) and scanned: no finding that fix
could have removed is left.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from gloo_teardown import TEARDOWN_ABORT, relaunched

from torchport.backends.cpu import has_native_bf16
from torchport.cli.main import main

HERE = Path(__file__).resolve().parent
CORPUS = HERE.parent / "scenarios" / "corpus"
OWN = HERE / "programs" / "cuda"
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
#: The one DDP program run under torchrun here (slow); the others are fixed and scanned only.
TORCHRUN_PROGRAM = "05_ddp_basic"

#: Programs that do not run after fix, and why a person must finish them.
DOES_NOT_RUN: dict[str, str] = {}
#: Programs that run after fix but take another path than their twin, and why.
OTHER_PATH = {
    "02_amp_torch_amp": "the fixed program runs with plain python, where autocast on the CPU has the CPU's op "
    "lists (layer_norm in float16); torchport run, and the twin, compute it in float32 as CUDA's autocast does",
    "32_nanogpt_dtype": "asks torch.cuda.is_bf16_supported(), which torchport run answers as CUDA (yes) and "
    "this machine answers no: the fixed program trains in float16 where the twin uses bfloat16",
    "35_fused_adamw": "fused AdamW only when an accelerator is available: the fixed program takes the unfused "
    "path here, the twin the fused one",
    "47_custom_fwd": "torch.cuda.amp.custom_fwd/custom_bwd decorators are left for a person: they cast only "
    "under CUDA autocast, so the fixed function runs uncast here",
    "51_early_stopping": "the fixed program runs with plain python on the CPU, where `.cpu()` of a host tensor is "
    "the tensor itself: its best-state snapshot follows training and its numpy thresholding edits the outputs, as in "
    "any CPU run (torchport run copies there, as a GPU does; fix does not turn `.cpu()` into a copy)",
    "nanogpt_style": "bf16 support is asked of the machine (no accelerator: float16 with a disabled autocast "
    "context, i.e. float32, nanoGPT's own CPU path), where torchport run answers as CUDA and autocasts (bfloat16 "
    "where the CPU has native bf16, else float16)",
}
if has_native_bf16():
    # The twin asks the CPU for native bf16 (the flags of the cpu profile), the fixed program the
    # accelerator's capability.
    OTHER_PATH["49_capability_bf16"] = ("the twin chooses bfloat16 because this CPU has native bf16; the fixed "
                                        "program asks for an accelerator's compute capability (there is none "
                                        "here) and chooses float16")
#: Programs started with mp.spawn: their children re-import the main file, so each runs on its own.
SPAWNING = {"48_mp_spawn_ddp"}


def _header(path: Path) -> dict[str, str]:
    for line in path.read_text().splitlines()[:10]:
        if line.startswith("# corpus:"):
            return dict(item.split("=", 1) for item in line[len("# corpus:"):].split())
    return {}


def _programs() -> list[tuple[str, Path, dict[str, str]]]:
    found = [(path.stem, path, _header(path)) for path in sorted((CORPUS / "cuda").glob("[0-9][0-9]_*.py"))]
    found += [(path.stem, path, {}) for path in sorted(OWN.glob("*.py"))]
    return found


PROGRAMS = _programs()


def _environment(hide_gpus: bool = True) -> dict[str, str]:
    """Plain runs see no GPU (as CI machines without one); retargeted runs see the target, which
    CUDA_VISIBLE_DEVICES="" would hide from them as it hides a GPU."""
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith("TORCHPORT_") and key != "CUDA_VISIBLE_DEVICES"}
    environment.update(OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
    if hide_gpus:
        environment["CUDA_VISIBLE_DEVICES"] = ""
    return environment


# Many programs per interpreter (importing torch once is most of a tiny program's time): each runs
# from its own folder, with the state programs change (default dtype and device, determinism,
# grad mode, seeds) reset before it, its environment variables restored and its own modules
# forgotten after it.
_BATCH_RUNNER = r"""
import contextlib, io, json, os, runpy, sys, traceback, warnings
import torch
warnings.simplefilter("ignore")
outcomes = {}
baseline = set(sys.modules)
for path in sys.argv[1:]:
    torch.set_default_dtype(torch.float32)
    torch.set_default_device(None)
    torch.use_deterministic_algorithms(False)
    torch.set_grad_enabled(True)
    torch.manual_seed(0)
    folder = os.path.dirname(path)
    os.chdir(folder)
    sys.path.insert(0, folder)
    sys.argv = [path]
    environment = dict(os.environ)
    buffer = io.StringIO()
    error = ""
    try:
        with contextlib.redirect_stdout(buffer):
            runpy.run_path(path, run_name="__main__")
    except SystemExit as exit:
        error = "" if exit.code in (0, None) else f"exit {exit.code}"
    except BaseException:
        error = traceback.format_exc()[-1500:]
    sys.path.remove(folder)
    os.environ.clear()
    os.environ.update(environment)
    for name in set(sys.modules) - baseline:
        module = sys.modules.get(name)
        if getattr(module, "__file__", None) and os.path.dirname(module.__file__).startswith(folder):
            del sys.modules[name]
    results = [line[len("RESULT "):] for line in buffer.getvalue().splitlines() if line.startswith("RESULT ")]
    outcomes[path] = [json.loads(results[-1]) if results else None, error or ("no RESULT" if not results else "")]
print("OUTCOMES " + json.dumps(outcomes))
"""


def _results(paths: list[Path]) -> dict[str, tuple[object, str]]:
    """RESULT of each program (None and the error when it has none), two interpreters at a time."""
    halves = [paths[0::2], paths[1::2]]

    def batch(chunk: list[Path]) -> dict:
        completed = subprocess.run([sys.executable, "-c", _BATCH_RUNNER, *map(str, chunk)], env=_environment(),
                                   capture_output=True, text=True, timeout=900)
        for line in reversed(completed.stdout.splitlines()):
            if line.startswith("OUTCOMES "):
                return json.loads(line[len("OUTCOMES "):])
        raise AssertionError(f"the batch runner died: {completed.stderr[-3000:]}")

    with ThreadPoolExecutor(max_workers=2) as pool:
        merged: dict = {}
        for part in pool.map(batch, [half for half in halves if half]):
            merged.update(part)
    return {path: (result, error) for path, (result, error) in merged.items()}


def _result(command: list[str], cwd: Path, relaunch_in: Path | None = None) -> tuple[object, str]:
    """The program's last RESULT, or None and its error; relaunched after gloo's teardown abort, with
    `relaunch_in` put back as it was first (give it only where nothing else runs)."""
    def launch() -> tuple[object, str]:
        completed = subprocess.run(command, cwd=cwd, env=_environment(hide_gpus="torchport" not in command),
                                   capture_output=True, text=True, timeout=300)
        for line in reversed(completed.stdout.splitlines()):
            if line.startswith("RESULT "):
                return json.loads(line[len("RESULT "):]), ""
        return None, f"exit {completed.returncode}: {completed.stderr[-1500:]}"

    return relaunched(launch, lambda outcome: outcome[0] is None and TEARDOWN_ABORT in outcome[1],
                      folder=relaunch_in)


@pytest.fixture(scope="module")
def fixed_corpus(tmp_path_factory):
    """A copy of both program folders, fixed with --unsafe-fixes in one `torchport fix` call."""
    root = tmp_path_factory.mktemp("fixed")
    shutil.copytree(CORPUS / "cuda", root / "cuda", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(OWN, root / "own", ignore=shutil.ignore_patterns("__pycache__"))
    assert main(["fix", "--unsafe-fixes", "--exit-zero", str(root)]) == 0
    # unfixed copies, run under torchport run as the twins of the mined programs
    shutil.copytree(OWN, root / "originals", ignore=shutil.ignore_patterns("__pycache__"))
    return root


def _fixed_path(root: Path, name: str, original: Path) -> Path:
    return root / ("own" if original.parent == OWN else "cuda") / original.name


@pytest.mark.slow
def test_fixed_programs_run_with_plain_python_and_match_their_twins(fixed_corpus):
    selected = [(name, path) for name, path, meta in PROGRAMS if meta.get("launcher") != "torchrun"]
    assert len(selected) >= 30
    fixed = {name: _fixed_path(fixed_corpus, name, original) for name, original in selected}
    for path in fixed.values():
        assert "torchport" not in path.read_text(), f"{path.name} must run without torchport"
    twins = {name: CORPUS / "ported" / original.name for name, original in selected if original.parent != OWN}
    batched = [path for name, path in [*fixed.items(), *twins.items()] if name not in SPAWNING]
    outcomes = _results(batched)
    own = [(name, fixed_corpus / "originals" / original.name) for name, original in selected if original.parent == OWN]
    with ThreadPoolExecutor(max_workers=2) as pool:
        retargeted = dict(zip([name for name, _ in own], pool.map(
            lambda item: _result([sys.executable, "-m", "torchport", "run", "--device", "cpu", "--precision", "keep",
                                  str(item[1])], item[1].parent), own)))
    for name in SPAWNING:
        outcomes[str(fixed[name])] = _result([sys.executable, str(fixed[name])], fixed[name].parent,
                                             relaunch_in=fixed[name].parent)
        if name in twins:
            outcomes[str(twins[name])] = _result([sys.executable, str(twins[name])], twins[name].parent)
    problems = []
    for name, original in selected:
        result, error = outcomes[str(fixed[name])]
        if name in DOES_NOT_RUN:
            if result is not None:
                problems.append(f"{name} now runs after fix: drop it from DOES_NOT_RUN")
            continue
        if result is None:
            problems.append(f"{name} fails after fix: {error}")
            continue
        if name in twins:
            twin, twin_error = outcomes[str(twins[name])]
            assert twin is not None, f"the twin of {name} failed: {twin_error}"
        else:
            twin, twin_error = retargeted[name]
            assert twin is not None, f"{name} under torchport run failed: {twin_error}"
        same = result == twin
        if name in OTHER_PATH and same:
            problems.append(f"{name} now matches its twin ({result}): drop it from OTHER_PATH")
        elif name not in OTHER_PATH and not same:
            problems.append(f"{name}: RESULT differs from its twin: {result} != {twin}")
    assert not problems, "\n".join(problems)


@pytest.mark.slow
def test_fixed_ddp_program_runs_under_torchrun(fixed_corpus):
    original = CORPUS / "cuda" / f"{TORCHRUN_PROGRAM}.py"
    fixed = fixed_corpus / "cuda" / original.name
    result, error = _result([*TORCHRUN, str(fixed)], fixed.parent, relaunch_in=fixed.parent)
    assert result is not None, error
    twin, twin_error = _result([*TORCHRUN, str(CORPUS / "ported" / original.name)], CORPUS / "ported")
    assert twin is not None, twin_error
    assert result == twin


@pytest.mark.slow
def test_fix_leaves_nothing_it_could_remove_and_is_idempotent(fixed_corpus, capsys):
    from torchport.fix.engine import fix_source
    from torchport.rules.registry import all_rules

    codes = tuple(rule.code for rule in all_rules())
    assert len(PROGRAMS) >= 60
    for name, original, _ in PROGRAMS:
        fixed = _fixed_path(fixed_corpus, name, original)
        text = fixed.read_text()
        again = fix_source(text, str(fixed), codes, unsafe=True)
        assert again.fixed == text, f"fixing {name} twice changes it again"
        fixable = [f"{item.code}:{item.line}" for item in again.remaining if item.fix is not None]
        assert not fixable, f"{name}: findings fix could remove are left: {fixable}"
