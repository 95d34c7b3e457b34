"""TP207: CUDA graphs."""

from __future__ import annotations

from torchport.rules.base import Severity
from torchport.rules.patterns import CallRule

__all__ = ["CudaGraphs"]


class CudaGraphs(CallRule):
    """CUDA graph capture and replay.

    **What it does**: finds `torch.cuda.CUDAGraph()`, `torch.cuda.graph(...)`,
    `torch.cuda.make_graphed_callables(...)` and `torch.cuda.graph_pool_handle()`.

    **Why it matters**: CUDA graphs have no equivalent API on other devices; the code must be
    reported and given a non-graph path.

    **Example**:

        graph = torch.cuda.CUDAGraph()

    **Use instead**: `torch.compile(model, mode="reduce-overhead")` where the target supports it,
    or run eagerly.

    **Fix safety**: no automatic fix.
    """

    code = "TP207"
    name = "cuda-graphs"
    message = "CUDA graphs have no counterpart on other devices"
    fix_title = "Use torch.compile(mode='reduce-overhead') or run eagerly"
    severity = Severity.ERROR
    triggers = (b"CUDAGraph", b".graph(", b"make_graphed_callables", b"graph_pool_handle")
    callees = frozenset(
        {"torch.cuda.CUDAGraph", "torch.cuda.graph", "torch.cuda.make_graphed_callables", "torch.cuda.graph_pool_handle"}
    )
    VALID = ("import torch\nm = torch.compile(model, mode='reduce-overhead')\n",)
    INVALID = ("import torch\ng = torch.cuda.CUDAGraph()\n", "import torch\nwith torch.cuda.graph(g):\n    pass\n")
