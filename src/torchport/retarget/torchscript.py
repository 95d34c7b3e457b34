"""TorchScript of application code lands on the target.

`torch.jit.script` compiles a function or module from its original source (`inspect.getsource`),
not from the rewritten module, so `torch.zeros(3, device="cuda")` in a scripted application function
would reach torch as CUDA. TorchScript tells whoever registered its emit hooks about every function
and module it has just compiled, before anything runs; for those whose source is the application's,
the graph is mapped where its values leave the application for torch, as in rewritten Python code:

- a `Device` constant of type cuda (`device="cuda"`, `torch.device("cuda:1")`, `x.to("cuda")`)
  becomes the target device;
- `torch.device("cuda", i)` (`aten::device` of the constant "cuda") becomes the target's;
- `x.cuda()` becomes `x.to(<target>)`;
- `x.is_cuda` reads whether `x` is on the target, as `x.is_cuda` does in rewritten code.

TorchScript resolves the names a scripted function uses through its globals, where `torch` is the
application's facade: a facade callable whose real counterpart is a TorchScript builtin
(`torch.device`) is registered as that builtin, so the compiler sees PyTorch's own operator and the
graph is then mapped like any other.

The hooks of whoever set them before (torch's own test utilities) still run first. Traced code
needs nothing: tracing runs the rewritten Python, so the trace records the target's devices. An
archive the application loads (`torch.jit.load`), traced or scripted on a GPU machine, has its
graphs mapped as it loads (`map_loaded`).
A device string computed at run time inside scripted code (a `str` argument or default) is not
seen: pass a `torch.device`, which the application's `torch.device('cuda')` already makes the
target's. The mapped graph is what `torch.jit.save` writes: the archive runs on the target.
"""

from __future__ import annotations

import atexit
import re

import torch

from torchport.retarget import state
from torchport.retarget.report import Site
from torchport.retarget.state import _CUDA_STRING

__all__ = ["install", "map_graph", "map_loaded"]

_SOURCE_FILE = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')
_installed = False


def install() -> None:
    """Register the emit hooks (once per process), keeping any hooks already set."""
    global _installed
    if _installed:
        return
    _installed = True
    previous_module_hook, previous_function_hook = torch._C._jit_get_emit_hooks()

    def module_hook(module) -> None:
        if previous_module_hook is not None:
            previous_module_hook(module)
        retarget = state.current()
        if retarget is not None:
            for name in module._method_names():
                map_graph(module._get_method(name).graph, retarget)

    def function_hook(function) -> None:
        if previous_function_hook is not None:
            previous_function_hook(function)
        retarget = state.current()
        if retarget is not None:
            map_graph(function.graph, retarget)

    torch._C._jit_set_emit_hooks(module_hook, function_hook)
    # The hooks are Python objects held by a C++ static: hand them back before the interpreter
    # is torn down (as torch's own test utilities do), or freeing them then crashes the process.
    atexit.register(torch._C._jit_set_emit_hooks, previous_module_hook, previous_function_hook)
    _register_facade_builtins()
    _annotate_facades_as_torch_types()


def _register_facade_builtins() -> None:
    """Each facade callable standing for a TorchScript builtin compiles as that builtin."""
    import sys

    from torch.jit import _builtins

    from torchport.retarget import proxy

    facades = proxy._facades
    if facades is None:
        return
    for name, facade in facades.by_name.items():
        real = sys.modules.get(name)
        if real is None:
            continue
        for attribute, value in vars(facade).items():
            original = getattr(real, attribute, None)
            if original is None or original is value or not callable(value):
                continue
            builtin = _builtins._find_builtin(original)
            if builtin is not None:
                _builtins._register_builtin(value, builtin)


def _annotate_facades_as_torch_types() -> None:
    """A facade class in an annotation (`dev: torch.device`, `Optional[torch.Generator]`, read through
    the application's torch) is the torch type it stands for, as TorchScript knows it. TorchScript
    resolves annotations in `torch.jit.annotations.try_ann_to_type` (recursively, through that
    module's globals); it is wrapped to look through the facade classes only, so every other
    annotation, the libraries' included, resolves as before."""
    from torch.jit import annotations

    original = annotations.try_ann_to_type
    if getattr(original, "_torchport_wrapped", False):
        return

    def try_ann_to_type(ann, loc, rcb=None):
        real = ann.__dict__.get("_torchport_real") if isinstance(ann, type) else None
        return original(real if isinstance(real, type) else ann, loc, rcb)

    try_ann_to_type._torchport_wrapped = True
    annotations.try_ann_to_type = try_ann_to_type


def _location(node) -> tuple[str, int] | None:
    match = _SOURCE_FILE.search(node.sourceRange())
    return (match.group("file"), int(match.group("line"))) if match else None


def _application_graph(graph, retarget: state.Retarget) -> bool:
    """True when `graph` was compiled from the application's source (its first located node's file)."""
    for node in graph.nodes():
        location = _location(node)
        if location is not None:
            # asked each time (a graph is compiled once): the scope may have been widened since
            return retarget.in_scope(location[0])
    return False


