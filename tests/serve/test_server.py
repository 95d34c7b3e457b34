"""The HTTP server over loopback: endpoints, headers, 4xx JSON errors, limits, metrics, drain."""

from __future__ import annotations

import json
import threading
import time

import pytest
import torch

from http_client import Client
from serve_models import MARKERS, FaultPlan, FaultyModel, make_linear, sample
from torchport.serve import Deployment
from torchport.serve.metrics import METRIC_NAMES
from torchport.serve.server import running_server

PRIMARY = "neuron-emulated"


@pytest.fixture(scope="module")
def served():
    plan = FaultPlan(hang_s=0.5)
    deployment = Deployment(lambda: FaultyModel(plan), primary=PRIMARY, fallback="cpu", timeout_s=0.2, shadow=1.0)
    with running_server(deployment, max_body_bytes=4096, max_queue=0) as url:
        client = Client(url)
        yield deployment, client
        client.close()
    deployment.close()


def test_predict_answers_and_names_the_device(served):
    deployment, client = served
    status, headers, body = client.predict({"inputs": sample(1)})
    assert status == 200 and len(body["outputs"][0]) == 4
    assert (headers["x-torchport-device"], headers["x-torchport-role"], headers["x-torchport-failover"]) == (
        PRIMARY, "primary", "none")


def test_a_failing_request_is_answered_by_the_fallback_and_says_why(served):
    deployment, client = served
    status, headers, body = client.predict({"inputs": sample(2, MARKERS["oom"])})
    assert status == 200 and headers["x-torchport-device"] == "cpu" and headers["x-torchport-failover"] == "oom"


def test_health_and_readiness(served):
    deployment, client = served
    assert client.request("GET", "/healthz")[:3:2] == (200, {"status": "alive"})
    status, _, body = client.request("GET", "/readyz")
    assert status == 200 and body["primary"] == {"device": PRIMARY, "loaded": True} and body["breaker"] == "closed"


@pytest.mark.parametrize("body, status, kind", [
    (b"{not json", 400, "invalid_input"),
    (b'{"inputs": [[1, 2], [3]]}', 400, "invalid_input"),
    (b'{"inputs": [[1.0, 2.0]]}', 422, "model_rejected_input"),
    (b'{"inputs": [' + b"1.0, " * 1000 + b"1.0]}", 413, "payload_too_large"),
    (b'{"inputs": ' + b"[" * 2000 + b"]" * 2000 + b"}", 400, "invalid_input"),
    (b"", 400, "invalid_input"),
    (b"\xff\xfe", 400, "invalid_input"),
])
def test_bad_requests_get_json_4xx_without_traceback(served, body, status, kind):
    deployment, client = served
    answer_status, headers, answer = client.predict(body)
    assert (answer_status, answer["error"]) == (status, kind)
    if body == b"{not json":  # the default preprocess: its request form is the example
        assert 'Send e.g. {"inputs": [[0.1, 0.2]]}' in answer["detail"]
    assert "Traceback" not in answer["detail"] and len(answer["detail"]) > 20


def test_a_lone_surrogate_a_client_sent_and_the_factory_echoes_stays_a_4xx_or_a_200():
    # `"\\ud800"` is a valid JSON escape with no UTF-8 form: echoed in an error or an answer, it is
    # written back escaped, not turned into a 500
    vocabulary = {"hello": 0, "world": 1}

    def preprocess(payload):
        words = payload["text"].split()
        unknown = [word for word in words if word not in vocabulary]
        if unknown and payload.get("strict", True):
            raise ValueError(f"unknown words: {', '.join(unknown)}")
        return torch.tensor([[float(vocabulary.get(word, 0)) for word in words]])

    def postprocess(outputs):
        return {"outputs": outputs.tolist(), "echo": "x\ud800"}

    factory = lambda: {"model": torch.nn.Identity(), "preprocess": preprocess, "postprocess": postprocess,
                       "example": torch.tensor([[0.0, 1.0]])}
    with Deployment(factory, primary=PRIMARY, fallback="cpu") as deployment, \
            running_server(deployment) as url:
        client = Client(url)
        status, _, body = client.predict(b'{"text": "hello \\ud800x"}')
        assert (status, body["error"]) == (400, "invalid_input") and "\ud800x" in body["detail"]
        status, _, body = client.predict(b'{"text": "hello')  # cut short: no hint of the default's {"inputs": ...}
        assert status == 400 and "the JSON this model's preprocess takes" in body["detail"]
        assert '"inputs"' not in body["detail"]
        status, headers, body = client.predict(b'{"text": "hello \\ud800x", "strict": false}')
        assert status == 200 and body == {"outputs": [[0.0, 0.0]], "echo": "x\ud800"}
        assert headers["x-torchport-role"] == "primary"
        client.close()


