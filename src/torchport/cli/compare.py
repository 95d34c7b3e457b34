"""`torchport compare`: one model on two devices — numeric parity layer by layer, training curves,
speed, memory and cost per unit of work — with HTML, JSON and Markdown reports and a baseline gate."""

from __future__ import annotations

import json
import math
import os

from torchport import precision as precision_vocabulary
from torchport.errors import ConfigConflictError, UsageError

NAME = "compare"
HELP = "compare one model on two devices: numeric parity per layer, training curves, speed, memory, cost"
DESCRIPTION = (
    "Compare a model on two devices. ENTRY is MODULE:FUNCTION (or FILE.py:FUNCTION); the function returns "
    "(model, inputs) or a dict with 'model', 'inputs' and optionally 'training_step', 'batch_factory', "
    "'unit', 'units_per_sample'. A device is BACKEND[:PRECISION], e.g. cpu, cpu:bf16, neuron-emulated. "
    "Exit code 0: everything within thresholds; 1: parity, training, performance or a regression outside "
    "them, or a self-comparison; 2: usage or internal error."
)

_ENVIRONMENT = {"reference": "TORCHPORT_COMPARE_REFERENCE", "target": "TORCHPORT_COMPARE_TARGET"}


#: The largest batch size the sweep accepts (a larger one cannot be allocated for any real model).
MAX_BATCH_SIZE = 1 << 20


