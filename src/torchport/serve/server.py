"""The HTTP face of a `Deployment` (Starlette on uvicorn; extra `torchport[serve]`).

    POST /v1/predict   the model's answer; headers say which device answered and why
    GET  /healthz      200 while the process is alive (from the moment it listens, model loading or not)
    GET  /readyz       200 when the model is loaded on the primary or the fallback and not draining
    GET  /metrics      Prometheus text format (torchport.serve.metrics.METRIC_NAMES)

The server may start before its deployment exists (`Slot`): while the model loads, /healthz answers
200, /readyz, /metrics and /v1/predict answer 503 `loading`. Every error is a JSON body
`{"error": KIND, "detail": MESSAGE}` with a 4xx or 5xx status, never a traceback. Request bodies
over `max_body_bytes` get 413; more than `max_concurrency` running plus `max_queue` waiting requests
get 429. On SIGINT or SIGTERM the server drains: /readyz turns 503, new requests get 503, admitted
ones (running or queued) finish, up to `drain_timeout_s`; those still unanswered then get 503
`draining` with that reason; then it exits. A second signal exits at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import socket
import sys
import threading
import time
from typing import Any, Iterator

from torchport.errors import UsageError
from torchport.serve.errors import (BodyTimeout, ClientDisconnected, Draining, InvalidInput, Overloaded, PayloadTooLarge,
                                    ServeError)
from torchport.serve.model import default_preprocess, json_bytes

__all__ = ["Slot", "create_app", "make_server", "bind", "running_server", "require_server_stack", "DEVICE_HEADER",
           "ROLE_HEADER", "FAILOVER_HEADER", "ROUTED_HEADER", "LOADING"]

#: Response headers of /v1/predict: the device that answered, its role, the cause when this request failed
#: on the primary ("none" otherwise), and why it went straight to the fallback ("canary", "breaker_open",
#: "out_of_range", "none").
DEVICE_HEADER, ROLE_HEADER = "x-torchport-device", "x-torchport-role"
FAILOVER_HEADER, ROUTED_HEADER = "x-torchport-failover", "x-torchport-routed"


def require_server_stack() -> None:
    """Raise a usage error naming the extra when starlette, uvicorn or prometheus_client is missing."""
    missing = []
    for module in ("starlette", "uvicorn", "prometheus_client"):
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    if missing:
        raise UsageError(f"torchport serve needs {', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} "
                         "not installed. Install the extra: pip install 'torchport[serve]'.")


#: The error kind of requests that arrive while the model is still loading.
LOADING = "loading"


class Slot:
    """Where the server finds its deployment: empty while the model loads (`fill` when built, `fail`
    when building raised)."""

    def __init__(self, deployment=None):
        self.deployment = deployment
        self.error: BaseException | None = None
        #: Set by the app: answers every request still waiting with 503 (the drain timed out).
        self.abandon_waiting = None
        #: How many requests were answered 503 at the drain timeout while a device still computed them.
        self.abandoned = 0

    def fill(self, deployment) -> None:
        self.deployment = deployment

    def fail(self, error: BaseException) -> None:
        self.error = error


#: Request bodies above this size are parsed off the event loop (a 1 MB body takes ~100 ms to parse,
#: which health checks and other clients would otherwise wait behind).
PARSED_OFF_LOOP_BYTES = 64 * 1024


def _error(status: int, kind: str, detail: str, headers: dict[str, str] | None = None):
    from starlette.responses import Response

    return Response(json_bytes({"error": kind, "detail": detail}), status_code=status, media_type="application/json",
                    headers=headers)


def create_app(deployment, *, max_body_bytes: int = 1 << 20, max_queue: int = 64, body_timeout_s: float = 30.0):
    """The Starlette application serving `deployment` (a Deployment, or a Slot filled once it loads)."""
    require_server_stack()
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.requests import ClientDisconnect
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    slot = deployment if isinstance(deployment, Slot) else Slot(deployment)
    admitted = {"count": 0}  # touched only on the event loop
    waiting: dict[asyncio.Future, None] = {}  # requests the deployment is answering, touched only on the loop
    abandoned = {"reason": None}

    def loading():
        return _error(503, LOADING, "The model is still loading; /readyz turns 200 when it is served. Retry shortly.",
                      {"retry-after": "1"})

    def abandon_waiting(reason: str) -> None:
        """On the loop: answer every request still waiting with 503 Draining (`reason`)."""
        abandoned["reason"] = reason
        slot.abandoned += len(waiting)
        for future in list(waiting):
            future.cancel()

    async def read_body(request) -> bytes:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > max_body_bytes:
            raise PayloadTooLarge(f"The request body is {declared} bytes; the limit is {max_body_bytes}. "
                                  "Send fewer inputs per request.")
        chunks, size = [], 0
        try:
            async with asyncio.timeout(body_timeout_s):
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > max_body_bytes:
                        raise PayloadTooLarge(f"The request body is over the limit of {max_body_bytes} bytes. "
                                              "Send fewer inputs per request.")
                    chunks.append(chunk)
        except TimeoutError:
            raise BodyTimeout(f"The request body did not arrive within {body_timeout_s:g} s ({size} bytes came). "
                              "Send the whole body at once.") from None
        except ClientDisconnect:
            raise ClientDisconnected("The client disconnected before its request body arrived.") from None
        return b"".join(chunks)

    async def answer(deployment, payload):
        """The deployment's answer; Draining when the drain times out while it is still being computed."""
        if slot.abandon_waiting is None:
            loop = asyncio.get_running_loop()
            slot.abandon_waiting = lambda reason: loop.call_soon_threadsafe(abandon_waiting, reason)
        future = asyncio.ensure_future(deployment.predict_async(payload))
        waiting[future] = None
        try:
            return await future
        except asyncio.CancelledError:
            if asyncio.current_task().cancelling() or abandoned["reason"] is None:
                raise  # this handler itself is cancelled
            deployment.metrics.rejected(Draining.kind)
            raise Draining(abandoned["reason"]) from None
        finally:
            waiting.pop(future, None)

    async def predict(request):
        deployment = slot.deployment
        if deployment is None:
            return loading()
        counted_by_deployment = False
        try:
            if deployment.draining:
                raise Draining("The deployment is draining for shutdown and takes no new requests. "
                               "Retry on another replica.")
            body = await read_body(request)
            try:
                if len(body) > PARSED_OFF_LOOP_BYTES:  # a large body parses on a thread: /healthz stays quick
                    payload = await asyncio.get_running_loop().run_in_executor(None, json.loads, body)
                else:
                    payload = json.loads(body)
            except (ValueError, RecursionError) as error:  # RecursionError: nesting too deep to parse
                # the default request's form as the example; a factory's own preprocess has its own form
                form = ('e.g. {"inputs": [[0.1, 0.2]]}' if deployment.spec.preprocess is default_preprocess
                        else "the JSON this model's preprocess takes")
                raise InvalidInput(f"The request body is not JSON ({type(error).__name__}: {error}). "
                                   f"Send {form} with Content-Type: application/json.") from None
            admission_limit = deployment.max_concurrency + max_queue
            if admitted["count"] >= admission_limit:
                raise Overloaded(f"{admitted['count']} requests are running or queued; the limit is {admission_limit} "
                                 f"(--max-concurrency {deployment.max_concurrency} + --max-queue {max_queue}). "
                                 "Retry shortly.")
            admitted["count"] += 1
            counted_by_deployment = True
            try:
                result = await answer(deployment, payload)  # max_concurrency at once, the rest queued
            finally:
                admitted["count"] -= 1
        except ServeError as error:
            if not counted_by_deployment:
                deployment.metrics.rejected(error.kind)
            headers = {"retry-after": "1"} if error.status in (429, 503) else None
            if error.status in (408, 413):  # the body was not read to its end: the rest must not become a request
                headers = {"connection": "close"}
            elif isinstance(error, Draining):  # the port closes soon: a kept-alive client reconnects elsewhere now
                headers = {"retry-after": "1", "connection": "close"}
            return _error(error.status, error.kind, str(error), headers)
        # the body was rendered to JSON by the deployment, which refused (and counted) one that cannot be
        return Response(result.content, media_type="application/json", headers={
            DEVICE_HEADER: result.device, ROLE_HEADER: result.role, FAILOVER_HEADER: result.failover or "none",
            ROUTED_HEADER: result.routed or "none"})

    async def healthz(request):
        return JSONResponse({"status": "alive"})

    async def readyz(request):
        if slot.deployment is None:
            return JSONResponse({"ready": False, "loading": True, "detail": "the model is loading"}, status_code=503)
        status = slot.deployment.status()
        return JSONResponse(status, status_code=200 if status["ready"] else 503)

    async def metrics(request):
        if slot.deployment is None:
            return loading()
        content, content_type = slot.deployment.metrics.exposition()
        return Response(content, media_type=content_type)

    async def http_error(request, error: HTTPException):
        allowed = "POST /v1/predict, GET /healthz, GET /readyz, GET /metrics"
        kind = {404: "not_found", 405: "method_not_allowed"}.get(error.status_code, "http_error")
        response = _error(error.status_code, kind,
                          f"{request.method} {request.url.path}: {error.detail}. Endpoints: {allowed}.")
        for name, value in (error.headers or {}).items():  # a 405's Allow: the methods the path takes
            response.headers[name] = value
        return response

    async def internal_error(request, error: Exception):
        return _error(500, "internal_error", f"{type(error).__name__}: {error}. The server logs hold the traceback.")

    app = Starlette(
        routes=[
            Route("/v1/predict", predict, methods=["POST"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", readyz, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
        ],
        exception_handlers={HTTPException: http_error, Exception: internal_error},
    )
    app.state.torchport_slot = slot  # where make_server finds the requests to answer at a drain timeout
    return app


#: How soon after the first shutdown signal the same signal again is taken as that one delivered twice.
SIGNAL_ECHO_S = 0.5


def make_server(deployment, app, host: str = "127.0.0.1", port: int = 8000, drain_timeout_s: float = 30.0,
                log_level: str = "warning", linger_s: float = 1.0):
    """A uvicorn server whose first SIGINT/SIGTERM drains the deployment (`deployment`: a Deployment or
    the Slot the app serves) before exiting; requests still unanswered after `drain_timeout_s` get
    503. After the drain it goes on answering new requests with 503 for `linger_s`, so that clients
    and a load balancer reading /readyz see the 503 instead of a connection cut when the listening
    socket closes. A second signal ends the process at once, with status 128 + its number, leaving
    requests and threads still computing; the same signal again within `SIGNAL_ECHO_S` is the first
    one delivered twice (GNU timeout and shell wrappers send it to the child and to its process
    group), not a second."""
    import uvicorn

    slot = deployment if isinstance(deployment, Slot) else app.state.torchport_slot

    class DrainingServer(uvicorn.Server):
        drain_started = False
        first_signal: tuple[int, float] | None = None

        def handle_exit(self, sig, frame):
            now = time.monotonic()
            if self.first_signal is not None and self.first_signal[0] == sig and now - self.first_signal[1] < SIGNAL_ECHO_S:
                return  # one shutdown delivered twice
            if self.first_signal is None:
                self.first_signal = (sig, now)
            if self.drain_started:  # the second signal: no more waiting
                import os

                running = slot.deployment.in_flight if slot.deployment is not None else 0
                print(f"torchport: stopped by a second signal, {running} request(s) unanswered.", file=sys.stderr,
                      flush=True)
                os._exit(128 + int(sig))
            if slot.deployment is None:  # still loading: nothing to drain
                self.should_exit = True
                return
            self.drain_started = True
            try:
                name = signal.Signals(sig).name
            except ValueError:
                name = f"signal {sig}"
            print(f"torchport: {name} received: draining {slot.deployment.in_flight} request(s) admitted (running or "
                  f"queued; up to {drain_timeout_s:g} s); new requests get 503.", file=sys.stderr, flush=True)
            threading.Thread(target=self.drain_then_exit, name="torchport-drain", daemon=True).start()

        def drain_then_exit(self):
            started = time.perf_counter()
            if slot.deployment.drain(drain_timeout_s):
                print(f"torchport: drained in {time.perf_counter() - started:.1f} s; exiting.", file=sys.stderr,
                      flush=True)
            elif slot.abandon_waiting is not None:
                slot.abandon_waiting(f"The request did not finish within the drain timeout ({drain_timeout_s} s) "
                                     "and the server is shutting down. Retry on another replica.")
            time.sleep(linger_s)  # new requests still get the JSON 503 `draining`, not a reset
            self.should_exit = True

    # every admitted request is answered once the drain ends (by its result or 503): the shutdown
    # only waits for those answers to be written
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=False,
                            timeout_graceful_shutdown=5, lifespan="off")
    return DrainingServer(config)


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (port 0: a free one); a failure is a usage error naming the address."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on connections of such a socket, and
    # without it a keep-alive response written in two parts waits ~40 ms for a delayed ACK.
    listener = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
        listener.listen(2048)
        return listener
    except OSError as error:
        listener.close()
        raise UsageError(f"Cannot serve on {host}:{port}: {error.strerror or error}. "
                         "Pick another --port, stop what holds it, or pass a --host this machine has.") from error


@contextlib.contextmanager
def running_server(deployment, host: str = "127.0.0.1", **app_options: Any) -> Iterator[str]:
    """Serve `deployment` on a free loopback port in a background thread; yields the base URL."""
    import time

    app = create_app(deployment, **app_options)
    server = make_server(deployment, app, host=host, port=0)
    listener = bind(host, 0)
    port = listener.getsockname()[1]
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, name="torchport-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        listener.close()
