"""A Markdown summary of a comparison, short enough for a pull-request comment."""

from __future__ import annotations

from pathlib import Path

from torchport.display import markdown_code, markdown_text

__all__ = ["render_markdown", "write_markdown", "format_bytes"]

_STATUS_MARK = {"pass": "PASS", "fail": "FAIL", "self-comparison": "SELF-COMPARISON (not a pass)"}


def format_bytes(count: float | None) -> str:
    """1536 -> '1.5 KiB'; None (a measurement that could not be taken) -> 'not measured'."""
    if count is None:
        return "not measured"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(count) < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024.0
    return f"{count:.1f} GiB"  # pragma: no cover


def _number(value, digits: int = 3) -> str:
    if value is None:
        return "n/a"
    return f"{value:.{digits}g}"


def _parity_section(parity, limit: int) -> list[str]:
    lines = ["## Parity", ""]
    failing = parity.failed_nodes
    compared = sum(1 for node in parity.nodes if node.tensors)
    lines.append(f"{compared} nodes compared, {len(failing)} disagree."
                 + (f" First divergence: **{markdown_code(parity.first_divergence)}**." if parity.first_divergence else ""))
    lines += ["", f"Coverage: {markdown_text(parity.coverage.summary())}.", ""]
    not_compared = parity.coverage.not_compared
    if not_compared:
        lines.append(f"Not compared ({len(not_compared)}):")
        lines += [f"- {markdown_code(item['what'])}: {markdown_text(item['why'])}" for item in not_compared[:limit]]
        lines += ([f"- ... {len(not_compared) - limit} more"] if len(not_compared) > limit else []) + [""]
    if parity.unmatched:
        lines.append(f"Ran on one side only: {', '.join(markdown_code(name) for name in parity.unmatched[:8])}"
                     + (" ..." if len(parity.unmatched) > 8 else ""))
    if failing:
        lines += ["", "| node | judged as | cosine | max abs | max rel | within 0.5% | inputs agree | why |",
                  "|---|---|---|---|---|---|---|---|"]
        for node in failing[:limit]:
            metrics = node.metrics
            agree = {True: "yes", False: "no", None: "-"}[node.inputs_agree]
            name = f"**{markdown_text(node.name)}**" if node.first_divergence else markdown_text(node.name)
            lines.append(f"| {name} | {node.judged_as} | {_number(metrics['cosine'], 6)} | {_number(metrics['max_abs'])} "
                         f"| {_number(metrics['max_rel'])} | {_number(metrics['within_0_5_percent'])} | {agree} "
                         f"| {markdown_text('; '.join(node.reasons[:2]))} |")
        if len(failing) > limit:
            lines.append(f"| ... {len(failing) - limit} more | | | | | | | |")
    else:
        worst = min(parity.nodes, key=lambda node: node.metrics["cosine"] if node.metrics["cosine"] is not None else 1.0,
                    default=None)
        if worst is not None and worst.metrics["cosine"] is not None:
            lines.append(f"Lowest cosine {_number(worst.metrics['cosine'], 6)} at {markdown_code(worst.name)}, "
                         f"max abs error {_number(worst.metrics['max_abs'])} (judged as {worst.judged_as}).")
    return lines + [""]


def _training_section(training) -> list[str]:
    verdict = "curves agree" if training.passed else f"curves diverge from step {training.first_divergent_step}"
    return [
        "## Training", "",
        f"{training.steps} steps, {verdict} (judged as {training.judged_as}: loss within "
        f"{training.tolerance['loss_rel']:g}, gradient norm within {training.tolerance['grad_norm_rel']:g}, relative).",
        f"Largest loss difference {_number(max(training.loss_rel_diff, default=0.0))}, largest gradient-norm difference "
        f"{_number(max(training.grad_norm_rel_diff, default=0.0))}. Final loss: reference "
        f"{_number(training.reference_loss[-1] if training.reference_loss else None, 5)}, target "
        f"{_number(training.target_loss[-1] if training.target_loss else None, 5)}.", "",
    ]


def _performance_section(result) -> list[str]:
    reference, target = result.performance["reference"], result.performance["target"]
    unit = result.cost.unit["name"].replace("_", " ") if result.cost else "samples"
    lines = ["## Performance", "",
             f"| batch | side | warm-up s | compilations | p50 ms | p95 ms | p99 ms | {unit}/s | peak memory |",
             "|---|---|---|---|---|---|---|---|---|"]
    for reference_batch in reference.batches:
        for side_name, batch in (("reference", reference_batch), ("target", target.at(reference_batch.batch_size))):
            if batch is None:
                continue
            compilations = "-" if batch.compilations is None else str(batch.compilations)
            lines.append(f"| {batch.batch_size} | {side_name} | {batch.warmup_seconds:.3f} | {compilations} "
                         f"| {batch.p50_ms:.3f} | {batch.p95_ms:.3f} | {batch.p99_ms:.3f} | {batch.units_per_second:.4g} "
                         f"| {format_bytes(batch.peak_memory_bytes)} |")
    for side_name, side in (("reference", reference), ("target", target)):
        for batch in side.batches:
            if batch.peak_memory_bytes is None:
                lines.append(f"- peak memory not measured on {side_name} at batch {batch.batch_size}: {batch.memory_note}")
    for check in result.performance_checks:
        lines.append(f"- {'ok' if check.passed else 'FAILED'}: {check.message}")
    lines.append("")
    if result.cost is not None:
        lines += ["## Cost", "", result.cost.summary or "No cost computed.",
                  f"Prices from {markdown_code(str(result.cost.price_source))} (example on-demand prices; edit the table for yours).", ""]
    return lines


def render_markdown(result, failing_rows: int = 10) -> str:
    """The summary as Markdown."""
    lines = [f"# torchport compare: {_STATUS_MARK[result.status]}", "",
             f"Model {markdown_code(str(result.model))}, reference {markdown_code(str(result.reference))}, "
             f"target {markdown_code(str(result.target))}, seed {result.seed}.", ""]
    if result.reasons:
        lines += [f"- {markdown_text(reason)}" for reason in result.reasons] + [""]
    if result.parity is not None:
        lines += _parity_section(result.parity, failing_rows)
    if result.training is not None:
        lines += _training_section(result.training)
    if result.performance:
        lines += _performance_section(result)
    if result.baseline is not None:
        lines += ["## Against the baseline", "", f"Baseline: {markdown_code(str(result.baseline))}."]
        lines += [f"- {markdown_text(regression.message)}" for regression in result.regressions] or ["- no regressions"]
        lines.append("")
    return "\n".join(lines)


def write_markdown(result, path: str | Path) -> Path:
    """Write the summary to `path` atomically."""
    path = Path(path)
    from torchport.fileio import atomic_write

    atomic_write(path, render_markdown(result))
    return path
