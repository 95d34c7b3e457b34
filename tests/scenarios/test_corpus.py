"""Acceptance corpus: CUDA-written programs retargeted to CPU must reproduce their hand-ported twins.

For every program in corpus/cuda/ there is a twin with the same name in corpus/ported/: the program a
careful engineer would write for CPU (same seeds, same ops in the same order, 'cpu', CPU autocast, CPU
GradScaler, gloo). Each program prints one line `RESULT {json}` last; the tests compare those lines
between

- twin:  the twin run with plain python (no torchport anywhere);
- run:   `python -m torchport run --device cpu --precision keep PROGRAM` (or `... -m MODULE`);
- use:   a copy of corpus/cuda/ in which the entry file starts with
         `import torchport; torchport.use("cpu", precision="keep")`, run with plain python.

Programs marked `launcher=torchrun` run under `python -m torch.distributed.run --standalone
--nproc_per_node=2` in every form (the run form as `torchrun ... -m torchport run ...`).

The comparison is exact: the JSON of the RESULT lines must be equal (floats are printed with their full
repr). Every run uses OMP_NUM_THREADS=1 so that twin and retargeted program split their reductions the
same way; with the same ops in the same order CPU results are then bitwise reproducible.

So that a pass cannot be vacuous, the corpus also checks that each CUDA program really uses CUDA (and
its twin does not), and that the CUDA programs marked `plain=fails` do fail on this machine without
torchport, while those marked `plain=runs` (idioms I2-I4, which already have a CPU path) run and agree
with their twin as written.

All the subprocesses the selected tests need are started up front by a session fixture and run in a
small thread pool (TORCHPORT_CORPUS_JOBS, default 3); each test waits only for its own runs.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from gloo_teardown import TEARDOWN_ABORT, relaunched

CORPUS = Path(__file__).resolve().parent / "corpus"
CUDA_DIR = CORPUS / "cuda"
PORTED_DIR = CORPUS / "ported"
PYTHON = sys.executable
USE_LINE = 'import torchport; torchport.use("cpu", precision="keep")\n'
TORCHPORT_RUN = ["-m", "torchport", "run", "--device", "cpu", "--precision", "keep"]
TORCHRUN = [PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
TIMEOUT_S = 300
FORMS = ("run", "use")

# Runs that fail because of known defects of the retargeting runtime (form, program) -> reason.
# Strict: once the runtime is fixed, the xpass turns red and the entry must go.
KNOWN_RUNTIME_FAILURES: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Program:
    name: str  # test id: the file stem, or the package directory name
    entry: str  # path of the entry file relative to the corpus side (cuda/ or ported/)
    module: str | None  # for `python -m MODULE` programs
    launcher: str  # "python" or "torchrun"
    plain: str  # "fails" or "runs": what the CUDA program does here without torchport
    helpers: tuple[str, ...] = ()  # sibling modules the program imports (its CUDA code may live there)


def _header(path: Path) -> dict[str, str]:
    for line in path.read_text().splitlines()[:10]:
        match = re.match(r"#\s*corpus:\s*(.*)$", line)
        if match:
            return dict(item.split("=", 1) for item in match.group(1).split())
    raise AssertionError(f"{path} has no '# corpus: ...' header line")


def discover() -> list[Program]:
    programs = []
    for path in sorted(CUDA_DIR.glob("[0-9][0-9]_*.py")):
        meta = _header(path)
        programs.append(Program(path.stem, path.name, None, meta.get("launcher", "python"),
                                meta.get("plain", "fails"), tuple(filter(None, meta.get("helpers", "").split(",")))))
    for init in sorted(CUDA_DIR.glob("pkg_*/__init__.py")):
        meta = _header(init)
        module = meta["module"]
        package_dir = init.parent
        rest = module.split(".")[1:]
        entry_file = package_dir.joinpath(*rest).with_suffix(".py") if rest else package_dir / "__main__.py"
        programs.append(Program(package_dir.name, str(entry_file.relative_to(CUDA_DIR)), module,
                                meta.get("launcher", "python"), meta.get("plain", "fails")))
    return programs


PROGRAMS = discover()
BY_NAME = {program.name: program for program in PROGRAMS}


# ----------------------------------------------------------------------------------------------
# running


@dataclass
class Outcome:
    command: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def result(self):
        for line in reversed(self.stdout.splitlines()):
            if line.startswith("RESULT "):
                return json.loads(line[len("RESULT "):])
        return None

    def describe(self) -> str:
        return (f"$ {' '.join(self.command)}\nexit code {self.returncode} after {self.seconds:.1f}s\n"
                f"--- stdout (tail) ---\n{self.stdout[-2000:]}\n--- stderr (tail) ---\n{self.stderr[-4000:]}")


def _env() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("TORCHPORT_")}
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("PYTHONSTARTUP", None)
    return env


def _command(program: Program, form: str, use_dir: Path) -> tuple[list[str], Path | None]:
    """The command line for one form of one program, and its working directory (None: a fresh one)."""
    side = {"twin": PORTED_DIR, "plain": CUDA_DIR, "run": CUDA_DIR, "use": use_dir}[form]
    launcher = TORCHRUN if program.launcher == "torchrun" else [PYTHON]
    if form == "run":
        if program.launcher == "torchrun":
            prefix = TORCHRUN + TORCHPORT_RUN
        else:
            prefix = [PYTHON] + TORCHPORT_RUN
    else:
        prefix = list(launcher)
    if program.module:
        # `python -m pkg.mod` resolves against the working directory, as users run it
        return prefix + ["-m", program.module], side
    # scripts run from an unrelated directory: their own directory must be importable by itself
    return prefix + [str(side / program.entry)], None


def _execute(command: list[str], cwd: Path | None, scratch: Path, gloo: bool = False) -> Outcome:
    """One launch; a launch of a multi-process gloo program (`gloo`: torchrun, or mp.spawn ranks)
    that ends in gloo's teardown abort, or in its teardown deadlock (a timeout), is relaunched
    (gloo_teardown)."""
    torchrun = command[: len(TORCHRUN)] == TORCHRUN
    if cwd is None:
        scratch.mkdir(parents=True, exist_ok=True)

    def ended_in_teardown(outcome: Outcome) -> bool:
        return (torchrun or gloo) and outcome.returncode != 0 and (
            TEARDOWN_ABORT in outcome.stderr or outcome.returncode == TIMED_OUT)

    return relaunched(lambda: _execute_once(command, cwd, scratch), ended_in_teardown,
                      folder=scratch if cwd is None else None)  # only a launch's own folder is reset


#: The return code an Outcome holds for a launch that ran past TIMEOUT_S.
TIMED_OUT = -999


def _execute_once(command: list[str], cwd: Path | None, scratch: Path) -> Outcome:
    if cwd is None:
        scratch.mkdir(parents=True, exist_ok=True)
        cwd = scratch
    start = time.monotonic()
    try:
        proc = subprocess.run(command, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=TIMEOUT_S)
        code, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        code = TIMED_OUT
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = (exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or ""))
        err += f"\n[timed out after {TIMEOUT_S}s]"
    return Outcome(command, code, out, err, time.monotonic() - start)


def _make_use_copy(root: Path) -> Path:
    """A copy of corpus/cuda/ whose entry files start with the one-line use() form."""
    copy = root / "cuda"
    shutil.copytree(CUDA_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    for program in PROGRAMS:
        entry = copy / program.entry
        entry.write_text(USE_LINE + entry.read_text())
    return copy


class Runner:
    def __init__(self, root: Path, jobs: int):
        self.root = root
        self.use_dir = _make_use_copy(root)
        self.pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="corpus")
        self.futures: dict[tuple[str, str], Future] = {}
        self.started = time.monotonic()

    def submit(self, name: str, form: str) -> Future:
        key = (name, form)
        if key not in self.futures:
            command, cwd = _command(BY_NAME[name], form, self.use_dir)
            scratch = self.root / "cwd" / f"{name}-{form}"
            program = BY_NAME[name]
            # (a plain run of a CUDA program is expected to fail: however it ends, it is not relaunched)
            gloo = form != "plain" and "init_process_group" in (
                (PORTED_DIR if form == "twin" else CUDA_DIR) / program.entry).read_text()
            self.futures[key] = self.pool.submit(_execute, command, cwd, scratch, gloo)
        return self.futures[key]

    def get(self, name: str, form: str) -> Outcome:
        return self.submit(name, form).result()

    def close(self):
        self.pool.shutdown(wait=True, cancel_futures=True)


@pytest.fixture(scope="session")
def corpus(request, tmp_path_factory):
    runner = Runner(tmp_path_factory.mktemp("corpus"), int(os.environ.get("TORCHPORT_CORPUS_JOBS", "3")))
    # start every run the selected tests need, in test order, so they overlap
    for item in request.session.items:
        callspec = getattr(item, "callspec", None)
        if callspec is None or Path(str(getattr(item, "path", ""))).resolve() != Path(__file__).resolve():
            continue
        name = callspec.params.get("program")
        if name not in BY_NAME:
            continue
        forms = {"test_matches_twin": ["twin", callspec.params.get("form")],
                 "test_twin_runs_without_torchport": ["twin"],
                 "test_plain_python_needs_torchport": ["plain", "twin"]}.get(item.originalname, [])
        for form in forms:
            runner.submit(name, form)
    yield runner
    runner.close()


def _require_result(outcome: Outcome, what: str):
    if outcome.returncode != 0 or outcome.result is None:
        pytest.fail(f"{what} did not finish with a RESULT line:\n{outcome.describe()}", pytrace=False)
    return outcome.result


def _diff(expected: dict, actual: dict) -> str:
    lines = []
    for key in sorted(set(expected) | set(actual)):
        if expected.get(key, "<missing>") != actual.get(key, "<missing>"):
            lines.append(f"  {key}:\n    twin:        {expected.get(key, '<missing>')!r}\n"
                         f"    retargeted:  {actual.get(key, '<missing>')!r}")
    return "\n".join(lines)


def _params_with_known_failures():
    params = []
    for form in FORMS:
        for program in PROGRAMS:
            reason = KNOWN_RUNTIME_FAILURES.get((form, program.name))
            marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
            params.append(pytest.param(form, program.name, marks=marks, id=f"{form}-{program.name}"))
    return params


# ----------------------------------------------------------------------------------------------
# the comparison


@pytest.mark.slow
@pytest.mark.parametrize(("form", "program"), _params_with_known_failures())
def test_matches_twin(corpus, form, program):
    """The CUDA program, retargeted to CPU, prints exactly what its hand-ported twin prints."""
    expected = _require_result(corpus.get(program, "twin"), f"twin {program}")
    actual = _require_result(corpus.get(program, form), f"{form} form of {program}")
    assert actual == expected, f"{form} form of {program} differs from its twin:\n{_diff(expected, actual)}"


@pytest.mark.slow
@pytest.mark.parametrize("program", [p.name for p in PROGRAMS])
def test_twin_runs_without_torchport(corpus, program):
    """Every twin is a working CPU program on its own: plain python, no torchport."""
    _require_result(corpus.get(program, "twin"), f"twin {program}")


@pytest.mark.slow
@pytest.mark.parametrize("program", [p.name for p in PROGRAMS])
def test_plain_python_needs_torchport(corpus, program):
    """Without torchport, a CUDA-only program fails on this CPU machine (so the comparison means something);
    one with its own CPU path (I2-I4) runs and already agrees with its twin."""
    meta = BY_NAME[program]
    outcome = corpus.get(program, "plain")
    if meta.plain == "fails":
        assert outcome.returncode != 0 and outcome.result is None, (
            f"{program} is marked plain=fails but ran on CPU without torchport:\n{outcome.describe()}")
    else:
        expected = _require_result(corpus.get(program, "twin"), f"twin {program}")
        actual = _require_result(outcome, f"{program} under plain python")
        assert actual == expected, _diff(expected, actual)


# ----------------------------------------------------------------------------------------------
# the corpus itself


def _code_strings_and_attributes(source: str) -> list[str]:
    """String constants (docstrings excluded) and attribute / name identifiers of a module's code."""
    tree = ast.parse(source)
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = getattr(node, "body", [])
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docstrings.add(id(body[0].value))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            found.append(node.value)
        elif isinstance(node, ast.Attribute):
            found.append(node.attr)
        elif isinstance(node, ast.Name):
            found.append(node.id)
    return found