def _positive_integers(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        values = []
    if not values or any(not 1 <= value <= MAX_BATCH_SIZE for value in values):
        raise UsageError(
            f"--batch-sizes {text!r} is not a comma-separated list of positive integers (at most {MAX_BATCH_SIZE}). "
            "Example: 1,4,16."
        )
    return values


def _check_numbers(args) -> None:
    """Ratios are finite and above 0; the tolerance is a finite share from 0 up."""
    for flag, value in (("--min-throughput-ratio", args.min_throughput_ratio),
                        ("--max-memory-ratio", args.max_memory_ratio)):
        if value is not None and not (math.isfinite(value) and value > 0):
            raise UsageError(f"{flag} {value!r} is not allowed; give a finite ratio greater than 0, e.g. {flag} 0.8.")
    tolerance = args.regression_tolerance
    if not (math.isfinite(tolerance) and tolerance >= 0):
        raise UsageError(
            f"--regression-tolerance {tolerance!r} is not allowed; give a share from 0 (no change allowed) "
            "upward, e.g. 0.1 for 10%."
        )


def _check_outputs(args) -> None:
    """Every report path is writable, none is another's or an input's, before any work starts."""
    from torchport.cli.common import check_output_path

    entry_file = args.entry.rpartition(":")[0] if ":" in args.entry else ""
    inputs = [path for path in (entry_file, args.baseline, args.prices) if path]
    written: list[str] = []
    for flag, path in (("--json", args.json_path), ("--html", args.html_path), ("--markdown", args.markdown_path)):
        check_output_path(path, inputs + written, flag)
        if path:
            written.append(path)


#: What a baseline must hold where it holds anything: the fields find_regressions reads.
_NUMBER = (int, float)


def _check_baseline_shape(document: dict, path: str) -> None:
    """A baseline whose parts have the wrong type is a usage error naming the key, not an internal error."""

    def wrong(key: str, value, allowed: str):
        raise UsageError(
            f"Baseline {path!r}: {key} is {value!r:.80}; it must be {allowed}. "
            "Pass a file written by 'torchport compare --json', or rewrite it with one."
        )

    parity = document.get("parity")
    if parity is not None:
        if not isinstance(parity, dict) or not isinstance(parity.get("nodes", []), list):
            wrong("parity", parity, "an object with a list of nodes")
        for index, node in enumerate(parity.get("nodes", [])):
            if not isinstance(node, dict) or not isinstance(node.get("name"), str) or not isinstance(node.get("passed"), bool):
                wrong(f"parity.nodes[{index}]", node, "an object with a string name and a boolean passed")
    training = document.get("training")
    if training is not None and not (isinstance(training, dict) and isinstance(training.get("passed"), bool)):
        wrong("training", training, "an object with a boolean passed")
    performance = document.get("performance")
    if performance is not None and not isinstance(performance, dict):
        wrong("performance", performance, "an object with reference and target sides")
    for side_name in ("reference", "target"):
        side = (performance or {}).get(side_name)
        if side is None:
            continue
        if not isinstance(side, dict) or not isinstance(side.get("batches", []), list):
            wrong(f"performance.{side_name}", side, "an object with a list of batches")
        for index, batch in enumerate(side.get("batches", [])):
            memory = batch.get("peak_memory_bytes") if isinstance(batch, dict) else None
            if (not isinstance(batch, dict) or not isinstance(batch.get("batch_size"), int)
                    or not isinstance(batch.get("units_per_second"), _NUMBER)
                    or not (memory is None or isinstance(memory, _NUMBER))):
                wrong(f"performance.{side_name}.batches[{index}]", batch,
                      "an object with an integer batch_size, a number units_per_second and peak_memory_bytes")
    cost = document.get("cost")
    if cost is not None and not (isinstance(cost, dict) and isinstance(cost.get("ratio"), (*_NUMBER, type(None)))):
        wrong("cost", cost, "an object with a number ratio")


def add_arguments(parser) -> None:
    """The options of `torchport compare`."""
    parser.add_argument("entry", metavar="ENTRY", help="MODULE:FUNCTION returning (model, inputs) or a case dict")
    parser.add_argument("--reference", help="reference device BACKEND[:PRECISION] (default cpu; env TORCHPORT_COMPARE_REFERENCE)")
    parser.add_argument("--target", help="target device BACKEND[:PRECISION] (default auto; env TORCHPORT_COMPARE_TARGET)")
    parser.add_argument("--precision", help="precision policy of the target: "
                        f"{precision_vocabulary.describe('compare')} (default keep)")
    parser.add_argument("--per-op", action="store_true", help="also compare every operator's outputs")
    parser.add_argument("--threshold", action="append", default=[], metavar="DTYPE.LIMIT=VALUE",
                        help="override a parity limit, e.g. float32.max_abs=1e-4 (repeatable)")
    parser.add_argument("--no-parity", action="store_true", help="skip the per-module parity run")
    parser.add_argument("--train-steps", type=int, default=20, help="training steps when the case has a training_step")
    parser.add_argument("--no-training", action="store_true", help="skip training mode even if the case has a step")
    parser.add_argument("--no-performance", action="store_true", help="skip the speed, memory and cost sweep")
    parser.add_argument("--batch-sizes", default=None, help="comma-separated batch sizes for the sweep, e.g. 1,4,16")
    parser.add_argument("--iterations", type=int, default=20, help="timed iterations per batch size")
    parser.add_argument("--warmup", type=int, default=3, help="untimed iterations per batch size (the first is timed as warm-up)")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model on both sides")
    parser.add_argument("--prices", help="price table YAML (default: the example table shipped with torchport)")
    parser.add_argument("--min-throughput-ratio", type=float, help="fail when target/reference throughput is lower")
    parser.add_argument("--max-memory-ratio", type=float, help="fail when target/reference peak memory is higher")
    parser.add_argument("--baseline", metavar="OLD.json", help="report regressions against a saved JSON result")
    parser.add_argument("--regression-tolerance", type=float, default=0.1,
                        help="share a throughput may fall or memory grow before it is a regression (default 0.1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", dest="json_path", metavar="PATH", help="write the JSON result here")
    parser.add_argument("--html", dest="html_path", metavar="PATH", help="write the HTML report here")
    parser.add_argument("--markdown", dest="markdown_path", metavar="PATH", help="write the Markdown summary here")
    parser.add_argument("--output-format", choices=["text", "json", "markdown"], default="text")
    parser.add_argument("--exit-zero", action="store_true", help="exit 0 even when the comparison fails")


def _device(args, side_name: str, default: str) -> str:
    flag_value = getattr(args, side_name)
    variable = _ENVIRONMENT[side_name]
    environment_value = os.environ.get(variable)
    if flag_value and environment_value and flag_value != environment_value:
        raise ConfigConflictError(f"--{side_name}", flag_value, variable, environment_value)
    value = flag_value or environment_value or default
    name, colon, precision = value.partition(":")
    if name.strip().lower() == "auto":  # the reports name the backend it chose
        from torchport import backends

        value = backends.auto()[0].name + colon + precision
    return value


def _compare(case: dict, args, unit, training_step, batch_sizes, thresholds):
    """The comparison the flags ask for."""
    from torchport.compare.api import compare

    return compare(
        case["model"],
        case.get("inputs"),
        reference=_device(args, "reference", "cpu"),
        target=_device(args, "target", "auto"),
        precision=args.precision,
        seed=args.seed,
        parity=not args.no_parity,
        per_op=args.per_op,
        thresholds=thresholds,
        training_step=training_step,
        batch_factory=case.get("batch_factory"),
        train_steps=args.train_steps,
        optimizer_factory=case.get("optimizer_factory"),
        performance=not args.no_performance,
        batch_sizes=batch_sizes,
        iterations=args.iterations,
        warmup=args.warmup,
        compile_model=args.compile,
        unit=unit,
        units_per_sample=case.get("units_per_sample"),
        prices=args.prices,
        min_throughput_ratio=args.min_throughput_ratio,
        max_memory_ratio=args.max_memory_ratio,
        baseline=args.baseline,
        regression_tolerance=args.regression_tolerance,
        model_name=case["name"],
    )


def _model_error(error: Exception, entry: str) -> Exception:
    """A UsageError naming the model's line when the innermost frame is outside torchport; else `error`
    itself (an internal error)."""
    import traceback

    from torchport.errors import TorchportError

    if isinstance(error, TorchportError) or os.environ.get("TORCHPORT_DEBUG"):
        return error
    frames = traceback.extract_tb(error.__traceback__)
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    if not frames or frames[-1].filename.startswith(package):
        return error
    own = [frame for frame in frames if not frame.filename.startswith(package) and "site-packages" not in frame.filename]
    where = f" at {own[-1].filename}:{own[-1].lineno}" if own else ""
    return UsageError(f"The model of {entry!r} raised {type(error).__name__}: {error}{where} during the comparison. "
                      "Fix the model so it runs on both devices (TORCHPORT_DEBUG=1 shows the traceback).")


def run(args) -> int:
    """Run the comparison, write the reports, print the summary; return the exit code."""
    from torchport.compare.cost import Unit
    from torchport.compare.entry import load_case
    from torchport.compare.metrics import parse_threshold_overrides
    from torchport.compare.reports.json_report import to_document, write_json
    from torchport.compare.reports.markdown import render_markdown

    for name in ("iterations", "warmup", "train_steps"):
        if getattr(args, name) < (1 if name == "iterations" else 0):
            raise UsageError(f"--{name.replace('_', '-')} {getattr(args, name)} is out of range; pass a positive number.")
    _check_numbers(args)
    thresholds = parse_threshold_overrides(args.threshold)
    batch_sizes = _positive_integers(args.batch_sizes) if args.batch_sizes else None
    _check_outputs(args)
    if args.baseline:  # a bad baseline fails now, not after the sweep
        from torchport.compare.baseline import load_baseline

        _check_baseline_shape(load_baseline(args.baseline), args.baseline)
    case = load_case(args.entry)
    unit = case.get("unit")
    if isinstance(unit, str):
        unit = Unit(unit, float(case.get("units_per_sample", 1.0)))
    training_step = None if args.no_training else case.get("training_step")
    try:
        result = _compare(case, args, unit, training_step, batch_sizes, thresholds)
    except Exception as error:  # noqa: BLE001 - the model's own fault is the user's to fix, not ours
        raise _model_error(error, args.entry) from error
    if args.json_path:
        write_json(result, args.json_path)
    if args.html_path:
        from torchport.compare.reports.html import write_html

        write_html(result, args.html_path)
    if args.markdown_path:
        from torchport.compare.reports.markdown import write_markdown

        write_markdown(result, args.markdown_path)
    if args.output_format == "json":
        print(json.dumps(to_document(result), indent=2))
    elif args.output_format == "markdown":
        print(render_markdown(result))
    else:
        from rich.console import Console
        from rich.markdown import Markdown

        Console().print(Markdown(render_markdown(result)))
    return 0 if args.exit_zero else result.exit_code
