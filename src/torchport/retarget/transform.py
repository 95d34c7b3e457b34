"""Rewrite the application's own modules at import time so CUDA placement goes to the target.

Like pytest's assertion rewriting, only the nodes torchport owns are touched and the module keeps
the interpreter's builtins and globals:

- import sites of torch (`import torch`, `from torch.cuda import amp`, `importlib.import_module(
  "torch.cuda")`, `__import__("torch")`) run as written, then bind the facades of what they
  imported, so every way of reaching torch.cuda gives the application one answer;
- imports of CUDA-only packages (triton, flash_attn, ...) are reported, and a failed one raises an
  ImportError that names the alternative;
- calls carrying a device keyword go through `__tp__.call`, which maps the value only when the
  callee belongs to torch or to a distribution that depends on torch (values map where they leave
  the application); `.to()`, `.cuda()`, `.pin_memory()`, `.record_stream()` and `.is_cuda` on
  torch objects likewise.

Line and column numbers are kept, so tracebacks point at the user's lines.
"""

from __future__ import annotations

import ast

from torchport.retarget import runtime
from torchport.retarget.unsupported import cuda_only_packages

__all__ = ["rewrite", "compile_source", "REWRITTEN_METHODS", "REWRITTEN_KEYWORDS"]

HELPER = "__tp__"

#: method name -> runtime helper; the receiver becomes the helper's second argument.
REWRITTEN_METHODS = {
    "cuda": "cuda",
    "to": "to",
    "pin_memory": "pin_memory",
    "record_stream": "record_stream",
    "type": "tensor_type",
}
#: keyword -> runtime helper wrapping its value, in any call.
REWRITTEN_KEYWORDS = {
    "device": "map_device",
    "device_id": "map_device",
    "output_device": "output_device",
    "map_location": "map_location",
    "device_ids": "device_ids",
    "device_map": "device_map",
    "pin_memory": "pin_flag",
    "fused": "fused_flag",
}
#: attributes read through a helper.
REWRITTEN_ATTRIBUTES = {"is_cuda": "is_cuda"}
#: callables whose result is a module: `importlib.import_module(...)`, `__import__(...)`.
IMPORT_FUNCTIONS = {"import_module", "__import__"}


