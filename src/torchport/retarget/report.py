"""What the retargeting runtime did: redirected CUDA usages, unsupported ones, precision decisions.

Counting is one dict increment per mapped call; call sites come from the rewriter (static ids) or,
for the torch.cuda facade, from the caller's frame.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from dataclasses import dataclass, field

from torchport.display import terminal_safe

__all__ = ["Recorder", "Site"]

#: Categories of events, in the order the summary prints them.
REDIRECTED = "redirected"
NOOP = "no-op"
UNSUPPORTED = "unsupported"


@dataclass(frozen=True)
class Site:
    """A place in the application's source."""

    filename: str
    lineno: int
    api: str

    def location(self) -> str:
        return f"{self.filename}:{self.lineno}"


@dataclass
class Recorder:
    """Counts events per (category, site) for the report and the exit summary."""

    source: str = "cuda"
    target: str = "cpu"
    precision: str = "auto"
    counts: Counter = field(default_factory=Counter)
    decisions: dict[str, str] = field(default_factory=dict)
    decision_kinds: dict[str, str] = field(default_factory=dict)
    #: Decisions about a library, reported only if the program imported one of these modules.
    decision_modules: dict[str, tuple[str, ...]] = field(default_factory=dict)
    messages: dict[tuple[str, Site], str] = field(default_factory=dict)
    #: Rewritten call sites and their hit counts, kept as two parallel lists by the runtime so a
    #: hit costs one list increment; merged into `counts` when the report is made.
    site_table: tuple[list, list] | None = None
    #: The application's roots (real paths) and why each was chosen; paths taken out with --no-scope.
    scope: dict[str, str] = field(default_factory=dict)
    not_in_scope: list[str] = field(default_factory=list)
    #: `torchport run --compile`: (model name, compile report) pairs, appended as models are compiled;
    #: None when the run does not compile.
    compiled_models: list | None = None
    #: A Python child the application started (`torchport run --child`): its stderr is the application's
    #: (captured, parsed), so the exit summary is not printed there; the parent's report names the child.
    silent: bool = False
    #: Spawned child processes whose records were added (`absorb`).
    children: int = 0

    def add(self, category: str, site: Site, message: str = "") -> None:
        key = (category, site)
        self.counts[key] += 1
        if message and key not in self.messages:
            self.messages[key] = message

    def decide(self, topic: str, decision: str, kind: str = "precision", modules: tuple[str, ...] = ()) -> None:
        """Record a decision once per topic. `kind` says what it is about: "precision" (the precision
        policy), "device" (a backend's or a library's device setup), "adapted" (a CUDA-only request
        adapted from a profile fact). A decision about a library names its `modules`: it is reported
        only if the program imported one of them (a setting for a library the program never used is
        not news)."""
        if topic not in self.decisions:
            self.decisions[topic] = decision
            self.decision_kinds[topic] = kind
            if modules:
                self.decision_modules[topic] = tuple(modules)

    def _reported(self, topic: str) -> bool:
        modules = self.decision_modules.get(topic)
        return modules is None or any(module in sys.modules for module in modules)

    # -- output ------------------------------------------------------------------------------
    def all_counts(self) -> Counter:
        """Facade events plus hits of rewritten call sites."""
        counts = Counter(self.counts)
        if self.site_table is not None:
            sites, hits = self.site_table
            for site, count in zip(sites, hits):
                if count:
                    counts[(REDIRECTED, site)] += count
        return counts

    def export(self) -> dict:
        """What `absorb` takes: the counts per site and the decisions, as JSON values."""
        counts = self.all_counts()
        return {
            "counts": [[category, site.filename, site.lineno, site.api, count, self.messages.get((category, site), "")]
                       for (category, site), count in counts.items()],
            "decisions": [[topic, decision, self.decision_kinds.get(topic, "precision"),
                           list(self.decision_modules.get(topic, ()))] for topic, decision in self.decisions.items()],
            "children": self.children,
        }

    def absorb(self, data: dict) -> None:
        """Add another process's records (a spawned child's `export`) to this one's."""
        for category, filename, lineno, api, count, message in data.get("counts", ()):
            key = (category, Site(filename, lineno, api))
            self.counts[key] += count
            if message and key not in self.messages:
                self.messages[key] = message
        for topic, decision, kind, modules in data.get("decisions", ()):
            self.decide(topic, decision, kind, tuple(modules))
        self.children += 1 + data.get("children", 0)

    def to_dict(self) -> dict:
        events: dict[str, list[dict]] = {REDIRECTED: [], NOOP: [], UNSUPPORTED: []}
        counts = self.all_counts()
        for (category, site), count in sorted(
            counts.items(), key=lambda item: (item[0][0], item[0][1].filename, item[0][1].lineno)
        ):
            entry = {"api": site.api, "site": site.location(), "count": count}
            message = self.messages.get((category, site))
            if message:
                entry["message"] = message
            events.setdefault(category, []).append(entry)
        by_api: Counter = Counter()
        for (category, site), count in counts.items():
            if category == REDIRECTED:
                by_api[site.api] += count
        return {
            "schema": "torchport.run-report/1",
            "source": self.source,
            "target": self.target,
            "precision_policy": self.precision,
            "redirected_by_api": dict(sorted(by_api.items())),
            "redirected": events[REDIRECTED],
            "noops": events[NOOP],
            "unsupported": events[UNSUPPORTED],
            "precision_decisions": {topic: decision for topic, decision in self.decisions.items()
                                    if self.decision_kinds.get(topic) == "precision" and self._reported(topic)},
            "decisions": [{"kind": self.decision_kinds.get(topic, "precision"), "topic": topic, "decision": decision}
                          for topic, decision in self.decisions.items() if self._reported(topic)],
            "scope": [{"root": root, "why": why} for root, why in self.scope.items()],
            "not_in_scope": list(self.not_in_scope),
            "child_processes": self.children,
            **({} if self.compiled_models is None else
               {"compile": [{"model": name, **report.to_dict()} for name, report in self.compiled_models]}),
        }

    def write(self, path: str) -> None:
        """Write the JSON report atomically (nothing half-written on failure).

        Under torchrun with several processes each rank writes its own file: `report.rank1.json`.
        """
        world_size = int(os.environ.get("WORLD_SIZE", "1") or 1)
        if world_size > 1:
            stem, extension = os.path.splitext(path)
            path = f"{stem}.rank{os.environ.get('RANK', '0')}{extension}"
        from torchport.fileio import atomic_write

        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        atomic_write(path, json.dumps(self.to_dict(), indent=2) + "\n")

    def summary(self) -> str:
        data = self.to_dict()
        redirected = sum(entry["count"] for entry in data["redirected"])
        sites = len(data["redirected"])
        lines = [
            f"torchport: {self.source} -> {self.target}: {redirected} CUDA usage(s) redirected "
            f"at {sites} site(s); {len(data['noops'])} no-op site(s); "
            f"{len(data['unsupported'])} unsupported site(s)"
            + (f" (with {self.children} spawned child process(es))" if self.children else "")
        ]
        for entry in data["unsupported"][:5]:
            lines.append(f"  unsupported: {entry['api']} at {entry['site']}: {entry.get('message', '')}")
        if len(data["unsupported"]) > 5:
            lines.append(f"  unsupported: {len(data['unsupported']) - 5} more site(s), every one in the JSON report "
                         "(--report FILE)")
        for entry in data["decisions"]:
            label = f"precision ({self.precision})" if entry["kind"] == "precision" else entry["kind"]
            lines.append(f"  {label}: {entry['topic']}: {entry['decision']}")
        lines += self._compile_lines()
        # Paths, API names, messages and model names come from the application: one inert line each.
        return "\n".join(terminal_safe(line) for line in lines)

    def _compile_lines(self) -> list[str]:
        """The compile block: totals, then per model its compilations, bucket hits, host fallbacks,
        compile time, and what was not compiled or not padded and why."""
        if self.compiled_models is None:
            return []
        if not self.compiled_models:
            return ["  compile: no model was moved to the device by the application's code; nothing compiled"]
        reports = [report for _, report in self.compiled_models]
        host = sorted({entry.op for report in reports for entry in report.host_ops()})
        lines = [
            f"  compile: {len(reports)} model(s), {sum(r.compilations for r in reports)} compilation(s) in "
            f"{sum(r.compile_seconds for r in reports):.1f} s, {sum(r.bucket_hits for r in reports)} bucket hit(s), "
            f"{len(host)} op(s) on the host"
            + (f", {sum(1 for r in reports if r.failure)} model(s) not compiled" if any(r.failure for r in reports) else "")
        ]
        for name, report in self.compiled_models:
            lines.append(
                f"    {name}: {report.compilations} compilation(s) with {report.compiler} for {report.target} in "
                f"{report.compile_seconds:.1f} s over {report.calls} call(s); {report.bucket_hits} bucket hit(s), "
                f"{report.padded_calls} padded; {report.eager_calls} eager call(s)"
            )
            if report.failure:
                lines.append(f"      not compiled, runs eagerly: {report.failure}")
            for entry in report.host_ops():
                lines.append(f"      on the host: {entry.op} ({entry.reason})")
            for label, decision in report.bucketing.items():
                if not decision["padded"]:
                    lines.append(f"      dimension {label} not padded: {decision['reason']}")
        return lines

    def print_summary(self, stream=None) -> None:
        if os.environ.get("TORCHPORT_QUIET") or self.silent:
            return
        if os.environ.get("RANK", "0") != "0":
            return
        sys.stdout.flush()
        text = self.summary()
        world_size = os.environ.get("WORLD_SIZE", "1")
        if world_size.isdigit() and int(world_size) > 1:
            # a rank may reach what rank 0 does not (its own data, its own branch): said, not hidden
            text += (f"\n  rank 0 of {world_size}: the other ranks print no summary; what each recorded goes to "
                     "its own report with --report FILE (FILE.rankN.json)")
        print(text, file=stream or sys.stderr)
