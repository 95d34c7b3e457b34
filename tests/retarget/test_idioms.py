"""Every idiom of the corpus (idioms.py) gives, retargeted to the CPU, what its hand-ported twin gives
on the CPU with the CUDA code path kept: under `torchport run`, under `torchport.use()` and under the
pytest plugin, with `--precision keep`. One process per form runs every idiom."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from idioms import IDIOMS

HARNESS = '''
def _outcome(function):
    try:
        return repr(function())
    except BaseException as error:  # the exception's family: what a user's `except` would catch
        for family in (ImportError, RuntimeError, TypeError, ValueError, AttributeError, AssertionError):
            if isinstance(error, family):
                return "raised " + family.__name__
        return "raised " + type(error).__name__
'''


def _functions(ported: bool) -> str:
    parts = []
    for name, cuda_source, ported_source in IDIOMS:
        source = ported_source if ported and ported_source is not None else cuda_source
        parts.append(f"def idiom_{name}():\n{textwrap.indent(source, '    ')}\n    return result\n")
    return HARNESS + "\n".join(parts)


def _program(ported: bool) -> str:
    calls = "".join(f"print('{name}=' + _outcome(idiom_{name}))\n" for name, _, _ in IDIOMS)
    return _functions(ported) + "\n" + calls


def _test_file() -> str:
    tests = "".join(
        f"def test_{name}():\n    _record('{name}', _outcome(idiom_{name}))\n" for name, _, _ in IDIOMS
    )
    record = (
        "import os\n"
        "def _record(name, outcome):\n"
        "    with open(os.environ['IDIOM_RESULTS'], 'a') as handle:\n"
        "        handle.write(name + '=' + outcome + '\\n')\n"
    )
    return record + _functions(ported=False) + "\n" + tests


def _parse(text: str) -> dict[str, str]:
    pairs = {}
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if sep and name.strip() in {idiom[0] for idiom in IDIOMS}:
            pairs[name.strip()] = value.strip()
    return pairs


def _run(command, cwd, env=None) -> subprocess.CompletedProcess:
    environment = {**os.environ, "TORCHPORT_QUIET": "1", **(env or {})}
    return subprocess.run(command, capture_output=True, text=True, cwd=cwd, env=environment, timeout=600)


@pytest.fixture(scope="module")
def twin(tmp_path_factory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("twin")
    (folder / "ported.py").write_text(_program(ported=True))
    completed = _run([sys.executable, "ported.py"], folder)
    assert completed.returncode == 0, completed.stderr
    return _parse(completed.stdout)


def test_corpus_is_large_enough_and_names_are_unique():
    names = [idiom[0] for idiom in IDIOMS]
    assert len(names) == len(set(names))
    assert len(names) >= 80


def _assert_same(twin: dict, retargeted: dict, form: str) -> None:
    assert set(retargeted) == set(twin), f"{form}: idioms missing: {sorted(set(twin) - set(retargeted))}"
    differing = {name: (retargeted[name], twin[name]) for name in twin if retargeted[name] != twin[name]}
    assert not differing, f"{form}: retargeted vs hand-ported differ: {differing}"


@pytest.mark.slow
@pytest.mark.parametrize("form", ["run", "use"])
def test_every_idiom_matches_its_hand_port(form, twin, tmp_path):
    source = _program(ported=False)
    if form == "use":
        source = 'import torchport; torchport.use("cpu", precision="keep")\n' + source
        command = [sys.executable, "app.py"]
    else:
        command = [sys.executable, "-m", "torchport", "run", "--device", "cpu", "--precision", "keep", "app.py"]
    (tmp_path / "app.py").write_text(source)
    completed = _run(command, tmp_path)
    assert completed.returncode == 0, completed.stderr
    _assert_same(twin, _parse(completed.stdout), form)


@pytest.mark.slow
def test_every_idiom_matches_its_hand_port_under_the_pytest_plugin(twin, tmp_path):
    (tmp_path / "test_idioms_app.py").write_text(_test_file())
    results = tmp_path / "results.txt"
    completed = _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_idioms_app.py",
                      "--torchport-device", "cpu", "--torchport-precision", "keep"], tmp_path,
                     env={"IDIOM_RESULTS": str(results)})
    assert completed.returncode == 0, completed.stdout[-3000:]
    _assert_same(twin, _parse(results.read_text()), "pytest plugin")
