"""Follow the data: once a module names its device, the other fixes use that name.

Fixes rewrite one site at a time, so each `.cuda()`, `device='cuda'` or `autocast('cuda')` becomes
the full best-device expression. A hand migration writes that expression once,

    device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else torch.device("cpu")

and uses `device` (or `device.type`) everywhere else. This pass does the same: when the module
binds one global name, once, to the best-device expression (a torch.device) or to the device-type
expression (a str), every other copy of either expression that the name reaches is replaced by it.
Scopes are libcst's: a function that has its own `device` (a parameter, a local) keeps its copies,
and module-level code before the binding keeps its copies too.
"""

from __future__ import annotations

import libcst as cst
from libcst.metadata import GlobalScope, MetadataWrapper, PositionProvider, ScopeProvider

from torchport.fix import neutral

__all__ = ["use_device_name"]


def _normal(code: str) -> str:
    """Code compared without whitespace, quotes style or outer parentheses."""
    text = "".join(code.split()).replace("'", '"')
    while text.startswith("(") and text.endswith(")") and _balanced(text[1:-1]):
        text = text[1:-1]
    return text


def _balanced(text: str) -> bool:
    depth = 0
    for character in text:
        depth += {"(": 1, ")": -1}.get(character, 0)
        if depth < 0:
            return False
    return depth == 0


class _Binding(cst.CSTVisitor):
    """Finds the module-level `NAME = <device expression>` statements."""

    def __init__(self, module: cst.Module, forms: dict[str, str]):
        self.module = module
        self.forms = forms
        self.found: list[tuple[cst.Name, str, cst.Assign]] = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False

    def visit_Assign(self, node: cst.Assign) -> None:
        if len(node.targets) != 1 or not isinstance(node.targets[0].target, cst.Name):
            return
        kind = self.forms.get(_normal(self.module.code_for_node(node.value)))
        if kind is not None:
            self.found.append((node.targets[0].target, kind, node))


class _UseName(cst.CSTTransformer):
    METADATA_DEPENDENCIES = (ScopeProvider, PositionProvider)

    def __init__(self, module: cst.Module, forms: dict[str, str], target: cst.Name, kind: str, binding: cst.Assign,
                 torch: str):
        super().__init__()
        self.module = module
        self.forms = forms
        self.name = target.value
        self.target = target
        self.kind = kind
        self.binding = binding
        self.torch = torch
        self.inside_binding = 0
        self.replaced = 0
        #: argument values that take a device string as well as a torch.device
        self.takes_string: set[int] = set()

    def visit_Call(self, node: cst.Call) -> None:
        function = node.func
        name = function.attr.value if isinstance(function, cst.Attribute) else getattr(function, "value", "")
        if name in ("to", "get_default_backend_for_device", "device"):
            self.takes_string.update(id(argument.value) for argument in node.args)

    def visit_Assign(self, node: cst.Assign) -> None:
        if node is self.binding:
            self.inside_binding += 1

    def _reaches(self, node: cst.CSTNode) -> bool:
        try:
            scope = self.get_metadata(ScopeProvider, node)
            position = self.get_metadata(PositionProvider, node)
            binding_end = self.get_metadata(PositionProvider, self.binding).end.line
        except KeyError:
            return False
        if scope is None:
            return False
        assignments = list(scope[self.name])
        if len(assignments) != 1 or assignments[0].node is not self.target:
            return False
        return not isinstance(scope, GlobalScope) or position.start.line > binding_end

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        # the best device for torch < 2.6 is a torch.device(...) call
        return self.leave_IfExp(original_node, updated_node)

    def leave_IfExp(self, original_node: cst.BaseExpression, updated_node: cst.BaseExpression) -> cst.BaseExpression:
        if self.inside_binding:
            return updated_node
        kind = self.forms.get(_normal(self.module.code_for_node(original_node)))
        if kind is None or not self._reaches(original_node):
            return updated_node
        self.replaced += 1
        if kind == self.kind:
            replacement = self.name
        elif kind == "type":
            replacement = f"{self.name}.type"
        elif id(original_node) in self.takes_string:
            replacement = self.name
        else:
            replacement = f"{self.torch}.device({self.name})"
        return cst.parse_expression(replacement)

    def leave_Assign(self, original_node: cst.Assign, updated_node: cst.Assign) -> cst.Assign:
        if original_node is not self.binding:
            return updated_node
        self.inside_binding -= 1
        # the binding reads as a hand-written one: no parentheses around the whole value
        return updated_node.with_changes(value=updated_node.value.with_changes(lpar=[], rpar=[]))


def use_device_name(source: str, torch: str, floor: neutral.Version | None) -> str:
    """`source` with copies of the device expressions, as written for torch `floor` (None: the
    torch in use), replaced by the module's name for them."""
    forms = {
        _normal(neutral.adapt(neutral.DEVICE.format(torch=torch), floor)): "device",
        _normal(neutral.adapt(neutral.DEVICE_TYPE.format(torch=torch), floor)): "type",
    }
    if not any(form[:20] in "".join(source.split()).replace("'", '"') for form in forms):
        return source
    module = cst.parse_module(source)
    finder = _Binding(module, forms)
    module.visit(finder)
    names = [target.value for target, _, _ in finder.found]
    for target, kind, binding in finder.found:
        if names.count(target.value) != 1:
            continue
        wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
        transformer = _UseName(module, forms, target, kind, binding, torch)
        rewritten = wrapper.visit(transformer)
        if transformer.replaced:
            return rewritten.code
        return source
    return source
