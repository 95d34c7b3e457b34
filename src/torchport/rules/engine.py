"""Run rules over one file's content: prefilter, parse, pruned walk, noqa.

Everything here is a pure function of (content, path, rule codes), so results can be cached
by content hash. No torch, no libcst.
"""

from __future__ import annotations

import ast
import re
import warnings
from dataclasses import dataclass, field
from functools import lru_cache

from torchport.rules.base import Finding, PythonRule, TextContext, TextRule
from torchport.rules.context import PythonContext
from torchport.rules.registry import all_rules

__all__ = ["FileResult", "analyze_python", "analyze_text", "analyze", "NOQA_PATTERN", "python_triggers", "Triggers"]

#: `# noqa` (all codes) or `# noqa: TP101, TP102`.
NOQA_PATTERN = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:\s*,\s*[A-Z]+[0-9]+)*))?", re.IGNORECASE)
_IMPORT_TOKEN = b"import"
_PYTHON2_HINT = re.compile(r"^\s*(print\s+[^\s(=]|exec\s+['\"]|except\s+\w+\s*,\s*\w+\s*:)", re.MULTILINE)


@dataclass
class FileResult:
    """What scanning one file gave: findings, or the reason it was not parsed."""

    path: str
    findings: list[Finding] = field(default_factory=list)
    error: str | None = None
    lines: int = 0


@lru_cache(maxsize=64)
def _python_instances(codes: tuple[str, ...]) -> tuple[PythonRule, ...]:
    return tuple(rule() for rule in all_rules() if rule.code in codes and issubclass(rule, PythonRule))


@lru_cache(maxsize=64)
def _text_instances(codes: tuple[str, ...]) -> tuple[TextRule, ...]:
    return tuple(rule() for rule in all_rules() if rule.code in codes and issubclass(rule, TextRule))


@dataclass(frozen=True)
class Triggers:
    """What makes a Python file (and a line of it) worth walking for a set of rules."""

    tokens: tuple[bytes, ...]
    pattern: re.Pattern[bytes] | None

    def present(self, source: bytes) -> bool:
        """Whether any trigger occurs in `source` (substring search first: it is the fast part)."""
        if any(token in source for token in self.tokens):
            return True
        return self.pattern is not None and self.pattern.search(source) is not None


@lru_cache(maxsize=64)
def python_triggers(codes: tuple[str, ...]) -> Triggers | None:
    """The trigger literals and patterns of the Python rules in `codes` (None: no Python rule)."""
    rules = _python_instances(codes)
    if not rules:
        return None
    tokens = sorted({token for rule in rules for token in rule.triggers}, key=len)
    # A token that contains a shorter token adds nothing to a substring search.
    minimal = tuple(token for index, token in enumerate(tokens) if not any(other in token for other in tokens[:index]))
    patterns = [pattern for rule in rules for pattern in rule.trigger_patterns]
    compiled = re.compile(b"|".join(b"(?:" + pattern + b")" for pattern in patterns)) if patterns else None
    return Triggers(minimal, compiled)


_FROM_TORCH_IMPORT = re.compile(rb"^[ \t]*from[ \t]+torch[\w.]*[ \t]+import[ \t]+([^\n]*)", re.MULTILINE)
_AS_ALIAS = re.compile(rb"\bas[ \t]+(\w+)")


def _find_all(source: bytes, tokens, positions: list[int]) -> None:
    """Append the offset of every occurrence of every token."""
    find = source.find
    for token in tokens:
        position = find(token)
        while position != -1:
            positions.append(position)
            position = find(token, position + 1)


def _trigger_lines(source: bytes, triggers: Triggers) -> list[int]:
    """Sorted 1-based numbers of the lines holding a trigger, an import, or a use of a name
    imported from torch under another name (`from torch.cuda import is_available as has_gpu`).
    Empty when no trigger occurs: then no rule can match and the file is not even parsed."""
    positions: list[int] = []
    _find_all(source, triggers.tokens, positions)
    if triggers.pattern is not None:
        positions.extend(match.start() for match in triggers.pattern.finditer(source))
    if not positions:
        return []
    aliases = {alias for match in _FROM_TORCH_IMPORT.finditer(source) for alias in _AS_ALIAS.findall(match.group(1))}
    _find_all(source, (_IMPORT_TOKEN, *aliases), positions)
    positions.sort()
    lines: list[int] = []
    line = 1
    previous = 0
    for position in positions:
        line += source.count(b"\n", previous, position)
        previous = position
        if not lines or lines[-1] != line:
            lines.append(line)
    return lines


def _suppressed(finding: Finding, line_text: str) -> bool:
    if "noqa" not in line_text.lower():
        return False
    match = NOQA_PATTERN.search(line_text)
    if match is None:
        return False
    codes = match.group("codes")
    if not codes:
        return True
    return finding.code in {code.strip().upper() for code in codes.split(",")}


def _describe_syntax_error(error: SyntaxError, text: str) -> str:
    where = f"line {error.lineno}" if error.lineno else "unknown line"
    reason = f"syntax error at {where}: {error.msg}"
    if _PYTHON2_HINT.search(text):
        reason += " (looks like Python 2 code)"
    return reason


def analyze_python(source: bytes, path: str, codes: tuple[str, ...]) -> FileResult:
    """Findings of the Python rules in `codes` on `source`, or why it could not be parsed."""
    result = FileResult(path, lines=source.count(b"\n") + (1 if source and not source.endswith(b"\n") else 0))
    triggers = python_triggers(codes)
    lines = _trigger_lines(source, triggers) if triggers is not None else None
    if not lines:
        return result
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(source, filename=path)
    except SyntaxError as error:
        result.error = _describe_syntax_error(error, source.decode("utf-8", errors="replace"))
        return result
    except (ValueError, UnicodeDecodeError) as error:
        result.error = f"cannot decode or parse: {error}"
        return result
    except (RecursionError, MemoryError) as error:
        result.error = f"too deeply nested or too large to parse: {type(error).__name__}"
        return result
    context = PythonContext(path, source, _python_instances(codes))
    try:
        findings = context.run(tree, lines)
    except RecursionError:
        result.error = "too deeply nested to analyse (RecursionError)"
        return result
    result.findings = [item for item in findings if not _suppressed(item, context.line_text(item.line))]
    result.findings.sort(key=lambda item: (item.line, item.column, item.code))
    return result


def analyze_text(source: bytes, path: str, kind: str, codes: tuple[str, ...]) -> FileResult:
    """Findings of the non-Python rules in `codes` on a file of `kind`."""
    result = FileResult(path, lines=source.count(b"\n"))
    rules = [rule for rule in _text_instances(codes) if kind in rule.file_kinds]
    if not rules:
        return result
    if b"\0" in source[:8192] and kind != "cuda":
        result.error = "binary file (NUL bytes)"
        return result
    text = source.decode("utf-8", errors="replace")
    context = TextContext(path, text, kind)
    lines = text.splitlines()
    for rule in rules:
        for finding in rule.check_text(context):
            line_text = lines[finding.line - 1] if 0 < finding.line <= len(lines) else ""
            if not _suppressed(finding, line_text):
                result.findings.append(finding)
    result.findings.sort(key=lambda item: (item.line, item.column, item.code))
    return result


def analyze(source: bytes, path: str, kind: str, codes: tuple[str, ...]) -> FileResult:
    """Dispatch on the file kind ('python' or one of the text kinds)."""
    if kind == "python":
        return analyze_python(source, path, codes)
    return analyze_text(source, path, kind, codes)
