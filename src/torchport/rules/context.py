"""Name resolution and the pruned AST walk that drives every Python rule.

Names are resolved through the file's imports, so `th.cuda.synchronize()` after `import torch as
th`, `cuda.synchronize()` after `from torch import cuda` and `amp.autocast()` after `from
torch.cuda import amp` all resolve to their `torch.cuda...` qualified names, while a local
variable that happens to be called `cuda` does not. Imports are tracked per file, in source order
(a later local re-binding of an imported name is not tracked: a known, rare blind spot).

The walk only descends into nodes whose line range holds a line where some rule's trigger
pattern matched; everything else is skipped without being visited. This is what keeps `scan`
faster than a bare `ast.parse` pass on trees that are mostly unrelated to CUDA.
"""

from __future__ import annotations

import ast
from bisect import bisect_left
from typing import TYPE_CHECKING, Iterable

from torchport.rules.base import Finding, Fix

if TYPE_CHECKING:  # pragma: no cover
    from torchport.rules.base import PythonRule, Rule

__all__ = ["PythonContext", "call_name", "string_value", "keyword_argument"]

_LOOP_TYPES = (ast.For, ast.AsyncFor, ast.While)
_SCOPE_TYPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
#: Nodes with nothing below them that any rule looks at.
_LEAF_TYPES = (ast.expr_context, ast.operator, ast.unaryop, ast.cmpop, ast.boolop)


