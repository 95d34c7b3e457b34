"""The preflight report: verdict, ranked fixes, and the census in text, JSON and self-contained HTML."""

from __future__ import annotations

import json
from dataclasses import dataclass

import jinja2

from torchport.check.bucketing import BucketSuggestion
from torchport.check.census import Census
from torchport.display import terminal_safe
from torchport.fileio import atomic_write

__all__ = ["Report", "build_report"]

# Autoescaped: paths, the workload and call sites come from the user's files and must not become markup.
_HTML = jinja2.Environment(autoescape=True).from_string(
    """<!doctype html><html><head><meta charset="utf-8"><title>torchport check: {{ d.target.title }}</title>
<style>body{font-family:sans-serif;margin:2em;max-width:70em}table{border-collapse:collapse}
td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}.blocked{color:#b00}.ready{color:#070}
.warnings{color:#a60}code{font-size:90%}</style></head><body>
<h1>Preflight for {{ d.target.title }}</h1>
<p>Workload: <code>{{ d.workload }}</code>. Verdict: <b class="{{ d.verdict.split()[0] }}">{{ d.verdict }}</b></p>
<h2>Fixes, most important first</h2><ol>{% for fix in d.fixes %}<li><b>{{ fix.problem }}</b>: {{ fix.action }}</li>{% endfor %}</ol>
<h2>Ops</h2><table><tr><th>op</th><th>calls</th><th>status</th><th>call sites</th></tr>
{% for op in d.ops %}<tr><td><code>{{ op.name }}</code></td><td>{{ op.count }}</td><td>{{ op.status }}</td>
<td>{% for site in op.sites %}<code>{{ site }}</code><br>{% endfor %}</td></tr>{% endfor %}</table>
<h2>Shapes and compilations</h2><pre>{{ d.shapes | tojson(indent=2) }}</pre>
<h2>Dtypes</h2><pre>{{ d.dtypes | tojson(indent=2) }}</pre>
<h2>Host syncs</h2><pre>{{ d.host_syncs | tojson(indent=2) }}</pre>
<h2>Memory</h2><pre>{{ d.memory | tojson(indent=2) }}</pre>
{% if d.not_checked %}<h2>Not checked</h2><ul>
{% for item in d.not_checked %}<li>{{ item.what }}: {{ item.why }}</li>{% endfor %}</ul>{% endif %}
{% if d.not_emulated %}<h2>Not emulated yet (not checked; emulator gaps, not target facts)</h2><ul>
{% for gap in d.not_emulated %}<li><code>{{ gap.op }}</code> x{{ gap.count }}: {{ gap.what }}</li>{% endfor %}</ul>{% endif %}
</body></html>"""
)


