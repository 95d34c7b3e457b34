"""Apply the rules' fixes to Python source with libcst, keeping formatting and comments.

Detection reuses the scan engine (stdlib `ast`, name resolution); each fixable finding names a
source span, and the libcst transformer replaces exactly the node at that span, so everything
else in the file, comments and whitespace included, stays byte-for-byte the same. Fixes are
applied until nothing changes (a fix nested inside another one lands on the next round), which
also makes a second `torchport fix` run a no-op.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field

import libcst as cst
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor
from libcst.metadata import MetadataWrapper, PositionProvider

from torchport.fix import neutral
from torchport.fix.dataflow import use_device_name
from torchport.rules.base import Finding, FixSafety, PythonRule, Rule
from torchport.rules.engine import analyze_python
from torchport.rules.registry import all_rules

__all__ = ["FixResult", "fix_source", "unified_diff", "unsafe_reason", "manual_reason", "MAX_ROUNDS"]

#: Rounds of detect-and-rewrite before giving up on reaching a fixed point.
MAX_ROUNDS = 8


@dataclass
class FixResult:
    """The outcome of fixing one file."""

    path: str
    original: str
    fixed: str
    applied: list[Finding] = field(default_factory=list)
    unsafe_skipped: int = 0
    remaining: list[Finding] = field(default_factory=list)
    error: str | None = None

    @property
    def changed(self) -> bool:
        """Whether the fixed text differs from the original."""
        return self.fixed != self.original


class _SpanRewriter(cst.CSTTransformer):
    """Replace the node at each finding's span by the finding's fix."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, findings: list[Finding], rules: dict[str, PythonRule], floor: neutral.Version | None = None):
        super().__init__()
        self.floor = floor
        self.pending: dict[tuple[int, int, int, int], Finding] = {}
        for finding in findings:
            key = (finding.line, finding.column, finding.end_line, finding.end_column)
            self.pending.setdefault(key, finding)
        self.rules = rules
        self.applied: list[Finding] = []

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode):
        if not self.pending or not isinstance(original_node, (cst.BaseExpression, cst.BaseSmallStatement)):
            return updated_node
        try:
            position = self.get_metadata(PositionProvider, original_node)
        except KeyError:
            return updated_node
        key = (position.start.line, position.start.column, position.end.line, position.end.column)
        finding = self.pending.get(key)
        if finding is None or finding.fix is None:
            return updated_node
        fix = finding.fix
        if fix.statement != isinstance(original_node, cst.BaseSmallStatement):
            return updated_node
        del self.pending[key]
        self.applied.append(finding)
        if fix.edit:
            return self.rules[finding.code].transform(updated_node, finding)
        text = neutral.written(fix.replacement, fix.legacy, self.floor)
        if fix.statement:
            return cst.parse_statement(text).body[0]
        replacement = cst.parse_expression(text)
        if isinstance(updated_node, cst.BaseExpression) and updated_node.lpar:
            replacement = replacement.with_changes(lpar=updated_node.lpar, rpar=updated_node.rpar)
        return replacement


def _rewrite(
    source: str, findings: list[Finding], rules: dict[str, PythonRule], floor: neutral.Version | None
) -> tuple[str, list[Finding]]:
    module = cst.parse_module(source)
    rewriter = _SpanRewriter(findings, rules, floor)
    rewritten = MetadataWrapper(module).visit(rewriter)
    helpers = [neutral.HELPERS[name] for name in dict.fromkeys(f.fix.helper for f in rewriter.applied if f.fix.helper)]
    modules = {module for finding in rewriter.applied for module in finding.fix.imports}
    if any(finding.fix.needs_torch_import for finding in rewriter.applied):
        modules.add("torch")
    if modules:
        context = CodemodContext()
        for module in sorted(modules):
            AddImportsVisitor.add_needed_import(context, module)
        rewritten = AddImportsVisitor(context).transform_module(rewritten)
    for helper in helpers:
        rewritten = _with_helper(rewritten, helper)
    return rewritten.code, rewriter.applied


def _with_helper(module: cst.Module, helper: neutral.Helper) -> cst.Module:
    """`module` with `helper` defined after its leading docstring and imports, unless it has it."""
    body = list(module.body)
    for statement in body:
        if isinstance(statement, (cst.ClassDef, cst.FunctionDef)) and statement.name.value == helper.name:
            return module
    index = 0
    while index < len(body) and _is_preamble(body[index]):
        index += 1
    definition = cst.parse_statement(helper.code)
    two_blank_lines = [cst.EmptyLine(), cst.EmptyLine()]
    definition = definition.with_changes(leading_lines=two_blank_lines)
    if index < len(body):
        following = body[index]
        comments = [line for line in following.leading_lines if line.comment is not None]
        body[index] = following.with_changes(leading_lines=[*two_blank_lines, *comments])
    body.insert(index, definition)
    return module.with_changes(body=body)


def _is_preamble(statement: cst.CSTNode) -> bool:
    """A module docstring or an import statement."""
    if not isinstance(statement, cst.SimpleStatementLine):
        return False
    for small in statement.body:
        if isinstance(small, (cst.Import, cst.ImportFrom)):
            continue
        if isinstance(small, cst.Expr) and isinstance(small.value, (cst.SimpleString, cst.ConcatenatedString)):
            continue
        return False
    return True


