"""Shared shapes of rules, so that each rule file holds only its facts, docs and examples.

- `CallRule`: calls to functions with given qualified names (`torch.cuda.synchronize`).
- `AttributeRule`: reads of attributes with given qualified names (`torch.version.cuda`).
- `AssignmentRule`: assignments to given qualified names (`torch.backends.cudnn.benchmark = ...`).
- `ImportRule`: imports of given top-level packages (`flash_attn`, `triton`).
- `FileLineRule`: lines of non-Python files matching a pattern.
"""

from __future__ import annotations

import ast
import re
from typing import ClassVar

from torchport.rules.base import Fix, FixSafety, PythonRule, TextRule
from torchport.rules.context import PythonContext

__all__ = [
    "CallRule",
    "AttributeRule",
    "AssignmentRule",
    "ImportRule",
    "FileLineRule",
    "CUDA_DEVICE_STRING",
    "is_cuda_string",
    "SCRIPT_KINDS",
    "torch_fix",
    "neutral_fix",
    "device_literal_fix",
    "guarded_by_availability",
]

#: 'cuda' or 'cuda:N'.
CUDA_DEVICE_STRING = re.compile(r"cuda(:\d+)?")
#: Non-Python files where shell commands and environment variables show up.
SCRIPT_KINDS: tuple[str, ...] = ("shell", "config", "dockerfile", "makefile")


def is_cuda_string(node: ast.AST | None) -> bool:
    """Whether `node` is the string constant 'cuda' or 'cuda:N'."""
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and CUDA_DEVICE_STRING.fullmatch(node.value) is not None
    )


class CallRule(PythonRule):
    """Reports calls to any of `callees`. With `rename_to` set, the fix replaces the called name
    (for example `torch.cuda.synchronize` -> `torch.get_device_module().synchronize`), keeping the
    arguments, comments and formatting of the call as they are."""

    node_types = (ast.Call,)
    callees: ClassVar[frozenset[str]] = frozenset()
    #: Replacement for the called name, spelled after the torch prefix: "accelerator.set_device_index".
    rename_to: ClassVar[dict[str, str]] = {}

    def check(self, node: ast.Call, context: PythonContext) -> None:
        name = context.called(node)
        if name not in self.callees:
            return
        self.report_call(node, name, context)

    def report_call(self, node: ast.Call, name: str, context: PythonContext) -> None:
        """Report one matching call; the default renames the callee when `rename_to` says how."""
        target = self.rename_to.get(name)
        if target is None or self.fix_safety is None:
            context.report(self, node)
            return
        prefix, needs_import = context.torch_prefix()
        fix = Fix(self.fix_safety, replacement=f"{prefix}.{target}", needs_torch_import=needs_import)
        context.report(self, node.func, fix=fix)


class AttributeRule(PythonRule):
    """Reports reads of any of `attributes` (qualified names)."""

    node_types = (ast.Attribute,)
    attributes: ClassVar[frozenset[str]] = frozenset()

    def check(self, node: ast.Attribute, context: PythonContext) -> None:
        if not isinstance(node.ctx, ast.Load):
            return
        if context.qualified_name(node) in self.attributes:
            parent = context.parent()
            if isinstance(parent, ast.Attribute) and context.qualified_name(parent) in self.attributes:
                return
            context.report(self, node)


class AssignmentRule(PythonRule):
    """Reports assignments to any of `targets` (qualified names); `fix_for` may offer a fix."""

    node_types = (ast.Assign,)
    targets: ClassVar[frozenset[str]] = frozenset()

    def check(self, node: ast.Assign, context: PythonContext) -> None:
        for target in node.targets:
            name = context.qualified_name(target)
            if name in self.targets:
                context.report(self, node, fix=self.fix_for(node, name, context))
                return

    def fix_for(self, node: ast.Assign, name: str, context: PythonContext) -> Fix | None:
        """A statement-level fix, or None (the default)."""
        return None


class ImportRule(PythonRule):
    """Reports `import X`, `import X.y` and `from X[.y] import z` for X in `packages`."""

    node_types = (ast.Import, ast.ImportFrom)
    packages: ClassVar[frozenset[str]] = frozenset()

    def check(self, node: ast.Import | ast.ImportFrom, context: PythonContext) -> None:
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif node.level == 0 and node.module:
            modules = [node.module]
        else:
            return
        for module in modules:
            if module.split(".", 1)[0] in self.packages:
                context.report(self, node, message=f"{self.message} (imports {module!r})")
                return


class FileLineRule(TextRule):
    """A TextRule whose `line_pattern` is reported on every matching line."""


def neutral_fix(context: PythonContext, build, safety: FixSafety = FixSafety.UNSAFE) -> Fix:
    """A replacement fix built from the neutral spellings: `build(torch_prefix)` returns the text
    (for example `neutral.device_type`); `import torch` is added when the file lacks it."""
    prefix, needs_import = context.torch_prefix()
    return Fix(safety, replacement=build(prefix), needs_torch_import=needs_import)


def guarded_by_availability(node: ast.AST, context: PythonContext) -> bool:
    """Whether `node` is the value of `node if <...is_available()> else ...`: the form fixes write."""
    parent = context.parent()
    return isinstance(parent, ast.IfExp) and parent.body is node and "is_available" in context.segment(parent.test)


def device_literal_fix(context: PythonContext, node: ast.Constant, bare: bool = False) -> Fix:
    """Unsafe fix of a 'cuda' / 'cuda:N' literal: the best device type, keeping the index on an
    accelerator (a CUDA machine sees the same string) and dropping it on the CPU, which has no
    numbered devices where a device is looked up by name (`torch.load` rejects 'cpu:0')."""
    from torchport.fix import neutral

    index = node.value[len("cuda"):]

    def build(torch: str) -> str:
        if not index:
            return neutral.device_type(torch, bare=bare)
        return neutral.indexed(torch, index, bare=bare)

    return neutral_fix(context, build)


def torch_fix(context: PythonContext, template: str, safety: FixSafety = FixSafety.SAFE) -> Fix:
    """A replacement fix whose text spells torch as the file does: `{torch}` in `template`."""
    prefix, needs_import = context.torch_prefix()
    return Fix(safety, replacement=template.format(torch=prefix), needs_torch_import=needs_import)