def map_graph(graph, retarget: state.Retarget) -> int:
    """Map `graph` in place when it is the application's; returns how many values were mapped."""
    if retarget.type == "cuda" or not _application_graph(graph, retarget):
        return 0
    mapped = _map_block(graph, graph, retarget)
    if mapped:
        torch._C._jit_pass_constant_pooling(graph)
        torch._C._jit_pass_dce(graph)
    return mapped


def map_loaded(module, retarget: state.Retarget) -> int:
    """Map the graphs of a module the application loaded (`torch.jit.load`), every submodule's methods
    included, as an application graph is mapped: an archive traced on a GPU machine holds its devices
    as constants (`torch.arange(n, device=x.device)` traced there is `device=cuda:0`), which run on the
    GPU there. Returns how many values were mapped."""
    if retarget.type == "cuda":
        return 0
    mapped = 0
    for submodule in module.modules():
        compiled = getattr(submodule, "_c", None)
        if compiled is None:
            continue
        for name in compiled._method_names():
            graph = compiled._get_method(name).graph
            inlined = graph.copy()
            torch._C._jit_pass_inline(inlined)
            if "cuda" not in str(inlined):  # nothing of CUDA's in it or in what it calls: left as loaded
                continue
            # the scripted functions it calls (a helper making positions on 'cuda') are inlined into
            # it, as TorchScript's own optimizing passes do, so their devices are mapped too
            torch._C._jit_pass_inline(graph)
            count = _map_block(graph, graph, retarget)
            if count:
                torch._C._jit_pass_constant_pooling(graph)
                torch._C._jit_pass_dce(graph)
            mapped += count
    return mapped


def _is_cuda_device_constant(value) -> bool:
    node = value.node()
    return (node.kind() == "prim::Constant" and isinstance(value.type(), torch._C.DeviceObjType)
            and value.toIValue().type == "cuda")


def _cuda_string_constant(value) -> str | None:
    """The value of a constant 'cuda' / 'cuda:N' string, else None."""
    if value.node().kind() != "prim::Constant" or not isinstance(value.type(), torch._C.StringType):
        return None
    text = value.toIValue()
    return text if _CUDA_STRING.match(text.strip()) else None


def _redirected(retarget: state.Retarget, node, api: str) -> None:
    """Report a mapped node at its line (or, for the few nodes TorchScript leaves without one, such
    as `prim::is_cuda`, at the nearest line before it)."""
    located = node
    location = _location(located)
    while location is None and located.kind() != "prim::Param":
        located = located.prev()
        location = _location(located)
    if location is not None:
        retarget.redirected(api, Site(location[0], location[1], api))


def _map_block(block, graph, retarget: state.Retarget) -> int:
    """Map the nodes of `block` (and of the blocks nested in it, `if` and loop bodies)."""
    mapped = 0
    for node in list(block.nodes()):
        for inner in node.blocks():
            mapped += _map_block(inner, graph, retarget)
        kind = node.kind()
        if kind == "prim::Constant":
            continue  # replaced where used, so the user's line is known
        replacement = None
        with graph.insert_point_guard(node):
            for index, value in enumerate(node.inputs()):
                if _is_cuda_device_constant(value):
                    node.replaceInput(index, graph.insertConstant(retarget.device(value.toIValue().index)))
                    _redirected(retarget, node, "TorchScript device 'cuda'")
                    mapped += 1
            text = _cuda_string_constant(node.inputsAt(0)) if kind == "aten::device" else None
            if text is not None:
                # torch.device("cuda:1"), torch.device("cuda", i): the target's (the CPU has no index)
                if node.inputsSize() == 1:
                    replacement = graph.insertConstant(torch.device(retarget.map_string(text)))
                elif not retarget.accelerator:
                    replacement = graph.insertConstant(retarget.device())
                else:
                    node.replaceInput(0, graph.insertConstant(retarget.device().type))
                _redirected(retarget, node, "TorchScript torch.device('cuda')")
            elif kind == "aten::cuda" and node.inputsSize() == 1:
                arguments = [node.inputsAt(0), graph.insertConstant(retarget.device()),
                             graph.insertConstant(None), graph.insertConstant(False), graph.insertConstant(False)]
                replacement = graph.insert("aten::to", arguments)
                _redirected(retarget, node, "TorchScript .cuda()")
            elif kind == "prim::is_cuda":
                device = graph.insert("prim::device", [node.inputsAt(0)])
                device_type = graph.insert("prim::type", [device])
                replacement = graph.insert("aten::eq", [device_type, graph.insertConstant(retarget.type)])
                _redirected(retarget, node, "TorchScript .is_cuda")
        if replacement is not None:
            replacement.node().copyMetadata(node)
            node.output().replaceAllUsesWith(replacement)
            node.destroy()
            mapped += 1
    return mapped