def fix_source(
    source: str, path: str, codes: tuple[str, ...], unsafe: bool = False, legacy: bool = False,
    floor: neutral.Version | None = None,
) -> FixResult:
    """Fix `source` with the rules in `codes`; unsafe fixes only when `unsafe` is true.

    `floor` is the oldest torch (major, minor) the fixed code must run on (None: the torch in use):
    a fix calling a `torch.accelerator` API newer than it is written without `torch.accelerator`
    (`neutral.written`). `legacy` is short for a torch older than 2.6 (no `torch.accelerator`).
    """
    if legacy and (floor is None or floor >= neutral.ACCELERATOR_MIN_VERSION):
        floor = (neutral.ACCELERATOR_MIN_VERSION[0], neutral.ACCELERATOR_MIN_VERSION[1] - 1)
    rules = {rule.code: rule() for rule in all_rules() if rule.code in codes and issubclass(rule, PythonRule)}
    result = FixResult(path, source, source)
    current = source
    for _ in range(MAX_ROUNDS):
        analysis = analyze_python(current.encode("utf-8"), path, codes)
        if analysis.error:
            result.error = analysis.error
            result.fixed = source
            return result
        if neutral.may_write_legacy(floor):
            analysis.findings = _outside_legacy_spellings(current, analysis.findings)
            analysis.findings = [item for item in analysis.findings if not _writes_itself(current, item, floor)]
        wanted = [item for item in analysis.findings if item.fix and (unsafe or item.fix.safety is FixSafety.SAFE)]
        result.remaining = [item for item in analysis.findings if item not in wanted]
        result.unsafe_skipped = sum(
            1 for item in analysis.findings if item.fix and item.fix.safety is FixSafety.UNSAFE and not unsafe
        )
        if not wanted:
            break
        try:
            rewritten, applied = _rewrite(current, wanted, rules, floor)
        except cst.ParserSyntaxError as error:
            result.error = f"libcst cannot parse it: {str(error).splitlines()[0]}"
            result.fixed = source
            return result
        if rewritten == current or not applied:
            break
        result.applied.extend(applied)
        current = rewritten
    if result.applied:
        current = use_device_name(current, _torch_name(current), floor)
    result.fixed = current
    return result


def _outside_legacy_spellings(source: str, findings: list[Finding]) -> list[Finding]:
    """The findings that do not start inside a legacy spelling a fix wrote (its `torch.cuda` calls
    are the point there, on a torch without torch.accelerator)."""
    spans = neutral.legacy_spans(source)
    if not spans:
        return findings
    starts = [0]
    for line in source.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))

    def offset(line: int, column: int) -> int:
        return starts[min(line, len(starts)) - 1] + column

    return [
        item
        for item in findings
        if not any(start <= offset(item.line, item.column) < end for start, end in spans)
    ]


def _writes_itself(source: str, finding: Finding, floor: neutral.Version | None) -> bool:
    """Whether the legacy form of the finding's fix is the text already there (a `torch.cuda` call
    that `adapt` renames back), so that fixing it changes nothing."""
    fix = finding.fix
    if fix is None or fix.replacement is None or fix.statement or fix.edit:
        return False
    lines = source.splitlines(keepends=True)
    if finding.end_line > len(lines):
        return False
    if finding.line == finding.end_line:
        text = lines[finding.line - 1][finding.column:finding.end_column]
    else:
        text = lines[finding.line - 1][finding.column:] + "".join(lines[finding.line:finding.end_line - 1])
        text += lines[finding.end_line - 1][:finding.end_column]
    return neutral.written(fix.replacement, fix.legacy, floor) == text


def _torch_name(source: str) -> str:
    """The name the module imports torch as (`torch` unless `import torch as th`)."""
    match = re.search(r"^[ \t]*import[ \t]+torch[ \t]+as[ \t]+(\w+)", source, re.MULTILINE)
    return match.group(1) if match else "torch"


def _rule_classes() -> dict[str, type[Rule]]:
    return {rule.code: rule for rule in all_rules()}


def unsafe_reason(code: str) -> str:
    """How an unsafe fix of rule `code` changes behaviour, in one line."""
    rule = _rule_classes().get(code)
    reason = getattr(rule, "unsafe_reason", "") if rule else ""
    return reason or "changes behaviour on machines without CUDA (see 'torchport rule " + code + "')"


def manual_reason(code: str) -> str:
    """Why `fix` leaves a finding of rule `code` to a person: the first sentence of the rule's
    "Fix safety" section (the one place the rule documents it)."""
    rule = _rule_classes().get(code)
    if rule is None:
        return "no automatic fix"
    if rule.fix_safety is not None:
        return f"fix rewrites only some forms of this and not these ('torchport rule {code}' lists them)"
    text = rule.documentation().split("**Fix safety**:", 1)[-1].strip()
    text = " ".join(text.split("\n\n", 1)[0].split())
    sentence = text.split(". ", 1)[0].rstrip(".")
    return sentence or "no automatic fix"


def unified_diff(result: FixResult) -> str:
    """A unified diff from the original to the fixed text."""
    return "".join(
        difflib.unified_diff(
            result.original.splitlines(keepends=True),
            result.fixed.splitlines(keepends=True),
            fromfile=f"a/{result.path.lstrip('/')}",
            tofile=f"b/{result.path.lstrip('/')}",
        )
    )
