"""Placement: which ATen ops of a captured graph the target runs, and host partitions for the rest.

Each node of the graph Dynamo captured is replayed on its fake example values under a dispatch
mode that records the ATen ops it lowers to. An op the target's profile marks `unsupported` or
`fallback` places its node on the host; consecutive nodes with the same placement form one
partition (torch.fx's split_module). Target partitions are compiled with the target's compiler,
once per input shape (static-shape compilers); host partitions run eagerly on the CPU, their inputs
copied there and their outputs copied back.
"""

from __future__ import annotations

import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

from torchport.compile.report import HOST, TARGET, CompileReport

__all__ = ["node_ops", "place_nodes", "partitioned", "shape_signature"]


class _OpRecorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not func.name().startswith("prim::"):
            self.ops.append(func.name())
        return func(*args, **(kwargs or {}))


def _example(value):
    if isinstance(value, torch.fx.Node):
        return value.meta.get("example_value", value.meta.get("val"))
    return value


def node_ops(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> list[str] | None:
    """The ATen ops `node` runs, replayed on its fake example values; None when it cannot be replayed."""
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.utils._pytree import tree_leaves

    args = torch.fx.node.map_aggregate(node.args, _example)
    kwargs = torch.fx.node.map_aggregate(node.kwargs, _example)
    # The mode of the inputs' fake values (a node's own example value may belong to another).
    modes = [leaf.fake_mode for leaf in tree_leaves((args, kwargs)) if isinstance(leaf, FakeTensor)]
    if not modes:
        # No tensor operands: shape arithmetic and assertions on sizes, run by Python.
        return []
    fake_mode = modes[0]
    recorder = _OpRecorder()
    try:
        with fake_mode, recorder:
            if node.op == "call_function":
                node.target(*args, **kwargs)
            elif node.op == "call_method":
                getattr(args[0], node.target)(*args[1:], **kwargs)
            elif node.op == "call_module":
                graph_module.get_submodule(node.target)(*args, **kwargs)
    except Exception:
        return None
    return list(dict.fromkeys(recorder.ops))


def place_nodes(graph_module: torch.fx.GraphModule, profile, report: CompileReport) -> dict[torch.fx.Node, str]:
    """{node: 'target' | 'host'} for every call node; records each op's placement in `report`."""
    placement: dict[torch.fx.Node, str] = {}
    previous = TARGET
    for node in graph_module.graph.nodes:
        if node.op not in ("call_function", "call_method", "call_module"):
            continue
        ops = node_ops(graph_module, node)
        if ops == []:
            # Shape arithmetic stays with the node before it: no partition boundary of its own.
            placement[node] = previous
            continue
        if ops is None:
            label = f"{node.op}:{getattr(node.target, '__name__', node.target)}"
            report.place(label, TARGET, "not checked: could not replay the node to list its ATen ops")
            placement[node] = TARGET
            continue
        where = TARGET
        for op in ops:
            rule = profile.op_rule(op) if profile is not None else None
            if rule is not None and rule.status in ("unsupported", "fallback"):
                where = HOST
                report.place(op, HOST, f"{rule.status} on {profile.name}: {rule.reason}")
            else:
                report.place(op, TARGET, "native" if profile is not None else "no profile: assumed native")
        placement[node] = previous = where
    return placement


def shape_signature(values) -> tuple:
    """A hashable key of tensor shapes/dtypes/devices and plain values: one compilation per key."""
    parts = []
    for value in values:
        if isinstance(value, torch.Tensor):
            parts.append((tuple(value.shape), value.dtype, value.device.type, value.requires_grad))
        elif isinstance(value, (int, float, bool, str)) or value is None:
            parts.append(value)
        else:
            parts.append(type(value).__name__)
    return tuple(parts)


class _TargetPartition(torch.nn.Module):
    """A partition compiled by the target's compiler, once per input shape signature."""

    def __init__(self, module: torch.nn.Module, compiler_fn, report: CompileReport) -> None:
        super().__init__()
        self.module = module
        self.compiler_fn = compiler_fn
        self.report = report
        self.compiled: dict[tuple, object] = {}

    def forward(self, *args):
        key = shape_signature(args)
        compiled = self.compiled.get(key)
        if compiled is None:
            started = time.perf_counter()
            compiled = self.compiler_fn(self.module, list(args))
            self.report.compiled(key, time.perf_counter() - started)
            self.compiled[key] = compiled
        return compiled(*args)


class _HostPartition(torch.nn.Module):
    """A partition run eagerly on the CPU: inputs copied to the host, outputs copied back."""

    def __init__(self, module: torch.nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, *args):
        devices = [value.device for value in args if isinstance(value, torch.Tensor)]
        device = devices[0] if devices else torch.device("cpu")
        if device.type == "cpu":
            return self.module(*args)
        host_args = tree_map(lambda value: value.cpu() if isinstance(value, torch.Tensor) else value, args)
        result = self.module(*host_args)
        return tree_map(lambda value: value.to(device) if isinstance(value, torch.Tensor) else value, result)


def partitioned(graph_module: torch.fx.GraphModule, placement: dict, compiler_fn, report: CompileReport):
    """The graph split into target and host partitions, ready to call with the graph's inputs."""
    from torch.fx.passes.split_module import split_module

    partition_of: dict[torch.fx.Node, int] = {}
    index = 0
    previous = None
    for node in graph_module.graph.nodes:
        if node not in placement:
            continue
        if previous is not None and placement[node] != previous:
            index += 1
        previous = placement[node]
        partition_of[node] = index
    where_of = {partition_of[node]: placement[node] for node in partition_of}
    split = split_module(graph_module, None, lambda node: partition_of[node], keep_original_order=True)
    for name, child in list(split.named_children()):
        if not name.startswith("submod_"):
            continue
        number = int(name[len("submod_"):])
        if where_of.get(number) == HOST:
            setattr(split, name, _HostPartition(child))
        else:
            setattr(split, name, _TargetPartition(child, compiler_fn, report))
    return split
