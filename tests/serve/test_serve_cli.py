"""`torchport serve` from the command line: serves, drains on SIGTERM, and fails without tracebacks."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from http_client import Client
from serve_models import sample
from torchport.cli.main import main

HERE = os.path.dirname(os.path.abspath(__file__))
ENTRY = os.path.join(HERE, "serve_models.py") + ":make_linear"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.slow
def test_serve_answers_then_drains_on_sigterm_and_exits_zero():
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "torchport", "serve", ENTRY, "--primary", "neuron-emulated",
                                "--fallback", "cpu", "--port", str(port), "--shadow", "1.0"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        ready = None
        while time.monotonic() < deadline and process.poll() is None:
            try:
                ready = Client(f"http://127.0.0.1:{port}", timeout_s=5).request("GET", "/readyz")
                break
            except OSError:
                time.sleep(0.2)
        assert ready is not None and ready[0] == 200, process.stderr.read() if process.poll() is not None else ready
        status, headers, body = Client(f"http://127.0.0.1:{port}").predict({"inputs": sample(1)})
        assert status == 200 and headers["x-torchport-device"] == "neuron-emulated" and len(body["outputs"][0]) == 4
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, stderr
    assert "Traceback" not in stderr and "serving" in stderr


@pytest.mark.parametrize("args, fragment", [
    ([os.path.join(HERE, "serve_models.py") + ":nothing_here"], "has no function 'nothing_here'"),
    ([ENTRY, "--shadow", "2"], "--shadow '2' is not a share"),
    ([ENTRY, "--primary", "warp-drive"], "Unknown device 'warp-drive'"),
    ([ENTRY, "--weights", "/nonexistent/weights.pt"], "does not exist"),
])
def test_cli_errors_are_one_line_without_traceback(args, fragment, capsys):
    assert main(["serve", *args]) == 2
    stderr = capsys.readouterr().err
    assert fragment in stderr and "Traceback" not in stderr
    assert stderr.startswith("torchport: error:") and stderr.count("\n") == 1


def test_a_taken_port_is_a_usage_error(capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", ENTRY, "--primary", "cpu", "--port", str(port)]) == 2
    stderr = capsys.readouterr().err
    assert f"Cannot serve on 127.0.0.1:{port}" in stderr and "Pick another --port" in stderr