@dataclass
class Report:
    """A preflight report; `data` is the JSON document."""

    data: dict

    @property
    def verdict(self) -> str:
        """'ready', 'ready with warnings' or 'blocked: ...'."""
        return self.data["verdict"]

    def json(self) -> str:
        """The report as JSON."""
        return json.dumps(self.data, indent=2, default=str)

    def html(self) -> str:
        """The report as one self-contained HTML page (no external assets)."""
        return _HTML.render(d=self.data)

    def text(self) -> str:
        """The report for a terminal (names from the program are shown with control characters escaped)."""
        return "\n".join(terminal_safe(line) for line in self._lines())

    def _lines(self) -> list[str]:
        data = self.data
        lines = [f"torchport check: {data['workload']} on {data['target']['title']} (emulated)",
                 f"verdict: {data['verdict']}", ""]
        if data["fixes"]:
            lines.append("fixes, most important first:")
            lines += [f"  {index}. {fix['problem']}: {fix['action']}" for index, fix in enumerate(data["fixes"], 1)]
            lines.append("")
        counts = data["op_status_counts"]
        lines.append(f"ops: {sum(counts.values())} calls ({', '.join(f'{key} {value}' for key, value in sorted(counts.items()))})")
        for op in data["ops"][:15]:
            site = f"  at {op['sites'][0]}" if op["status"] != "native" and op["sites"] else ""
            lines.append(f"  {op['count']:>7}  {op['status']:<11} {op['name']}{site}")
        shapes = data["shapes"]
        lines.append(
            f"shapes: {shapes['predicted_compilations']} predicted compilations (graphs), "
            f"{shapes['op_signatures']} op shape signatures, ~{shapes['estimated_compile_seconds']:.0f} s compiling"
        )
        if shapes.get("bucketing"):
            bucketing = shapes["bucketing"]
            for dimension in bucketing["dimensions"]:
                lines.append(f"  {dimension['input']} dim {dimension['dimension']} varies {dimension['observed_sizes']}"
                             f" -> pad to buckets {dimension['buckets']}")
            lines.append(f"  bucketing: {bucketing['distinct_shapes_before']} -> {bucketing['distinct_shapes_after']}"
                         f" compilations (verified: {bucketing['verified_compilations_after']}),"
                         f" padding overhead {bucketing['padding_overhead']:.0%}")
        prediction = shapes.get("compile_prediction")
        if prediction:
            lines.append(f"  torchport.compile: {prediction['without_buckets']} compilation(s) without buckets,"
                         f" {prediction['with_buckets']} with its power-of-two buckets")
        for hazard in data["dtypes"]["downcasts"]:
            lines.append(f"dtype: {hazard['from']} -> {hazard['to']} in {hazard['op']} x{hazard['count']}"
                         f" ({hazard['changed']} changed values)")
        effect = data["dtypes"].get("numeric_effect")
        if effect:
            lines.append(f"  measured effect: max abs error {effect['max_abs_error']:.3g},"
                         f" max rel error {effect['max_rel_error']:.3g}")
        syncs = data["host_syncs"]
        lines.append(f"host syncs: {syncs['total']} ({syncs['per_step']:.1f} per step over {syncs['steps']} steps)")
        for site in syncs["sites"][:5]:
            lines.append(f"  {site['count']:>5}  {site['kind']} at {site['site']}")
        for item in data.get("not_checked", []):
            lines.append(f"not checked: {item['what']}: {item['why']}")
        for gap in data.get("not_emulated", []):
            lines.append(f"not emulated yet (not checked; an emulator gap, not a {data['target']['name']} fact):"
                         f" {gap['op']} x{gap['count']}: {gap['what']}")
        memory = data["memory"]
        lines.append(f"memory: peak {memory['peak_bytes'] / 2**20:.1f} MiB of {memory['target_bytes'] / 2**30:.0f} GiB"
                     f" ({memory['fraction']:.2%})")
        return lines

    def write(self, path: str, output_format: str) -> None:
        """Write the report in `output_format` ('text', 'json' or 'html') to `path`, atomically."""
        content = {"text": self.text, "json": self.json, "html": self.html}[output_format]()
        atomic_write(path, content)


def _fixes(census: Census, data: dict) -> list[dict]:
    profile = census.profile
    fixes = []
    for op in data["ops"]:
        if op["status"] == "unsupported":
            rule = profile.op_rule(op["name"])
            fixes.append({"rank_key": 0, "problem": f"{op['name']} is unsupported on {profile.name} ({rule.reason})",
                          "action": rule.fix or "remove the op from the device code"})
    memory = data["memory"]
    if memory["fraction"] > 0.9:
        fixes.append({"rank_key": 1, "problem": f"peak memory {memory['peak_bytes']} B is {memory['fraction']:.0%} of the device",
                      "action": "shard the model (FSDP), checkpoint activations, or cut the batch size"})
    shapes = data["shapes"]
    if profile.static_shapes and shapes["predicted_compilations"] > 1:
        bucketing = shapes.get("bucketing")
        action = "pad inputs to fixed sizes"
        if bucketing:
            buckets = "; ".join(f"{item['input']} dim {item['dimension']} to {item['buckets']}" for item in bucketing["dimensions"])
            action = (f"pad {buckets}: {bucketing['distinct_shapes_before']} -> "
                      f"{bucketing['distinct_shapes_after']} compilations")
        fixes.append({"rank_key": 2, "problem": f"{shapes['predicted_compilations']} compilations from changing shapes"
                      f" (~{shapes['estimated_compile_seconds']:.0f} s on {profile.name})", "action": action})
    effect = data["dtypes"].get("numeric_effect")
    for hazard in data["dtypes"]["downcasts"]:
        if hazard["changed"]:
            measured = f", outputs off by up to {effect['max_abs_error']:.3g}" if effect else ""
            fixes.append({"rank_key": 3, "problem": f"{hazard['from']} is computed as {hazard['to']} on {profile.name}{measured}",
                          "action": f"use {hazard['to']} explicitly (model.to({hazard['to']})) and check the tolerance"})
            break
    syncs = data["host_syncs"]
    if syncs["per_step"] > 1:
        top = syncs["sites"][0]
        fixes.append({"rank_key": 4, "problem": f"{syncs['per_step']:.1f} host syncs per step (most at {top['site']})",
                      "action": "keep values on the device (accumulate losses as tensors, log every N steps)"})
    fallback_ops = [op for op in data["ops"] if op["status"] == "fallback"]
    if fallback_ops:
        names = ", ".join(op["name"] for op in fallback_ops[:3])
        fixes.append({"rank_key": 5, "problem": f"{len(fallback_ops)} ops fall back to the host ({names})",
                      "action": profile.op_rule(fallback_ops[0]["name"]).fix or "move them out of the step"})
    fixes.sort(key=lambda fix: fix["rank_key"])
    for fix in fixes:
        fix.pop("rank_key")
    return fixes


