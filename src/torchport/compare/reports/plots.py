"""Plots of a comparison as inline SVG markup (matplotlib, from the `report` extra)."""

from __future__ import annotations

import io
import re

__all__ = ["plots_available", "render_plots"]

_REFERENCE_COLOR = "#1f77b4"
_TARGET_COLOR = "#d62728"


def plots_available() -> bool:
    """True when matplotlib can be imported."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _svg(figure, plot_id: str) -> str:
    import matplotlib.pyplot as pyplot

    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    pyplot.close(figure)
    markup = buffer.getvalue()
    markup = markup[markup.index("<svg"):]
    # One id per plot, so a page (and a test) can find each; matplotlib's own ids stay inside.
    return re.sub(r"<svg ", f'<svg id="{plot_id}" class="plot" role="img" ', markup, count=1)


def _layer_error(parity):
    import matplotlib.pyplot as pyplot

    nodes = [node for node in parity.nodes if node.kind == "module"]
    figure, (error_axis, cosine_axis) = pyplot.subplots(2, 1, figsize=(9, 5.5), sharex=True)
    positions = list(range(len(nodes)))
    errors = [max(node.metrics["max_abs"] or 0.0, 1e-16) for node in nodes]
    allowed = [node.thresholds["max_abs"] for node in nodes]
    colors = [_TARGET_COLOR if not node.passed else _REFERENCE_COLOR for node in nodes]
    error_axis.bar(positions, errors, color=colors)
    error_axis.plot(positions, allowed, color="black", linestyle="--", linewidth=1, label="max abs limit (scale 1)")
    error_axis.set_yscale("log")
    error_axis.set_ylabel("max abs error")
    error_axis.legend(loc="upper left", fontsize=8)
    cosine_axis.plot(positions, [node.metrics["cosine"] if node.metrics["cosine"] is not None else 1.0 for node in nodes],
                     marker="o", markersize=3, color=_REFERENCE_COLOR)
    cosine_axis.set_ylabel("cosine similarity")
    for position, node in enumerate(nodes):
        if node.first_divergence:
            for axis in (error_axis, cosine_axis):
                axis.axvline(position, color=_TARGET_COLOR, linestyle=":", linewidth=1.5)
            error_axis.set_title(f"Per-layer error (first divergence: {node.name})", fontsize=10)
    if not parity.first_divergence:
        error_axis.set_title("Per-layer error", fontsize=10)
    cosine_axis.set_xticks(positions)
    cosine_axis.set_xticklabels([node.name for node in nodes], rotation=90, fontsize=6)
    return figure


def _latency(performance):
    import matplotlib.pyplot as pyplot

    figure, axis = pyplot.subplots(figsize=(9, 3.5))
    labels, series, colors = [], [], []
    for side_name, color in (("reference", _REFERENCE_COLOR), ("target", _TARGET_COLOR)):
        for batch in performance[side_name].batches:
            labels.append(f"{side_name[:3]} b{batch.batch_size}")
            series.append(batch.latencies_ms or [0.0])
            colors.append(color)
    boxes = axis.boxplot(series, patch_artist=True, showfliers=True)
    axis.set_xticks(range(1, len(labels) + 1))
    axis.set_xticklabels(labels, fontsize=8)
    for box, color in zip(boxes["boxes"], colors):
        box.set_facecolor(color)
        box.set_alpha(0.5)
    axis.set_ylabel("latency (ms)")
    axis.set_title("Latency distribution per batch size", fontsize=10)
    return figure


def _throughput(performance, unit_name: str):
    import matplotlib.pyplot as pyplot

    figure, axis = pyplot.subplots(figsize=(6, 3.5))
    for side_name, color in (("reference", _REFERENCE_COLOR), ("target", _TARGET_COLOR)):
        side = performance[side_name]
        axis.plot([batch.batch_size for batch in side.batches], [batch.units_per_second for batch in side.batches],
                  marker="o", color=color, label=f"{side_name} ({side.device})")
    axis.set_xscale("log", base=2)
    axis.set_xlabel("batch size")
    axis.set_ylabel(f"{unit_name.replace('_', ' ')} / s")
    axis.legend(fontsize=8)
    axis.set_title("Throughput vs batch size", fontsize=10)
    return figure


def _training(training):
    import matplotlib.pyplot as pyplot

    figure, (loss_axis, norm_axis) = pyplot.subplots(1, 2, figsize=(9, 3.5))
    steps = list(range(training.steps))
    for values, norms, label, color in ((training.reference_loss, training.reference_grad_norm, "reference", _REFERENCE_COLOR),
                                        (training.target_loss, training.target_grad_norm, "target", _TARGET_COLOR)):
        loss_axis.plot(steps, values, color=color, label=label, linestyle="-" if label == "reference" else "--")
        norm_axis.plot(steps, norms, color=color, label=label, linestyle="-" if label == "reference" else "--")
    loss_axis.set_title("Loss per step", fontsize=10)
    norm_axis.set_title("Gradient norm per step", fontsize=10)
    for axis in (loss_axis, norm_axis):
        axis.set_xlabel("step")
        axis.legend(fontsize=8)
    return figure


def render_plots(result) -> dict[str, str]:
    """{plot id: inline SVG} for every plot the result has data for; empty without matplotlib."""
    if not plots_available():
        return {}
    import matplotlib

    matplotlib.use("Agg", force=True)
    plots = {}
    if result.parity is not None and result.parity.nodes:
        plots["plot-layer-error"] = _svg(_layer_error(result.parity), "plot-layer-error")
    if result.performance:
        unit_name = result.cost.unit["name"] if result.cost else "samples"
        plots["plot-latency"] = _svg(_latency(result.performance), "plot-latency")
        plots["plot-throughput"] = _svg(_throughput(result.performance, unit_name), "plot-throughput")
    if result.training is not None and result.training.steps:
        plots["plot-training"] = _svg(_training(result.training), "plot-training")
    return plots