class _Rewriter(ast.NodeTransformer):
    def __init__(self, filename: str):
        self.filename = filename
        self.count = 0

    def _helper_call(self, helper: str, node: ast.AST, api: str, arguments: list, keywords=()):
        site = ast.Constant(runtime.register_site(self.filename, getattr(node, "lineno", 0), api))
        self.count += 1
        if helper == "map_device":  # the hot one: map_device(value, site), no wrapper in between
            return self._helper(helper, [*arguments, site], node, keywords)
        return self._helper(helper, [site, *arguments], node, keywords)

    def _helper(self, helper: str, arguments: list, node: ast.AST, keywords=()) -> ast.Call:
        """`__tp__.helper(*arguments, **keywords)` at `node`'s location."""
        function = ast.Attribute(value=ast.Name(id=HELPER, ctx=ast.Load()), attr=helper, ctx=ast.Load())
        return ast.copy_location(ast.Call(func=function, args=arguments, keywords=list(keywords)), node)

    def _rebind(self, name: str, value: ast.expr, node: ast.stmt) -> ast.stmt:
        statement = ast.Assign(targets=[ast.Name(id=name, ctx=ast.Store())], value=value)
        return ast.copy_location(statement, node)

    def _guard_cuda_only(self, node: ast.stmt, package: str) -> ast.stmt:
        """`import triton` -> try: import triton / except ImportError: report and re-raise, else report."""
        error = "__tp_import_error"
        description = ast.Constant(_describe_import(node))
        failed = ast.Expr(self._helper("cuda_only_import_failed",
                                       [ast.Constant(package), description, ast.Name(id=error, ctx=ast.Load())],
                                       node))
        imported = ast.Expr(self._helper("cuda_only_imported", [ast.Constant(package), description], node))
        handler = ast.ExceptHandler(type=ast.Name(id="ImportError", ctx=ast.Load()), name=error,
                                    body=[ast.copy_location(failed, node)])
        statement = ast.Try(body=[node], handlers=[handler], orelse=[ast.copy_location(imported, node)],
                            finalbody=[])
        return ast.copy_location(statement, node)

    def visit_Import(self, node: ast.Import):
        rebinds = []
        for alias in node.names:
            top = alias.name.partition(".")[0]
            if top in cuda_only_packages():
                return self._guard_cuda_only(node, top)
            if top == "torch":
                bound = alias.asname or top
                value = self._helper("facade", [ast.Name(id=bound, ctx=ast.Load())], node)
                rebinds.append(self._rebind(bound, value, node))
        return [node, *rebinds] if rebinds else node

    def visit_ImportFrom(self, node: ast.ImportFrom):
        if node.level or not node.module:
            return node
        top = node.module.partition(".")[0]
        if top in cuda_only_packages():
            return self._guard_cuda_only(node, top)
        if top != "torch" or any(alias.name == "*" for alias in node.names):
            return node
        rebinds = []
        for alias in node.names:
            bound = alias.asname or alias.name
            value = self._helper("from_import", [ast.Constant(node.module), ast.Constant(alias.name),
                                                 ast.Name(id=bound, ctx=ast.Load())], node)
            rebinds.append(self._rebind(bound, value, node))
        return [node, *rebinds]

    def visit_Call(self, node: ast.Call):
        self.generic_visit(node)
        function = node.func
        name = function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", None)
        if name in IMPORT_FUNCTIONS:
            return self._helper("facade", [node], node)
        # An explicit device keyword, or `**factory_kwargs` that may carry one.
        maps_keywords = any((keyword.arg in REWRITTEN_KEYWORDS and not _is_none(keyword.value)
                             and not _is_false(keyword.value)) or keyword.arg is None for keyword in node.keywords)
        receiver = function.value if isinstance(function, ast.Attribute) else None
        # `torch.cuda(...)`-like module attributes are not method calls on tensors or modules.
        if name in REWRITTEN_METHODS and receiver is not None \
                and not (isinstance(receiver, ast.Name) and receiver.id in {"torch", "nn", "F"}):
            helper = REWRITTEN_METHODS[name]
            if helper == "to" and node.args and not isinstance(node.args[0], ast.Starred) and not maps_keywords:
                # `x.to(device, ...)`: map the first argument in place and keep the call as written
                # (a dtype or a tensor passes through map_device unchanged).
                node.args[0] = self._helper_call("map_device", node.args[0], ".to()", [node.args[0]])
                return node
            if helper == "to" and not node.args and not maps_keywords:
                return node
            return self._helper_call(helper, node, f".{name}()", [receiver, *node.args], node.keywords)
        if maps_keywords:
            # `f(..., device=v)` -> `__tp__.call(f, site, ..., device=v)`: the callee decides.
            site = ast.Constant(runtime.register_site(self.filename, node.lineno, _describe_keywords(node)))
            self.count += 1
            return self._helper("call", [function, site, *node.args], node, node.keywords)
        return node

    def visit_Attribute(self, node: ast.Attribute):
        self.generic_visit(node)
        helper = REWRITTEN_ATTRIBUTES.get(node.attr)
        if helper is not None and isinstance(node.ctx, ast.Load):
            return self._helper_call(helper, node, f".{node.attr}", [node.value])
        return node


def _describe_import(node: ast.stmt) -> str:
    if isinstance(node, ast.ImportFrom):
        return f"from {node.module} import {', '.join(alias.name for alias in node.names)}"
    return "import " + ", ".join(alias.name for alias in node.names)


def _describe_keywords(node: ast.Call) -> str:
    keywords = [f"{keyword.arg}=" for keyword in node.keywords if keyword.arg in REWRITTEN_KEYWORDS]
    keywords += ["**" for keyword in node.keywords if keyword.arg is None]
    return ", ".join(sorted(keywords))


def _is_none(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _is_false(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is False


def rewrite(tree: ast.Module, filename: str) -> tuple[ast.Module, int]:
    """Rewrite `tree` in place; returns it and the number of call sites rewritten."""
    rewriter = _Rewriter(filename)
    tree = rewriter.visit(tree)
    ast.fix_missing_locations(tree)
    return tree, rewriter.count


def compile_source(source: bytes | str, filename: str, extra_passes=()):
    """Parse, rewrite and compile a module's source (a SyntaxError is raised as Python would).

    `extra_passes` are further in-place AST rewrites `(tree, source, filename)`, run after ours.
    """
    tree = ast.parse(source, filename=filename)
    tree, _ = rewrite(tree, filename)
    for extra in extra_passes:
        extra(tree, source, filename)
    return compile(tree, filename, "exec", dont_inherit=True)
