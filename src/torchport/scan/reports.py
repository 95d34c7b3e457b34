"""Scan reports: text for people, JSON for scripts, SARIF 2.1.0 for code-scanning services."""

from __future__ import annotations

import json
import os
from collections import Counter, defaultdict
from dataclasses import dataclass

from torchport import __version__
from torchport.display import terminal_safe
from torchport.rules.base import TARGETS, Finding, FixSafety, Rule, Severity
from torchport.rules.registry import all_rules

__all__ = ["Report", "build_report", "render_text", "render_json", "render_sarif", "readiness"]

_SARIF_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}
_SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"


@dataclass
class Report:
    """Findings filtered for the chosen rules and target, each with its severity there."""

    findings: list[tuple[Finding, Severity]]
    all_findings: list[Finding]
    not_parsed: dict[str, str]
    files: int
    lines: int
    target: str
    rules: dict[str, type[Rule]]


def build_report(result, codes: set[str], target: str) -> Report:
    """Keep findings of rules in `codes` whose severity on `target` is not off."""
    rules = {rule.code: rule for rule in all_rules()}
    selected = [finding for finding in result.findings if finding.code in codes]
    kept = []
    for finding in selected:
        severity = rules[finding.code].severity_for(target)
        if severity is not Severity.OFF:
            kept.append((finding, severity))
    kept.sort(key=lambda pair: (pair[0].path, pair[0].line, pair[0].column, pair[0].code))
    return Report(kept, selected, dict(result.not_parsed), result.files, result.lines, target, rules)


def readiness(report: Report) -> dict[str, dict]:
    """Per target: counts by severity and a verdict (blocked / needs work / not checked / ready).

    A file that was not parsed was not checked: with one, no target is called ready."""
    verdicts = {}
    for target in TARGETS:
        counts = Counter()
        for finding in report.all_findings:
            severity = report.rules[finding.code].severity_for(target)
            if severity is not Severity.OFF:
                counts[severity.value] += 1
        if counts["error"]:
            verdict = "blocked"
        elif counts["warning"]:
            verdict = "needs work"
        elif report.not_parsed:
            verdict = "not checked"
        else:
            verdict = "ready"
        verdicts[target] = {"verdict": verdict, **{level: counts[level] for level in ("error", "warning", "info")},
                            "not_parsed": len(report.not_parsed)}
    return verdicts


def _fix_counts(report: Report) -> tuple[int, int]:
    safe = sum(1 for finding, _ in report.findings if finding.fix and finding.fix.safety is FixSafety.SAFE)
    unsafe = sum(1 for finding, _ in report.findings if finding.fix and finding.fix.safety is FixSafety.UNSAFE)
    return safe, unsafe


def render_text(report: Report) -> str:
    """Findings grouped by file, with the source line and a fix hint, then the summary."""
    lines: list[str] = []
    by_file: dict[str, list[tuple[Finding, Severity]]] = defaultdict(list)
    for finding, severity in report.findings:
        by_file[finding.path].append((finding, severity))
    for path, items in by_file.items():
        lines.append(terminal_safe(path))
        for finding, severity in items:
            rule = report.rules[finding.code]
            message = terminal_safe(finding.message)
            lines.append(f"  {finding.line}:{finding.column + 1}  {finding.code} {severity.value:<7} {message}")
            if finding.source_line:
                lines.append(f"      | {terminal_safe(finding.source_line)}")
            hint = rule.fix_title
            if finding.fix:
                hint += f"  [{finding.fix.safety.value} fix available]"
            lines.append(f"      fix: {hint}")
        lines.append("")
    if report.not_parsed:
        lines.append(f"Not parsed ({len(report.not_parsed)}):")
        for path, reason in sorted(report.not_parsed.items()):
            lines.append(f"  {terminal_safe(path)}: {terminal_safe(reason)}")
        lines.append("")
    severities = Counter(severity.value for _, severity in report.findings)
    file_count = len(by_file)
    lines.append(
        f"{len(report.findings)} finding{'s' if len(report.findings) != 1 else ''} in {file_count} "
        f"file{'s' if file_count != 1 else ''} ({report.files} files, {report.lines} lines scanned; target: {report.target})"
    )
    if report.not_parsed:
        lines.append(f"  {len(report.not_parsed)} not parsed, so not checked (listed above); --strict makes that exit 1")
    if report.findings:
        lines.append("  by severity: " + ", ".join(f"{level} {severities[level]}" for level in ("error", "warning", "info")))
        lines.append("  by rule:")
        for code, count in Counter(finding.code for finding, _ in report.findings).most_common():
            lines.append(f"    {code} {report.rules[code].name:<30} {count}")
        safe, unsafe = _fix_counts(report)
        lines.append(
            f"  torchport fix can rewrite {safe} automatically"
            + (f"; {unsafe} more with --unsafe-fixes" if unsafe else "")
            + f"; {len(report.findings) - safe - unsafe} need manual changes"
        )
    lines.append("Readiness:")
    for target, row in readiness(report).items():
        marker = " <" if target == report.target else ""
        lines.append(
            f"  {target:<7} {row['verdict']:<11} ({row['error']} errors, {row['warning']} warnings, {row['info']} info"
            f"{', %d not parsed' % row['not_parsed'] if row['not_parsed'] else ''}){marker}"
        )
    return "\n".join(lines) + "\n"


