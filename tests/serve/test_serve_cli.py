"""`torchport serve` from the command line: serves, drains on SIGTERM, and fails without tracebacks."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from http_client import Client
from serve_models import SLOW_MARKER, SLOW_S, sample
from torchport.cli.main import main

HERE = os.path.dirname(os.path.abspath(__file__))
ENTRY = os.path.join(HERE, "serve_models.py") + ":make_linear"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_ready(process, port: int, timeout_s: float = 60):
    """/readyz once it answers 200 (None if the process ends or it never does); while the model loads
    the server already listens: /healthz is 200 and /readyz 503 'loading'."""
    deadline = time.monotonic() + timeout_s
    ready = None
    while time.monotonic() < deadline and process.poll() is None:
        try:
            ready = Client(f"http://127.0.0.1:{port}", timeout_s=5).request("GET", "/readyz")
        except OSError:
            time.sleep(0.05)
            continue
        if ready[0] == 200:
            return ready
        assert ready[0] == 503 and ready[2]["loading"] is True, ready
        assert Client(f"http://127.0.0.1:{port}", timeout_s=5).request("GET", "/healthz")[0] == 200
        time.sleep(0.05)
    return ready


@pytest.mark.slow
def test_serve_answers_then_drains_on_sigterm_and_exits_zero():
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "torchport", "serve", ENTRY, "--primary", "neuron-emulated",
                                "--fallback", "cpu", "--port", str(port), "--shadow", "1.0"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready = wait_ready(process, port)
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
    # the log tells a drained shutdown from a crash or a kill
    assert "SIGTERM received: draining 0 request(s) admitted" in stderr and "drained in" in stderr, stderr


@pytest.mark.slow
def test_a_request_arriving_just_after_the_drain_gets_a_json_503_not_a_cut_connection():
    port = free_port()
    process = serve("make_linear", port, "--drain-linger-s", "3")
    try:
        ready = wait_ready(process, port)
        assert ready is not None and ready[0] == 200, process.stderr.read() if process.poll() is not None else ready
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)  # nothing in flight: the drain ends at once
        time.sleep(0.5)
        status, _, body = Client(f"http://127.0.0.1:{port}").predict({"inputs": sample(1)})
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert status == 503 and body["error"] == "draining"
    assert process.returncode == 0 and time.monotonic() - started >= 3, stderr


def serve(entry: str, port: int, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "torchport", "serve", os.path.join(HERE, "serve_models.py") + ":" + entry,
                             "--primary", "neuron-emulated", "--fallback", "cpu", "--port", str(port), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def start_and_stop(entry: str, *extra: str) -> tuple[int, str]:
    """Serve `entry` until ready, then SIGTERM: (exit status, what it wrote to stderr)."""
    port = free_port()
    process = serve(entry, port, *extra)
    try:
        assert wait_ready(process, port)[0] == 200
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    return process.returncode, stderr


@pytest.mark.slow
def test_a_primary_on_the_fallbacks_own_device_is_warned_of_at_start():
    status, stderr = start_and_stop("make_linear", "--primary", "cpu", "--shadow", "0.5")
    assert "primary and fallback are both 'cpu'" in stderr and "covers only failures that do not repeat" in stderr
    assert "shadow off (not checked)" in stderr and status == 0, stderr


@pytest.mark.slow
def test_a_primary_that_cannot_hold_the_model_is_not_promised_back_by_probes():
    status, stderr = start_and_stop("make_catalogue_ids")
    assert "'item_ids'" in stderr and "probes cannot take it back" in stderr, stderr
    assert "until probes succeed" not in stderr and status == 0, stderr


def ask_in_thread(port: int, payload) -> tuple[threading.Thread, list]:
    """Send `payload` from a thread; `results` gets the response, or the error of a connection cut."""
    results: list = []

    def send():
        try:
            results.append(Client(f"http://127.0.0.1:{port}", timeout_s=30).predict(payload))
        except OSError as error:
            results.append(error)

    thread = threading.Thread(target=send)
    thread.start()
    return thread, results


@pytest.mark.slow
def test_health_answers_while_the_model_loads():
    port = free_port()
    process = serve("make_slow_loading", port)
    try:
        deadline, seen_loading = time.monotonic() + 30, False
        while time.monotonic() < deadline and process.poll() is None:
            try:
                client = Client(f"http://127.0.0.1:{port}", timeout_s=1)  # a hung health check fails here
                health, ready = client.request("GET", "/healthz"), client.request("GET", "/readyz")
            except OSError:
                time.sleep(0.02)
                continue
            assert health[0] == 200
            if ready[0] == 200:
                break
            seen_loading = True
            assert ready[2]["loading"] is True
            refused = client.predict({"inputs": sample(1)})
            if refused[0] == 200:  # the model finished loading between the two requests
                continue
            assert refused[0] == 503 and refused[2]["error"] == "loading" and refused[1]["retry-after"] == "1"
        assert seen_loading and ready[0] == 200
    finally:
        process.terminate()
        process.communicate(timeout=30)


def signals_during_a_slow_request(drain_timeout_s: str, signals: list[int], timeout_s: str = "10", wait_s: float = 0.5,
                                  gap_s: float = 0.8):
    """Serve SlowModel, start a request it takes SLOW_S seconds to answer on each device, send `signals`
    `gap_s` apart from `wait_s` on; (response or connection error, exit status, stderr, seconds from the
    last signal to the exit)."""
    port = free_port()
    process = serve("make_slow_model", port, "--timeout-s", timeout_s, "--drain-timeout-s", drain_timeout_s)
    try:
        assert wait_ready(process, port)[0] == 200
        thread, results = ask_in_thread(port, {"inputs": [[SLOW_MARKER] * 8]})
        time.sleep(wait_s)  # the request is inside the model
        for index, number in enumerate(signals):
            if index and gap_s:
                time.sleep(gap_s)
            process.send_signal(number)
        started = time.monotonic()
        _, stderr = process.communicate(timeout=30)
        elapsed = time.monotonic() - started
        thread.join(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    return results[0], process.returncode, stderr, elapsed


@pytest.mark.slow
@pytest.mark.parametrize("device", ["primary", "fallback"])
def test_a_request_still_running_at_the_drain_timeout_gets_a_json_503_and_the_server_exits_zero(device):
    # "fallback": the primary times out after 1 s and the fallback, on a thread of its own pool, is
    # inside the model when the signal comes
    timing = {"timeout_s": "10", "wait_s": 0.5} if device == "primary" else {"timeout_s": "1", "wait_s": 1.5}
    (status, headers, body), returncode, stderr, elapsed = signals_during_a_slow_request("0.5", [signal.SIGTERM],
                                                                                         **timing)
    assert status == 503 and body["error"] == "draining" and "drain timeout (0.5 s)" in body["detail"]
    # the exit waits for neither the primary's nor the fallback's thread still in the model (SLOW_S)
    assert headers["retry-after"] == "1" and elapsed < SLOW_S - 1
    assert returncode == 0 and "Traceback" not in stderr, stderr


@pytest.mark.slow
def test_a_second_signal_exits_at_once():
    _, returncode, stderr, elapsed = signals_during_a_slow_request("30", [signal.SIGINT, signal.SIGINT])
    assert elapsed < 2.0 and returncode == 128 + signal.SIGINT, (elapsed, returncode, stderr)
    assert "second signal" in stderr and "Traceback" not in stderr


@pytest.mark.slow
def test_one_signal_delivered_twice_drains_once():
    # GNU timeout and shell wrappers send the signal to the server and to its process group
    (status, _, body), returncode, stderr, _ = signals_during_a_slow_request("30", [signal.SIGTERM, signal.SIGTERM],
                                                                             gap_s=0)
    assert status == 200 and len(body["outputs"]) == 1, (status, body)
    assert returncode == 0 and "second signal" not in stderr and "drained in" in stderr, stderr


@pytest.mark.parametrize("args, fragment", [
    ([os.path.join(HERE, "serve_models.py") + ":nothing_here"], "has no function 'nothing_here'"),
    ([os.path.join(HERE, "serve_models.py") + ":make_without_its_setting"], "called sys.exit(3) instead of returning"),
    ([ENTRY, "--shadow", "2"], "--shadow '2' is not a share"),
    ([ENTRY, "--primary", "warp-drive"], "Unknown device 'warp-drive'"),
    ([ENTRY, "--weights", "/nonexistent/weights.pt"], "does not exist"),
    ([ENTRY, "--drain-timeout-s", "0"], "--drain-timeout-s 0.0 is out of range"),
    ([ENTRY, "--drain-timeout-s", "-1"], "--drain-timeout-s -1.0 is out of range"),
    ([ENTRY, "--timeout-s", "inf"], "--timeout-s inf is out of range"),
    ([ENTRY, "--max-queue", "-1"], "--max-queue -1 is out of range. Allowed: 0 or more."),
    ([ENTRY, "--batch-wait-ms", "5000"], "--batch-wait-ms 5000.0 is out of range"),
    ([ENTRY, "--batch-max-size", "64"], "--batch-max-size 64 is more than --max-concurrency 32"),
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
