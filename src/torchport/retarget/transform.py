"""Rewrite the application's own modules at import time so CUDA placement goes to the target.

Only call sites that can carry a CUDA device are touched; line and column numbers are kept, so
tracebacks point at the user's lines. Everything else (torch.cuda.*, torch.device, amp,
distributed) is handled by the facades the module's `import torch` resolves to.
"""

from __future__ import annotations

import ast

from torchport.retarget import runtime

__all__ = ["rewrite", "compile_source", "REWRITTEN_METHODS", "REWRITTEN_KEYWORDS"]

HELPER = "__tp__"

#: method name -> runtime helper; the receiver becomes the helper's second argument.
REWRITTEN_METHODS = {
    "cuda": "cuda",
    "to": "to",
    "pin_memory": "pin_memory",
    "record_stream": "record_stream",
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
}
#: attributes read through a helper.
REWRITTEN_ATTRIBUTES = {"is_cuda": "is_cuda"}


class _Rewriter(ast.NodeTransformer):
    def __init__(self, filename: str):
        self.filename = filename
        self.count = 0

    def _helper_call(self, helper: str, node: ast.AST, api: str, arguments: list, keywords=()):
        site = runtime.register_site(self.filename, getattr(node, "lineno", 0), api)
        self.count += 1
        function = ast.Attribute(value=ast.Name(id=HELPER, ctx=ast.Load()), attr=helper, ctx=ast.Load())
        if helper == "map_device":  # the hot one: map_device(value, site), no wrapper in between
            call = ast.Call(func=function, args=[*arguments, ast.Constant(site)], keywords=list(keywords))
        else:
            call = ast.Call(func=function, args=[ast.Constant(site), *arguments], keywords=list(keywords))
        return ast.copy_location(call, node)

    def visit_Call(self, node: ast.Call):
        self.generic_visit(node)
        for keyword in node.keywords:
            helper = REWRITTEN_KEYWORDS.get(keyword.arg or "")
            if helper is None or _is_none(keyword.value) or _is_false(keyword.value):
                continue
            keyword.value = self._helper_call(helper, keyword.value, f"{keyword.arg}=", [keyword.value])
        function = node.func
        if isinstance(function, ast.Attribute) and function.attr in REWRITTEN_METHODS:
            receiver = function.value
            # `torch.cuda` the module is not a method call; `x.to` on names like `torch` are left.
            if isinstance(receiver, ast.Name) and receiver.id in {"torch", "nn", "F"}:
                return node
            helper = REWRITTEN_METHODS[function.attr]
            if helper == "to" and node.args and not isinstance(node.args[0], ast.Starred):
                # `x.to(device, ...)`: map the first argument in place and keep the call as written
                # (a dtype or a tensor passes through map_device unchanged).
                node.args[0] = self._helper_call("map_device", node.args[0], ".to()", [node.args[0]])
                return node
            if helper == "to" and not any(isinstance(argument, ast.Starred) for argument in node.args) \
                    and all(keyword.arg is not None for keyword in node.keywords):
                return node  # keywords only: `device=` was mapped above
            return self._helper_call(helper, node, f".{function.attr}()", [receiver, *node.args], node.keywords)
        return node

    def visit_Attribute(self, node: ast.Attribute):
        self.generic_visit(node)
        helper = REWRITTEN_ATTRIBUTES.get(node.attr)
        if helper is not None and isinstance(node.ctx, ast.Load):
            return self._helper_call(helper, node, f".{node.attr}", [node.value])
        return node


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


def compile_source(source: bytes | str, filename: str):
    """Parse, rewrite and compile a module's source (a SyntaxError is raised as Python would)."""
    tree = ast.parse(source, filename=filename)
    tree, _ = rewrite(tree, filename)
    return compile(tree, filename, "exec", dont_inherit=True)