def _side_files(root: Path, program: Program) -> list[Path]:
    if program.module:
        return sorted((root / program.entry).parent.glob("*.py"))
    return [root / program.entry] + [root / helper for helper in program.helpers]


def test_corpus_shape():
    names = [p.name for p in PROGRAMS]
    assert len(PROGRAMS) >= 40, f"only {len(PROGRAMS)} programs in the corpus"
    assert len(set(names)) == len(names)
    assert sum(p.launcher == "torchrun" for p in PROGRAMS) >= 3, "need at least 3 DDP programs under torchrun"
    assert any(p.module for p in PROGRAMS), "need a `python -m package.module` program"
    assert sum(p.plain == "fails" for p in PROGRAMS) >= 30
    cuda_files = {p.relative_to(CUDA_DIR) for p in CUDA_DIR.rglob("*.py") if "__pycache__" not in p.parts}
    ported_files = {p.relative_to(PORTED_DIR) for p in PORTED_DIR.rglob("*.py") if "__pycache__" not in p.parts}
    assert cuda_files == ported_files, f"files without a twin: {sorted(map(str, cuda_files ^ ported_files))}"


@pytest.mark.parametrize("program", [p.name for p in PROGRAMS])
def test_cuda_program_uses_cuda_and_twin_does_not(program):
    meta = BY_NAME[program]
    cuda_uses = [s for f in _side_files(CUDA_DIR, meta) for s in _code_strings_and_attributes(f.read_text())
                 if "cuda" in s.lower() or s == "nccl"]
    assert cuda_uses, f"{program} never mentions CUDA in its code: the comparison would be vacuous"
    for twin_file in _side_files(PORTED_DIR, meta):
        source = twin_file.read_text()
        assert "torchport" not in source
        leaked = [s for s in _code_strings_and_attributes(source) if "cuda" in s.lower() or s == "nccl"]
        assert not leaked, f"twin {twin_file.name} still uses CUDA: {leaked}"
    cuda_source = (CUDA_DIR / meta.entry).read_text()
    assert cuda_source != (PORTED_DIR / meta.entry).read_text()
    assert "RESULT " in cuda_source and "torchport" not in cuda_source
