"""The HTTP face of a `Deployment` (Starlette on uvicorn; extra `torchport[serve]`).

    POST /v1/predict   the model's answer; headers say which device answered and why
    GET  /healthz      200 while the process is alive
    GET  /readyz       200 when the model is loaded on the primary or the fallback and not draining
    GET  /metrics      Prometheus text format (torchport.serve.metrics.METRIC_NAMES)

Every error is a JSON body `{"error": KIND, "detail": MESSAGE}` with a 4xx or 5xx status, never a
traceback. Request bodies over `max_body_bytes` get 413; more than `max_concurrency` running plus
`max_queue` waiting requests get 429. On SIGINT or SIGTERM the server drains: /readyz turns 503,
new requests get 503, in-flight ones finish (up to `drain_timeout_s`), then it exits; a second
signal exits at once.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from typing import Any, Iterator

from torchport.errors import UsageError
from torchport.serve.errors import Draining, InvalidInput, Overloaded, PayloadTooLarge, ServeError

__all__ = ["create_app", "make_server", "bind", "running_server", "require_server_stack", "DEVICE_HEADER",
           "ROLE_HEADER", "FAILOVER_HEADER", "ROUTED_HEADER"]

#: Response headers of /v1/predict: the device that answered, its role, the cause when this request failed
#: on the primary ("none" otherwise), and why it went straight to the fallback ("canary", "breaker_open", "none").
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


def _error(status: int, kind: str, detail: str, headers: dict[str, str] | None = None):
    from starlette.responses import JSONResponse

    return JSONResponse({"error": kind, "detail": detail}, status_code=status, headers=headers)


def create_app(deployment, *, max_body_bytes: int = 1 << 20, max_queue: int = 64):
    """The Starlette application serving `deployment`."""
    require_server_stack()
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    admitted = {"count": 0}  # touched only on the event loop
    admission_limit = deployment.max_concurrency + max_queue

    async def read_body(request) -> bytes:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > max_body_bytes:
            raise PayloadTooLarge(f"The request body is {declared} bytes; the limit is {max_body_bytes}. "
                                  "Send fewer inputs per request.")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > max_body_bytes:
                raise PayloadTooLarge(f"The request body is over the limit of {max_body_bytes} bytes. "
                                      "Send fewer inputs per request.")
            chunks.append(chunk)
        return b"".join(chunks)

    async def predict(request):
        counted_by_deployment = False
        try:
            if deployment.draining:
                raise Draining("The deployment is draining for shutdown and takes no new requests. "
                               "Retry on another replica.")
            body = await read_body(request)
            try:
                payload = json.loads(body)
            except (ValueError, RecursionError) as error:  # RecursionError: nesting too deep to parse
                raise InvalidInput(f"The request body is not JSON ({type(error).__name__}: {error}). "
                                   'Send e.g. {"inputs": [[0.1, 0.2]]} with Content-Type: application/json.') from None
            if admitted["count"] >= admission_limit:
                raise Overloaded(f"{admitted['count']} requests are running or queued; the limit is {admission_limit} "
                                 f"(max_concurrency {deployment.max_concurrency} + queue {max_queue}). Retry shortly.")
            admitted["count"] += 1
            counted_by_deployment = True
            try:
                answer = await deployment.predict_async(payload)  # max_concurrency at once, the rest queued
            finally:
                admitted["count"] -= 1
        except ServeError as error:
            if not counted_by_deployment:
                deployment.metrics.rejected(error.kind)
            headers = {"retry-after": "1"} if error.status in (429, 503) else None
            return _error(error.status, error.kind, str(error), headers)
        try:
            return JSONResponse(answer.body, headers={
                DEVICE_HEADER: answer.device, ROLE_HEADER: answer.role, FAILOVER_HEADER: answer.failover or "none",
                ROUTED_HEADER: answer.routed or "none"})
        except (TypeError, ValueError) as error:
            return _error(500, "unserializable_output", f"The postprocessed answer is not JSON: {error}. "
                          "Return lists, numbers and strings from postprocess.")

    async def healthz(request):
        return JSONResponse({"status": "alive"})

    async def readyz(request):
        status = deployment.status()
        return JSONResponse(status, status_code=200 if status["ready"] else 503)

    async def metrics(request):
        content, content_type = deployment.metrics.exposition()
        return Response(content, media_type=content_type)

    async def http_error(request, error: HTTPException):
        allowed = "POST /v1/predict, GET /healthz, GET /readyz, GET /metrics"
        kind = {404: "not_found", 405: "method_not_allowed"}.get(error.status_code, "http_error")
        return _error(error.status_code, kind, f"{request.method} {request.url.path}: {error.detail}. Endpoints: {allowed}.")

    async def internal_error(request, error: Exception):
        return _error(500, "internal_error", f"{type(error).__name__}: {error}. The server logs hold the traceback.")

    return Starlette(
        routes=[
            Route("/v1/predict", predict, methods=["POST"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", readyz, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
        ],
        exception_handlers={HTTPException: http_error, Exception: internal_error},
    )


def make_server(deployment, app, host: str = "127.0.0.1", port: int = 8000, drain_timeout_s: float = 30.0,
                log_level: str = "warning"):
    """A uvicorn server whose first SIGINT/SIGTERM drains the deployment before exiting."""
    import uvicorn

    class DrainingServer(uvicorn.Server):
        def handle_exit(self, sig, frame):
            if deployment.draining:
                return super().handle_exit(sig, frame)
            threading.Thread(target=self.drain_then_exit, name="torchport-drain", daemon=True).start()

        def drain_then_exit(self):
            deployment.drain(drain_timeout_s)
            self.should_exit = True

    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=False,
                            timeout_graceful_shutdown=drain_timeout_s, lifespan="off")
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
