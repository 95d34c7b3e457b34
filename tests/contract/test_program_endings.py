"""The contract for programs: `check` judges and reports however the program ends (return,
sys.exit(0), sys.exit(3), an exception, SIGTERM, Ctrl-C, --timeout); under `run` the program's
own exit status always wins, and its traceback holds no torchport frame.

All `check` rows run in one child process (one torch import), each through `main()`.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap

import pytest
from contract_helpers import cli, environment

#: A data-dependent op (blocked on neuron) before each ending.
BLOCKED = "import sys\nimport torch\nx = torch.randn(8, device='cuda')\nprint(torch.nonzero(x > 0).shape)\n"
#: No op that neuron refuses.
PLAIN = "import sys\nimport torch\nx = torch.ones(8, device='cuda') * 2\nprint(float(x.sum()))\n"

ENDINGS = {
    "blocked-returns": (BLOCKED, 1, "returned", "unsupported ops"),
    "blocked-exit-0": (BLOCKED + "sys.exit(0)\n", 1, "exit", "unsupported ops"),
    "blocked-exit-main": (BLOCKED + "def main():\n    return 0\nsys.exit(main())\n", 1, "exit", "unsupported ops"),
    "plain-exit-3": (PLAIN + "sys.exit(3)\n", 1, "exit", "exited with code 3"),
    "plain-exit-message": (PLAIN + "sys.exit('bad config')\n", 1, "exit", "exited with code 1"),
    "plain-exception": (PLAIN + "raise ValueError('boom')\n", 1, "exception", "failed on the emulated target"),
    "plain-sigterm": (PLAIN + "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\nimport time\ntime.sleep(5)\n",
                      1, "signal", "SIGTERM"),
    "plain-interrupt": (PLAIN + "import os, signal\nos.kill(os.getpid(), signal.SIGINT)\nimport time\ntime.sleep(5)\n",
                        130, "interrupted", "interrupted"),
    "plain-timeout": (PLAIN + "import time\ntime.sleep(30)\n", 1, "timeout", "did not finish within 1 s"),
}

_DRIVER = textwrap.dedent("""
    import json, sys
    from torchport.cli.main import main
    results = {}
    for name, arguments in json.loads(sys.argv[1]).items():
        saved = sys.modules["__main__"]
        results[name] = main(arguments)
        sys.modules["__main__"] = saved
    print("RESULTS " + json.dumps(results))
""")


@pytest.fixture(scope="module")
def check_results(tmp_path_factory):
    """name -> (exit code, report) for every ending, from one child process."""
    folder = tmp_path_factory.mktemp("endings")
    runs = {}
    for name, (source, *_rest) in ENDINGS.items():
        (folder / f"{name.replace('-', '_')}.py").write_text(source)
        arguments = ["check", "--target", "neuron", "--output-format", "json", "--output", str(folder / f"{name}.json")]
        if name == "plain-timeout":
            arguments += ["--timeout", "1"]
        runs[name] = [*arguments, str(folder / f"{name.replace('-', '_')}.py")]
    result = subprocess.run([sys.executable, "-c", _DRIVER, json.dumps(runs)], capture_output=True, text=True,
                            timeout=600, cwd=folder, env=environment())
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULTS ")]
    assert lines, result.stdout[-2000:] + result.stderr[-4000:]
    codes = json.loads(lines[-1].removeprefix("RESULTS "))
    return {name: (codes[name], json.loads((folder / f"{name}.json").read_text())) for name in ENDINGS}, result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("name", list(ENDINGS))
def test_check_writes_a_report_and_judges_however_the_program_ends(name, check_results):
    results, stderr = check_results
    _source, code, ended, verdict = ENDINGS[name]
    exit_code, report = results[name]
    assert exit_code == code, stderr[-3000:]
    assert report["program"]["ended"] == ended
    assert verdict in report["verdict"]
    assert report["verdict"] != "ready"


@pytest.mark.slow
def test_check_of_sys_exit_0_keeps_the_census_verdict(check_results):
    results, _stderr = check_results
    assert results["blocked-exit-0"][1]["verdict"] == results["blocked-returns"][1]["verdict"]
    counts = {name: [(op["name"], op["count"], op["status"]) for op in results[name][1]["ops"]]
              for name in ("blocked-returns", "blocked-exit-main")}
    assert counts["blocked-exit-main"] == counts["blocked-returns"]


RUN_ENDINGS = {
    "exit-0": ("import sys\nsys.exit(0)\n", 0),
    "exit-3": ("import sys\nsys.exit(3)\n", 3),
    "exception": ("def main():\n    raise ValueError('boom')\nmain()\n", 1),
    "sigterm": ("import os, signal, time\nos.kill(os.getpid(), signal.SIGTERM)\ntime.sleep(5)\n", -signal.SIGTERM),
    "interrupt": ("import os, signal, time\nos.kill(os.getpid(), signal.SIGINT)\ntime.sleep(5)\n", -signal.SIGINT),
    "syntax-error": ("import torch\nx = (\n", 1),
    "refused-cuda-only-import": ("import torch\nimport triton\n", 1),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(RUN_ENDINGS))
def test_run_exits_with_the_programs_own_status_and_traceback(name, tmp_path):
    source, code = RUN_ENDINGS[name]
    (tmp_path / "program.py").write_text(source)
    result = cli("run", "--device", "cpu", "--report", str(tmp_path / "r.json"), "program.py", cwd=tmp_path)
    assert result.returncode == code, result.stderr
    frames = [line for line in result.stderr.splitlines() if line.strip().startswith("File ")]
    assert all("program.py" in frame for frame in frames), result.stderr
    if name not in {"sigterm", "interrupt"}:  # a signal's default action ends the process at once
        assert json.loads((tmp_path / "r.json").read_text())["target"] == "cpu"
    assert "internal error" not in result.stderr


@pytest.mark.parametrize("code, status", [(None, 0), (0, 0), (3, 3), (True, 1), (256, 0), (-1, 255), ("bad", 1)])
def test_exit_status_is_what_the_shell_sees(code, status):
    from torchport.check.ending import exit_status

    assert exit_status(code) == status


@pytest.mark.parametrize("value", [0, -1, float("nan"), float("inf"), True])
def test_timeout_must_be_a_finite_number_of_seconds(value):
    from torchport.check.ending import check_timeout
    from torchport.errors import UsageError

    with pytest.raises(UsageError, match="--timeout"):
        check_timeout(value)


def test_watch_turns_each_ending_into_a_verdict_and_restores_the_handlers():
    import os
    import time

    from torchport.check.ending import watch

    handlers = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM, signal.SIGALRM)}
    with watch() as ending:
        sys.exit(4)
    assert (ending.kind, ending.exit_code) == ("exit", 4) and "code 4" in ending.verdict()
    with watch() as ending:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    assert ending.kind == "signal" and "SIGTERM" in ending.verdict()
    with watch(timeout=0.2) as ending:
        time.sleep(5)
    assert ending.kind == "timeout" and "0.2 s" in ending.verdict()
    with watch() as ending:
        pass
    assert ending.finished and ending.verdict() is None
    assert {number: signal.getsignal(number) for number in handlers} == handlers