def string_value(node: ast.AST | None) -> str | None:
    """The value of a string constant, else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def keyword_argument(call: ast.Call, name: str) -> ast.keyword | None:
    """The keyword argument `name` of `call`, if given."""
    for keyword in call.keywords:
        if keyword.arg == name:
            return keyword
    return None


def call_name(call: ast.Call) -> str | None:
    """The attribute or function name called (`x.cuda()` -> 'cuda'), unresolved."""
    function = call.func
    if isinstance(function, ast.Attribute):
        return function.attr
    if isinstance(function, ast.Name):
        return function.id
    return None


class PythonContext:
    """Per-file state handed to every Python rule: imports, ancestors, and `report`."""

    def __init__(self, path: str, source: bytes, rules: Iterable["PythonRule"]):
        self.path = path
        self.source = source
        self.aliases: dict[str, str] = {}
        self.stack: list[ast.AST] = []
        self.findings: list[Finding] = []
        self._lines: list[str] | None = None
        self._whole: ast.Module | bool | None = None
        self._dispatch: dict[type, list["PythonRule"]] = {}
        for rule in rules:
            for node_type in rule.node_types:
                self._dispatch.setdefault(node_type, []).append(rule)

    # -- names -------------------------------------------------------------------------------
    def record_import(self, node: ast.Import | ast.ImportFrom) -> None:
        """Bind the names an import statement introduces."""
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    self.aliases[alias.asname] = alias.name
                else:
                    root = alias.name.split(".", 1)[0]
                    self.aliases[root] = root
            return
        if node.level or not node.module:
            return
        for alias in node.names:
            if alias.name == "*":
                continue
            self.aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"

    def qualified_name(self, node: ast.AST) -> str | None:
        """`torch.cuda.synchronize` for any spelling of it; None when the root is not imported."""
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        base = self.aliases.get(node.id)
        if base is None:
            return None
        parts.append(base)
        return ".".join(reversed(parts))

    def called(self, call: ast.Call) -> str | None:
        """The qualified name of the called function."""
        return self.qualified_name(call.func)

    @property
    def torch_name(self) -> str | None:
        """The local name bound to the torch module itself (`torch`, `th`), if any."""
        for local, target in self.aliases.items():
            if target == "torch":
                return local
        return None

    def torch_prefix(self) -> tuple[str, bool]:
        """The name to spell `torch` with in a fix, and whether `import torch` must be added."""
        name = self.torch_name
        return (name, False) if name else ("torch", True)

    # -- structure ---------------------------------------------------------------------------
    def whole(self, node: ast.AST) -> ast.AST | None:
        """`node` as parsed from the whole file. The walk may see a tree parsed from the statements
        that hold a trigger only (line numbers kept); a rule that follows a value through names
        reads the statements that bind them here. None when the file does not parse."""
        if self._whole is None:
            try:
                self._whole = ast.parse(self.source)
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                self._whole = False
        if self._whole is False:
            return None
        if isinstance(node, ast.Module):
            return self._whole
        for item in ast.walk(self._whole):
            if (type(item) is type(node) and getattr(item, "lineno", None) == node.lineno
                    and item.col_offset == node.col_offset):
                return item
        return None

    def binding_scope(self) -> ast.AST | None:
        """The innermost function (or the module) holding the node being checked, as parsed from the
        whole file, where the names a rule follows are bound. None inside a lambda (it binds nothing
        a rule could follow) or when the file does not parse."""
        scope = next((item for item in reversed(self.stack)
                      if isinstance(item, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))), None)
        if scope is None or isinstance(scope, ast.Lambda):
            return None
        return self.whole(scope)

    @staticmethod
    def stores(scope: ast.AST, name: str) -> list[ast.Name]:
        """Every place in `scope` that binds or deletes the plain name `name`."""
        return [item for item in ast.walk(scope)
                if isinstance(item, ast.Name) and item.id == name and not isinstance(item.ctx, ast.Load)]

    def parent(self, depth: int = 1) -> ast.AST | None:
        """The ancestor `depth` levels up (1: the parent)."""
        return self.stack[-depth] if len(self.stack) >= depth else None

    def in_loop(self) -> bool:
        """Whether the node being checked runs inside a for/while loop of its own function."""
        for ancestor in reversed(self.stack):
            if isinstance(ancestor, _LOOP_TYPES):
                return True
            if isinstance(ancestor, _SCOPE_TYPES):
                return False
        return False

    def line_text(self, line: int) -> str:
        """The source line `line` (1-based), decoded."""
        if self._lines is None:
            self._lines = self.source.decode("utf-8", errors="replace").splitlines()
        if 1 <= line <= len(self._lines):
            return self._lines[line - 1]
        return ""

    def segment(self, node: ast.AST) -> str:
        """The exact source text of `node`."""
        start = self._char_column(node.lineno, node.col_offset)
        end = self._char_column(node.end_lineno, node.end_col_offset)
        if node.lineno == node.end_lineno:
            return self.line_text(node.lineno)[start:end]
        pieces = [self.line_text(node.lineno)[start:]]
        pieces += [self.line_text(number) for number in range(node.lineno + 1, node.end_lineno)]
        pieces.append(self.line_text(node.end_lineno)[:end])
        return "\n".join(pieces)

    def _char_column(self, line: int, byte_offset: int) -> int:
        text = self.line_text(line)
        if text.isascii():
            return byte_offset
        return len(text.encode("utf-8")[:byte_offset].decode("utf-8", errors="replace"))

    def report(self, rule: "Rule", node: ast.AST, message: str | None = None, fix: Fix | None = None) -> Finding:
        """Record a finding of `rule` at `node`."""
        line = node.lineno
        end_line = node.end_lineno or line
        finding = Finding(
            code=rule.code,
            path=self.path,
            line=line,
            column=self._char_column(line, node.col_offset),
            end_line=end_line,
            end_column=self._char_column(end_line, node.end_col_offset or 0),
            message=message or rule.message,
            source_line=self.line_text(line).strip(),
            fix=fix,
        )
        self.findings.append(finding)
        return finding

    # -- the walk ----------------------------------------------------------------------------
    def run(self, tree: ast.Module, lines: list[int] | None) -> list[Finding]:
        """Visit `tree`, entering only nodes that span one of `lines` (None: every node)."""
        self._lines_of_interest = lines
        self._visit(tree)
        return self.findings

    def _visit(self, node: ast.AST) -> None:
        # Hot loop: written out by hand (no ast.iter_child_nodes generator) for speed.
        node_type = type(node)
        if node_type is ast.Import or node_type is ast.ImportFrom:
            self.record_import(node)
        rules = self._dispatch.get(node_type)
        if rules:
            for rule in rules:
                rule.check(node, self)
        lines = self._lines_of_interest
        self.stack.append(node)
        for field_name in node._fields:
            value = getattr(node, field_name, None)
            if isinstance(value, list):
                children = value
            elif isinstance(value, ast.AST):
                children = (value,)
            else:
                continue
            for child in children:
                if not isinstance(child, ast.AST) or isinstance(child, _LEAF_TYPES):
                    continue
                if lines is not None:
                    start = getattr(child, "lineno", None)
                    if start is not None:
                        decorators = getattr(child, "decorator_list", None)
                        if decorators:
                            start = decorators[0].lineno
                        index = bisect_left(lines, start)
                        if index == len(lines) or lines[index] > child.end_lineno:
                            continue
                self._visit(child)
        self.stack.pop()