def render_json(report: Report) -> str:
    """A JSON document with findings, files not parsed, summary and readiness."""
    findings = []
    for finding, severity in report.findings:
        rule = report.rules[finding.code]
        data = finding.to_dict()
        data.update(severity=severity.value, rule=rule.name, fix_title=rule.fix_title)
        findings.append(data)
    safe, unsafe = _fix_counts(report)
    document = {
        "tool": "torchport",
        "version": __version__,
        "target": report.target,
        "findings": findings,
        "not_parsed": [{"path": path, "reason": reason} for path, reason in sorted(report.not_parsed.items())],
        "summary": {
            "files": report.files,
            "lines": report.lines,
            "findings": len(report.findings),
            "by_severity": dict(Counter(severity.value for _, severity in report.findings)),
            "by_rule": dict(Counter(finding.code for finding, _ in report.findings)),
            "fixable_safe": safe,
            "fixable_unsafe": unsafe,
        },
        "readiness": readiness(report),
    }
    return json.dumps(document, indent=2) + "\n"


def _uri(path: str) -> str:
    relative = os.path.relpath(path) if os.path.isabs(path) else path
    if relative.startswith(".."):
        return "file://" + os.path.abspath(path).replace(os.sep, "/")
    return relative.replace(os.sep, "/").removeprefix("./")


def render_sarif(report: Report) -> str:
    """SARIF 2.1.0, as GitHub code scanning accepts it."""
    used = sorted({finding.code for finding, _ in report.findings})
    catalogue = [report.rules[code] for code in sorted(report.rules)]
    index = {rule.code: position for position, rule in enumerate(catalogue)}
    rules = []
    for rule in catalogue:
        level = _SARIF_LEVEL.get(rule.severity_for(report.target), "note")
        rules.append(
            {
                "id": rule.code,
                "name": "".join(part.capitalize() for part in rule.name.split("-")),
                "shortDescription": {"text": rule.message},
                "fullDescription": {"text": rule.fix_title},
                "help": {"text": rule.documentation(), "markdown": rule.documentation()},
                "defaultConfiguration": {"level": level},
                "properties": {"tags": ["portability", rule.family()]},
            }
        )
    results = []
    for finding, severity in report.findings:
        region = {"startLine": finding.line, "startColumn": finding.column + 1}
        if finding.end_line >= finding.line:
            region["endLine"] = finding.end_line
            if finding.end_column > 0 and (finding.end_line > finding.line or finding.end_column > finding.column):
                region["endColumn"] = finding.end_column + 1
        results.append(
            {
                "ruleId": finding.code,
                "ruleIndex": index[finding.code],
                "level": _SARIF_LEVEL[severity],
                "message": {"text": f"{finding.message}. {report.rules[finding.code].fix_title}."},
                "locations": [
                    {"physicalLocation": {"artifactLocation": {"uri": _uri(finding.path)}, "region": region}}
                ],
            }
        )
    notifications = [
        {
            "level": "warning",
            "message": {"text": f"not parsed: {reason}"},
            "locations": [{"physicalLocation": {"artifactLocation": {"uri": _uri(path)}}}],
        }
        for path, reason in sorted(report.not_parsed.items())
    ]
    document = {
        "$schema": _SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "torchport",
                        "version": __version__,
                        "rules": rules,
                    }
                },
                "invocations": [{"executionSuccessful": True, "toolExecutionNotifications": notifications}],
                "results": results,
                "properties": {"target": report.target, "rulesUsed": used},
            }
        ],
    }
    return json.dumps(document, indent=2) + "\n"