def test_a_large_body_is_parsed_off_the_event_loop_and_answered():
    from torchport.serve.server import PARSED_OFF_LOOP_BYTES

    rows = [sample(index)[0] for index in range(4000)]
    body = json.dumps({"inputs": rows}).encode()
    assert len(body) > PARSED_OFF_LOOP_BYTES
    deployment = Deployment(make_linear, primary=PRIMARY, fallback="cpu")
    with running_server(deployment) as url:
        client = Client(url)
        status, _, answer = client.predict(body)
        assert status == 200 and len(answer["outputs"]) == 4000
        status, _, answer = client.predict(body[:-2])  # cut short: still a clear 400
        assert (status, answer["error"]) == (400, "invalid_input")
        client.close()
    deployment.close()


def test_unknown_paths_and_methods_are_json_errors(served):
    deployment, client = served
    status, headers, body = client.request("GET", "/v1/predict")
    assert status == 405 and body["error"] == "method_not_allowed" and "POST /v1/predict" in body["detail"]
    assert headers["allow"] == "POST"
    status, headers, _ = client.request("POST", "/healthz")
    assert status == 405 and set(headers["allow"].split(", ")) == {"GET", "HEAD"}
    status, _, body = client.request("GET", "/nowhere")
    assert status == 404 and body["error"] == "not_found"


def test_metrics_expose_every_documented_family(served):
    deployment, client = served
    client.predict({"inputs": sample(3, MARKERS["nonfinite"])})
    client.predict({"inputs": sample(4)})
    client.predict(b" " * 5000)
    deployment.flush()
    status, headers, text = client.request("GET", "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain")
    exported = {line.split()[2]: line.split()[3] for line in text.splitlines()
                if line.startswith("# TYPE torchport_serve_") and not line.split()[2].endswith("_created")}
    assert exported == {name: kind for name, (kind, _) in METRIC_NAMES.items()}  # one list, both ways
    assert 'torchport_serve_failovers_total{cause="nonfinite"}' in text
    assert f'torchport_serve_device_memory_bytes{{device="{PRIMARY}",role="primary",stat="allocated"}}' in text
    assert 'torchport_serve_device_memory_bytes{device="cpu",role="fallback",stat="process_resident"}' in text
    assert 'torchport_serve_rejected_total{reason="payload_too_large"}' in text
    comparisons = [line for line in text.splitlines() if line.startswith("torchport_serve_shadow_comparisons_total")]
    assert comparisons and float(comparisons[0].split()[-1]) >= 1


def test_concurrency_limit_answers_429():
    plan = FaultPlan(hang_s=0.4)
    deployment = Deployment(lambda: FaultyModel(plan), primary=PRIMARY, fallback="cpu", timeout_s=2.0,
                            max_concurrency=1)
    with running_server(deployment, max_queue=0) as url:
        slow = threading.Thread(target=lambda: Client(url).predict({"inputs": sample(1, MARKERS["timeout"])}))
        slow.start()
        while deployment.in_flight == 0:
            time.sleep(0.005)
        status, headers, body = Client(url).predict({"inputs": sample(2)})
        slow.join()
    deployment.close()
    assert status == 429 and body["error"] == "overloaded" and headers["retry-after"] == "1"


def test_time_queued_behind_the_concurrency_limit_is_measured_apart_from_the_runtimes():
    plan = FaultPlan(hang_s=0.6)
    deployment = Deployment(lambda: FaultyModel(plan), primary=PRIMARY, fallback="cpu", timeout_s=2.0,
                            max_concurrency=1)
    with running_server(deployment, max_queue=4) as url:
        slow = threading.Thread(target=lambda: Client(url).predict({"inputs": sample(1, MARKERS["timeout"])}))
        slow.start()
        while deployment.in_flight == 0:
            time.sleep(0.005)
        started = time.perf_counter()
        status, _, _ = Client(url).predict({"inputs": sample(2)})  # waits for the slow one's place
        waited = time.perf_counter() - started
        slow.join()
        _, _, text = Client(url).request("GET", "/metrics")
    deployment.close()
    assert status == 200 and waited > 0.4
    values = {line.split()[0]: float(line.split()[1]) for line in text.splitlines() if line and not line.startswith("#")}
    assert values["torchport_serve_queue_wait_seconds_count"] == 2.0
    assert 0.4 < values["torchport_serve_queue_wait_seconds_sum"] <= waited
    latency_count = sum(value for name, value in values.items() if name.startswith("torchport_serve_request_latency_seconds_count"))
    latency_sum = sum(value for name, value in values.items() if name.startswith("torchport_serve_request_latency_seconds_sum"))
    # the runtime's own time: the slow call's 0.6 s and the other's few ms, without its 0.6 s wait
    assert latency_count == 2.0 and 0.6 <= latency_sum < 0.9