def not_emulated_verdict(data: dict, forced: str | None) -> str | None:
    """The verdict of a program that stopped at an op the emulated device does not emulate yet.

    Such a stop says nothing about the target, so the program is "not checked" there, never
    "blocked"; None when `forced` (the verdict the program's ending forces) has another cause.
    """
    gaps = data.get("not_emulated")
    if not gaps or not forced or not forced.startswith("blocked: the program failed"):
        return None
    names = ", ".join(gap["op"] for gap in gaps[:3])
    return (f"not checked: the program stopped at {names}, which the emulated device does not emulate yet"
            " (an emulator gap, not a target fact); the report covers what ran before")


def build_report(census: Census, numeric_effect: dict | None, buckets: BucketSuggestion | None, workload: str) -> Report:
    """Turn a census (and the measured downcast effect and bucketing) into a report."""
    profile = census.profile
    ops = sorted(census.ops.values(), key=lambda record: (-record.count, record.name))
    steps = max(census.steps, 1)
    graphs = census.graph_count()
    estimated = graphs * profile.compile_seconds_per_graph if profile.static_shapes else 0.0
    shapes = {
        "static_shapes_required": profile.static_shapes,
        "predicted_compilations": graphs if profile.static_shapes else 0,
        "distinct_graphs": graphs,
        "op_signatures": census.op_signature_count(),
        "estimated_compile_seconds": estimated,
        "compile_cost_model": f"{profile.compile_seconds_per_graph} s per graph ({profile.data['shapes'].get('compile_cost_source', '')})",
        "bucketing": buckets.to_dict() if buckets is not None else None,
    }
    downcasts = [
        {"op": op, "from": wide, "to": narrow, "count": counts[0], "changed": counts[1]}
        for (op, wide, narrow), counts in sorted(census.downcasts.items(), key=lambda item: -item[1][0])
    ]
    sync_sites = [
        {"kind": kind, "site": site, "count": count}
        for (kind, site), count in census.syncs.most_common()
    ]
    data = {
        "workload": workload,
        "target": {"name": profile.name, "title": profile.title, "profile": profile.path},
        "ops": [{"name": record.name, "count": record.count, "status": record.status,
                 "sites": [site for site, _ in record.sites.most_common(3)]} for record in ops],
        "op_status_counts": dict(census.status_counts()),
        "shapes": shapes,
        "dtypes": {"downcasts": downcasts, "numeric_effect": numeric_effect, "refused": profile.refused()},
        "host_syncs": {"total": census.sync_count(), "steps": census.steps, "per_step": census.sync_count() / steps,
                       "sites": sync_sites},
        "memory": {"peak_bytes": census.peak_memory, "target_bytes": profile.memory_bytes,
                   "fraction": census.peak_memory / profile.memory_bytes},
        "transfers_to_host_for_fallbacks": census.transfers,
        # Emulator gaps: what the emulated device could not run, so what this report did not check.
        "not_emulated": [{"op": op, "what": what, "count": count}
                         for (op, what), count in census.not_emulated.most_common()],
        "not_emulated_count": sum(census.not_emulated.values()),
    }
    # What check did not look at (a census recording changed the workload, ...): never silently.
    data["not_checked"] = [dict(item) for item in census.not_checked]
    data["fixes"] = _fixes(census, data)
    unsupported = [op["name"] for op in data["ops"] if op["status"] == "unsupported"]
    if not census.taken:
        why = "; ".join(item["why"] for item in census.not_checked) or "it was not taken"
        data["verdict"] = (f"not checked: the op census was not taken in full ({why}); the workload ran on the "
                           "emulated target, but what it did unrecorded (ops, shapes, syncs) was not looked at")
    elif unsupported or data["memory"]["fraction"] > 1:
        reason = f"unsupported ops {unsupported}" if unsupported else "does not fit in device memory"
        data["verdict"] = f"blocked: {reason}"
    elif data["fixes"]:
        data["verdict"] = "warnings: runs, with the fixes below to apply"
    else:
        data["verdict"] = "ready"
    return Report(data)
