"""`torchport serve`: a model behind HTTP on a primary device, with a live fallback device, a circuit
breaker, shadow parity checks and Prometheus metrics (`torchport.serve`)."""

from __future__ import annotations

import sys

from torchport.errors import UsageError

NAME = "serve"
HELP = "serve a model over HTTP on a new device, failing over to the old one request by request"
DESCRIPTION = (
    "Serve ENTRY (MODULE:FUNCTION or FILE.py:FUNCTION returning the model, or a dict with 'model' and optionally "
    "'example', 'preprocess' and 'postprocess') on --primary, answering from --fallback any request the primary "
    "fails (exception, timeout, NaN/inf, out of memory, outputs breaking the example's layout). Endpoints: POST "
    "/v1/predict, GET /healthz, GET /readyz, GET /metrics. SIGINT or SIGTERM drains: in-flight requests finish, new "
    "ones get 503."
)


def _share(text: str, flag: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 1.0:
        raise UsageError(f"{flag} {text!r} is not a share. Allowed: a number from 0.0 to 1.0, e.g. {flag} 0.05.")
    return value


def add_arguments(parser) -> None:
    """The options of `torchport serve`."""
    parser.add_argument("entry", metavar="ENTRY",
                        help="MODULE:FUNCTION or FILE.py:FUNCTION returning the model, (model, example_inputs), or a "
                             "dict with 'model' and optionally 'example' (run once per device at start: warm-up, the "
                             "output contract, needed by --batch-max-size), 'preprocess', 'postprocess', 'eval'")
    parser.add_argument("--primary", default="auto", help="device to serve on (default auto)")
    parser.add_argument("--fallback", default="cpu", help="device that answers when the primary fails (default cpu)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000; 0: a free one)")
    parser.add_argument("--shadow", default="0.0",
                        help="share of requests also run on the other device and compared (default 0: off)")
    parser.add_argument("--canary", default="1.0", help="share of live traffic sent to the primary (default 1.0)")
    parser.add_argument("--timeout-s", type=float, default=2.0, help="seconds the primary has per request (default 2)")
    parser.add_argument("--weights", metavar="PATH",
                        help="state dict to load into the model (torch.load weights_only=True)")
    parser.add_argument("--failure-threshold", type=int, default=5,
                        help="primary failures in a row that open the breaker (default 5)")
    parser.add_argument("--reset-after-s", type=float, default=5.0,
                        help="seconds the breaker stays open before probing (default 5)")
    parser.add_argument("--recovery-successes", type=int, default=3,
                        help="good probes in a row that close the breaker (default 3)")
    parser.add_argument("--shadow-alarm-after", type=int, default=3,
                        help="shadow mismatches among the last 100 comparisons that raise the drift alarm (default 3)")
    parser.add_argument("--max-concurrency", type=int, default=32, help="requests computed at once (default 32)")
    parser.add_argument("--max-queue", type=int, default=64,
                        help="requests waiting beyond that before 429 (default 64)")
    parser.add_argument("--max-body-bytes", type=int, default=1 << 20,
                        help="largest request body (413 above; default 1048576)")
    parser.add_argument("--body-timeout-s", type=float, default=30.0,
                        help="seconds a request body may take to arrive (408 after; default 30)")
    parser.add_argument("--batch-max-size", type=int, default=1,
                        help="join up to this many concurrent rows into one model call, run at the powers of two "
                             "below it and at it (default 1: no batching; needs an 'example' tensor with 2+ "
                             "different rows, and at most --max-concurrency)")
    parser.add_argument("--batch-wait-ms", type=float, default=2.0,
                        help="how long a batch waits for more requests (default 2)")
    parser.add_argument("--warmup-timeout-s", type=float, default=600.0,
                        help="seconds the primary may take on the example at start (compilation) before traffic "
                             "starts on the fallback without it (default 600)")
    parser.add_argument("--lazy-fallback", action="store_true", help="load the fallback on its first request")
    parser.add_argument("--drain-timeout-s", type=float, default=30.0,
                        help="seconds in-flight requests get on shutdown (default 30)")
    parser.add_argument("--drain-linger-s", type=float, default=1.0,
                        help="seconds new requests still get a 503 after the drain, before the port closes (default 1)")


def _check_numbers(args) -> None:
    """Each numeric flag in its range, named as the user typed it."""
    from torchport.serve.runtime import MAX_TIMEOUT_S

    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port {args.port!r} is out of range. Allowed: 0 to 65535.")
    seconds = f"seconds, at most {MAX_TIMEOUT_S:.0f}"
    checks = [
        ("--timeout-s", args.timeout_s, 0 < args.timeout_s <= MAX_TIMEOUT_S, f"more than 0 {seconds}, e.g. 2"),
        ("--drain-timeout-s", args.drain_timeout_s, 0 < args.drain_timeout_s <= MAX_TIMEOUT_S,
         f"more than 0 {seconds}, e.g. 30"),
        ("--drain-linger-s", args.drain_linger_s, 0 <= args.drain_linger_s <= MAX_TIMEOUT_S, f"0 or more {seconds}, e.g. 1"),
        ("--warmup-timeout-s", args.warmup_timeout_s, 0 < args.warmup_timeout_s <= MAX_TIMEOUT_S,
         f"more than 0 {seconds}, e.g. 600"),
        ("--reset-after-s", args.reset_after_s, 0 <= args.reset_after_s <= MAX_TIMEOUT_S, f"0 or more {seconds}, e.g. 5"),
        ("--batch-wait-ms", args.batch_wait_ms, 0 <= args.batch_wait_ms <= 1000, "0 to 1000 milliseconds, e.g. 2"),
        ("--max-body-bytes", args.max_body_bytes, args.max_body_bytes >= 1, "at least 1"),
        ("--body-timeout-s", args.body_timeout_s, 0 < args.body_timeout_s <= MAX_TIMEOUT_S,
         f"more than 0 {seconds}, e.g. 30"),
        ("--max-queue", args.max_queue, args.max_queue >= 0, "0 or more"),
        ("--max-concurrency", args.max_concurrency, args.max_concurrency >= 1, "at least 1"),
        ("--batch-max-size", args.batch_max_size, args.batch_max_size >= 1, "at least 1 (1: no batching)"),
        ("--failure-threshold", args.failure_threshold, args.failure_threshold >= 1, "at least 1"),
        ("--recovery-successes", args.recovery_successes, args.recovery_successes >= 1, "at least 1"),
        ("--shadow-alarm-after", args.shadow_alarm_after, 1 <= args.shadow_alarm_after <= 100, "1 to 100"),
    ]
    for flag, value, ok, allowed in checks:
        if not ok:
            raise UsageError(f"{flag} {value!r} is out of range. Allowed: {allowed}.")
    if args.batch_max_size > args.max_concurrency:
        raise UsageError(f"--batch-max-size {args.batch_max_size} is more than --max-concurrency "
                         f"{args.max_concurrency}: a batch joins only requests running at once, so it could never "
                         f"fill. Raise --max-concurrency to at least {args.batch_max_size}, or lower --batch-max-size.")


def _load(slot, server, args, shadow: float, canary: float, port: int) -> None:
    """Build the deployment while the server already answers /healthz; on failure, stop the server."""
    from torchport.serve import Deployment

    try:
        deployment = Deployment(
            args.entry, primary=args.primary, fallback=args.fallback, timeout_s=args.timeout_s, shadow=shadow,
            canary=canary, failure_threshold=args.failure_threshold, reset_after_s=args.reset_after_s,
            recovery_successes=args.recovery_successes, shadow_alarm_after=args.shadow_alarm_after,
            max_concurrency=args.max_concurrency, lazy_fallback=args.lazy_fallback, weights=args.weights,
            batch_max_size=args.batch_max_size, batch_wait_s=args.batch_wait_ms / 1000,
            warmup_timeout_s=args.warmup_timeout_s,
        )
    except BaseException as error:
        slot.fail(error)
        server.should_exit = True
        return
    if server.should_exit:  # a signal came while the model loaded: nothing to serve
        deployment.close()
        return
    if deployment.warmup.get("primary", "ok") != "ok":
        reason = deployment.warmup["primary"].replace("--device", "--primary")  # a backend's hint names run's flag
        if "UnfaithfulModel" in reason:
            until = "; probes cannot take it back: the model's own values do not fit it"
        elif "differs from the fallback's" in reason:
            until = " until a probe answers the example's values as the fallback does"
        else:
            until = " until probes succeed"
        print(f"torchport: warning: the primary {deployment.primary.name!r} failed at start-up "
              f"({reason}); serving from the fallback{until}.", file=sys.stderr)
    training = deployment.spec.training
    if training and deployment.spec.eval:
        shown = ", ".join(training[:3]) + (f" and {len(training) - 3} more" if len(training) > 3 else "")
        print(f"torchport: note: the model was in training mode ({len(training)} module(s): {shown}); it is served "
              "in eval mode (dropout off, batch norm's running statistics). Return {'model': ..., 'eval': False} "
              "from the factory to serve it as returned (Monte Carlo dropout).", file=sys.stderr)
    elif training and deployment.shadow_share > 0:
        print("torchport: warning: the model is served in training mode ('eval': False), so two runs of one input "
              "differ (dropout): shadow comparisons will count mismatches and raise the drift alarm whatever the "
              "primary does. Turn --shadow off for it, or judge parity with the model in eval mode.", file=sys.stderr)
    if deployment.primary.name == deployment.fallback.name:
        resolved = f" (--primary {args.primary} resolved to it)" if args.primary != deployment.primary.name else ""
        print(f"torchport: warning: primary and fallback are both {deployment.primary.name!r}{resolved}: a failover "
              "asks the same device again, so it covers only failures that do not repeat. Name the new device "
              "with --primary (torchport doctor lists those found).", file=sys.stderr)
    if deployment.shadow_note:
        print(f"torchport: warning: {deployment.shadow_note}", file=sys.stderr)
    shadow = "off (not checked)" if deployment.shadow_note else deployment.shadow_share
    host = f"[{args.host}]" if ":" in args.host else args.host  # an IPv6 address, as a URL writes it
    print(f"torchport: serving {deployment.spec.name} on http://{host}:{port} "
          f"(primary {deployment.primary.name}, fallback {deployment.fallback.name}, timeout {args.timeout_s}s, "
          f"canary {deployment.canary_share}, shadow {shadow})", file=sys.stderr, flush=True)
    slot.fill(deployment)


def run(args) -> int:
    """Listen at once (/healthz answers while the model loads), build the deployment, serve until a
    signal drains it."""
    import os
    import threading

    from torchport.serve.server import Slot, bind, create_app, make_server, require_server_stack

    require_server_stack()
    _check_numbers(args)
    import logging

    log = logging.StreamHandler(sys.stderr)  # the deployment's own events: the breaker opening and closing
    log.setFormatter(logging.Formatter("torchport: %(message)s"))
    logging.getLogger("torchport.serve").addHandler(log)
    logging.getLogger("torchport.serve").propagate = False
    from torchport.backends import resolve

    for flag, name in (("--primary", args.primary), ("--fallback", args.fallback)):
        try:
            resolve(name)
        except UsageError as error:
            raise UsageError(f"{flag} {name!r}: {error}") from error
    shadow, canary = _share(args.shadow, "--shadow"), _share(args.canary, "--canary")
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"torchport: warning: binding {args.host!r} exposes the model beyond this machine; "
              "put an authenticating proxy in front of it.", file=sys.stderr)
    listener = bind(args.host, args.port)  # before loading the model: a taken port fails fast
    slot = Slot()
    app = create_app(slot, max_body_bytes=args.max_body_bytes, max_queue=args.max_queue,
                     body_timeout_s=args.body_timeout_s)
    server = make_server(slot, app, host=args.host, port=args.port, drain_timeout_s=args.drain_timeout_s,
                         linger_s=args.drain_linger_s)
    loader = threading.Thread(target=_load, args=(slot, server, args, shadow, canary, listener.getsockname()[1]),
                              name="torchport-load", daemon=True)
    loader.start()
    try:
        server.run(sockets=[listener])
    finally:
        listener.close()
    if slot.error is not None:
        raise slot.error
    if slot.deployment is None:  # stopped while the model loaded
        print("torchport: stopped before the model finished loading.", file=sys.stderr)
        return 0
    slot.deployment.close(drain_s=0)  # the server drained it, up to --drain-timeout-s
    if slot.abandoned:  # answered 503 at the drain timeout, still computing: the exit does not wait for them
        print(f"torchport: {slot.abandoned} request(s) answered 503 at the drain timeout were still being "
              "computed or queued; exiting without them.", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(0)
    return 0