def test_drain_over_http_finishes_in_flight_and_refuses_new():
    plan = FaultPlan(hang_s=0.4)
    deployment = Deployment(lambda: FaultyModel(plan), primary=PRIMARY, fallback="cpu", timeout_s=2.0)
    with running_server(deployment) as url:
        results = []
        slow = threading.Thread(target=lambda: results.append(Client(url).predict({"inputs": sample(1, MARKERS["timeout"])})))
        slow.start()
        while deployment.in_flight == 0:
            time.sleep(0.005)
        drainer = threading.Thread(target=deployment.drain)
        drainer.start()
        while not deployment.draining:
            time.sleep(0.005)
        client = Client(url)
        refused = client.predict({"inputs": sample(2)})
        ready = client.request("GET", "/readyz")
        slow.join()
        drainer.join()
    deployment.close()
    assert results[0][0] == 200 and results[0][1]["x-torchport-role"] == "primary"
    assert refused[0] == 503 and refused[2]["error"] == "draining"
    assert refused[1]["connection"] == "close"  # a kept-alive client reconnects, not cut at the port's close
    assert ready[0] == 503 and ready[2]["draining"] is True


def test_a_stalled_body_gets_a_json_408_and_a_departed_client_is_counted_without_a_traceback(caplog):
    import json
    import socket
    from urllib.parse import urlsplit

    deployment = Deployment(make_linear, primary=PRIMARY, fallback="cpu")
    with running_server(deployment, body_timeout_s=0.5) as url:
        address = urlsplit(url)
        head = (b"POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: 100\r\n\r\n{\"inputs\"")
        with socket.create_connection((address.hostname, address.port), timeout=10) as stalled:
            stalled.sendall(head)  # 9 of the 100 bytes announced, then nothing
            reply = stalled.recv(65536)
            while b"\r\n\r\n" not in reply or b"}" not in reply.split(b"\r\n\r\n", 1)[1]:  # the body may come apart
                more = stalled.recv(65536)
                if not more:
                    break
                reply += more
            # the rest of the announced body must not be read as the next request on this connection:
            # the server closes it (a keep-alive client's next request then goes on a new one)
            stalled.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            after = b""
            try:
                while more := stalled.recv(65536):
                    after += more
            except (ConnectionResetError, socket.timeout):
                pass
        status, body = reply.decode().split("\r\n", 1)[0], reply.decode().split("\r\n\r\n", 1)[1]
        assert status.startswith("HTTP/1.1 408") and json.loads(body)["error"] == "body_timeout"
        assert b"connection: close" in reply.lower() and after == b"", after
        with socket.create_connection((address.hostname, address.port), timeout=10) as departed:
            departed.sendall(head)
        time.sleep(1.0)  # the server notices the client left while it read the body
        exposition = Client(url).request("GET", "/metrics")[2]
    deployment.close()
    assert 'torchport_serve_rejected_total{reason="body_timeout"} 1.0' in exposition
    assert "Exception in ASGI application" not in caplog.text


def test_the_readme_metrics_table_lists_every_metric_with_its_type():
    import pathlib
    import re

    readme = (pathlib.Path(__file__).parents[2] / "README.md").read_text()
    table = readme.split("### Metrics (Grafana-ready)", 1)[1].split("\n\n", 2)[1]
    documented = {}
    for row in table.splitlines()[2:]:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        names = re.findall(r"`([^`]+)`", cells[0])
        for name in names:  # `a_last_cosine`, `..._last_max_abs_error`: the second shares the first's stem
            if name.startswith("..."):
                name = names[0].rsplit("_", 2)[0] + name[3:]
            documented[name] = cells[1]
    assert documented == {name: kind for name, (kind, _) in METRIC_NAMES.items()}

