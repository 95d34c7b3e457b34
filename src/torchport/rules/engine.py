"""Run rules over one file's content: prefilter, pruned parse, pruned walk, noqa.

Everything here is a pure function of (content, path, rule codes), so results can be cached
by content hash. No torch, no libcst.
"""

from __future__ import annotations

import ast
import re
import warnings
from bisect import bisect_left
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


def _trigger_positions(source: bytes, triggers: Triggers) -> list[int]:
    """Sorted byte offsets of every trigger, import, and use of a name imported from torch under
    another name (`from torch.cuda import is_available as has_gpu`). Empty when no trigger
    occurs: then no rule can match and the file is not even parsed."""
    positions: list[int] = []
    _find_all(source, triggers.tokens, positions)
    if triggers.pattern is not None:
        positions.extend(match.start() for match in triggers.pattern.finditer(source))
    if not positions:
        return positions
    aliases = {alias for match in _FROM_TORCH_IMPORT.finditer(source) for alias in _AS_ALIAS.findall(match.group(1))}
    _find_all(source, (_IMPORT_TOKEN, *aliases), positions)
    positions.sort()
    return positions


def _lines_of(source: bytes, positions: list[int]) -> list[int]:
    """Sorted, distinct 1-based line numbers of sorted byte offsets."""
    lines: list[int] = []
    line = 1
    previous = 0
    count = source.count
    for position in positions:
        line += count(b"\n", previous, position)
        previous = position
        if not lines or lines[-1] != line:
            lines.append(line)
    return lines


def _trigger_lines(source: bytes, triggers: Triggers) -> list[int]:
    """Sorted 1-based numbers of the lines holding a trigger (see `_trigger_positions`)."""
    return _lines_of(source, _trigger_positions(source, triggers))


#: A line starting at column 0 (or at 4 spaces, in a class or function body) that may begin a
#: statement; continuation clauses of a compound statement are excluded, and decorators are
#: joined to what they decorate below.
_TOP_LEVEL_LINE = re.compile(rb"\n(?!(?:else|elif|except|finally)\b)[A-Za-z_@]")
_MEMBER_LINE = re.compile(rb"\n    (?!(?:else|elif|except|finally)\b)[A-Za-z_@]")
#: An indentation other than multiples of 4 spaces: member runs are not split there.
_ODD_INDENT = re.compile(rb"\n(?: {1,3}|(?: {4})* {1,3}(?! )|[ ]*\t)[^ \t\r\n#]")
_BALANCE_TOKENS = (b'"""', b"'''", b"(", b")", b"[", b"]", b"{", b"}")
_DEFINITIONS = (b"class ", b"def ", b"async def ")


def _runs(source: bytes, begin: int, end: int, pattern: re.Pattern[bytes], skip: int) -> list[int]:
    """Start offsets of runs of whole statements in source[begin:end], found from text alone:
    a run ends only where triple quotes and brackets balance and no backslash continues the
    line, so no run starts inside a string or an open bracket. `skip` is the indentation."""
    count = source.count
    starts = [begin]
    pending = [0] * 8
    previous = begin
    after_decorator = False
    for match in pattern.finditer(source, begin, end):
        start = match.start() + 1
        decorator = source[start + skip] == 0x40
        if after_decorator:
            after_decorator = decorator
            continue
        after_decorator = decorator
        for index, token in enumerate(_BALANCE_TOKENS):
            pending[index] += count(token, previous, start)
        previous = start
        if (
            pending[0] % 2 == 0
            and pending[1] % 2 == 0
            and pending[2] == pending[3]
            and pending[4] == pending[5]
            and pending[6] == pending[7]
            and not source.endswith(b"\\\n", 0, start)
            and not source.endswith(b"\\\r\n", 0, start)
        ):
            starts.append(start)
            pending = [0] * 8
    return starts


def _single_definition(source: bytes, begin: int, end: int) -> bool:
    """Whether source[begin:end] is one class or function, indented by 4 spaces throughout and
    with balanced brackets (so that no string holds a bracket that could mislead `_runs`)."""
    if not source.startswith(_DEFINITIONS, begin):
        return False
    if _TOP_LEVEL_LINE.search(source, begin, end) or _ODD_INDENT.search(source, begin, end):
        return False
    count = source.count
    return (
        count(b"(", begin, end) == count(b")", begin, end)
        and count(b"[", begin, end) == count(b"]", begin, end)
        and count(b"{", begin, end) == count(b"}", begin, end)
    )


def _pruned_source(source: bytes, positions: list[int]) -> bytes | None:
    """`source` with every statement run that holds no trigger blanked out, or None when
    nothing would be. Top-level runs are blanked to their newlines (line numbers stay); in a
    kept class or function, runs of body statements become `pass` and newlines. What the text
    cannot split safely is kept whole; the caller parses the whole file if this does not parse."""
    count = source.count
    if count(b'"""') % 2 or count(b"'''") % 2:
        return None  # a triple quote inside another string or a comment: do not guess
    if b"\r" in source and count(b"\r") != count(b"\r\n"):
        return None  # old Mac line ends: line numbers would not match the parser's
    starts = _runs(source, 0, len(source), _TOP_LEVEL_LINE, 0)
    starts.append(len(source))
    pieces: list[bytes] = []
    blanked = False
    last = len(positions)
    for begin, end in zip(starts, starts[1:]):
        index = bisect_left(positions, begin)
        if index == last or positions[index] >= end:
            pieces.append(b"\n" * count(b"\n", begin, end))
            blanked = True
        elif _single_definition(source, begin, end):
            members = _runs(source, begin, end, _MEMBER_LINE, 4)
            if len(members) < 3:
                pieces.append(source[begin:end])
                continue
            members.append(end)
            pieces.append(source[begin : members[1]])  # the header (and docstring) stays
            for member_begin, member_end in zip(members[1:], members[2:]):
                index = bisect_left(positions, member_begin, index)
                if index < last and positions[index] < member_end:
                    pieces.append(source[member_begin:member_end])
                else:
                    pieces.append(b"    pass" + b"\n" * count(b"\n", member_begin, member_end))
                    blanked = True
        else:
            pieces.append(source[begin:end])
    return b"".join(pieces) if blanked else None


def _suppressed(finding: Finding, line_text: str) -> bool:
    codes = _noqa_codes(line_text)
    return codes is not None and (not codes or finding.code in codes)


@lru_cache(maxsize=64)
def _noqa_codes(line_text: str) -> frozenset[str] | None:
    """The codes a `# noqa` on the line suppresses (empty: all), or None without one. Cached, so
    thousands of findings on one long line read it once, not once each."""
    if "noqa" not in line_text.lower():
        return None
    match = NOQA_PATTERN.search(line_text)
    if match is None:
        return None
    codes = match.group("codes")
    return frozenset(code.strip().upper() for code in codes.split(",")) if codes else frozenset()


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
    positions = _trigger_positions(source, triggers) if triggers is not None else None
    if not positions:
        return result
    lines = _lines_of(source, positions)
    tree = None
    pruned = _pruned_source(source, positions)
    if pruned is not None:
        # Parse only the top-level statements that hold a trigger; anything odd (the parse
        # failing for any reason) falls back to the whole file, which reports the reason.
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                tree = ast.parse(pruned, filename=path)
        except Exception:
            tree = None
    if tree is None:
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
    if kind == "notebook":
        from torchport.notebooks import analyze_notebook

        return analyze_notebook(source, path, codes)
    return analyze_text(source, path, kind, codes)
