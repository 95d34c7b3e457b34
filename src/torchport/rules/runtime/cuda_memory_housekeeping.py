"""TP219: `torch.cuda.reset_peak_memory_stats()`, `mem_get_info()`, `memory_summary()`, `ipc_collect()`."""

from __future__ import annotations

from torchport.fix.neutral import HELPERS
from torchport.rules.base import Example, FixSafety, Severity
from torchport.rules.runtime.cuda_memory_stats import _CUDA_ONLY, _RESETS, CudaMemoryStats

__all__ = ["CudaMemoryHousekeeping"]


class CudaMemoryHousekeeping(CudaMemoryStats):
    """CUDA memory housekeeping raises on a torch without CUDA.

    **What it does**: finds `torch.cuda.reset_peak_memory_stats()` (and its older names
    `reset_max_memory_allocated()` / `reset_max_memory_cached()`), `mem_get_info()`,
    `memory_summary()` and `ipc_collect()`.

    **Why it matters**: unlike the statistics readers (TP202), which read 0, these raise on a
    torch without CUDA ("Torch not compiled with CUDA enabled", a missing `_cuda_*` function, a
    KeyError in `memory_summary`): a benchmark's `start_timer()` or an end-of-training report stops
    the program.

    **Example**:

        torch.cuda.reset_max_memory_allocated()

    **Use instead**: `torch.accelerator.reset_peak_memory_stats()` and
    `torch.accelerator.get_memory_info()` behind `torch.accelerator.is_available()`.

    **Fix safety**: safe for calls without arguments (identical on CUDA): the resets become
    `torch.accelerator.reset_peak_memory_stats()`, made only when there is an accelerator;
    `mem_get_info()` becomes `torch.accelerator.get_memory_info()`, and the host's free and total
    memory without an accelerator; `memory_summary()` and `ipc_collect()` (CUDA has them,
    torch.accelerator does not) are made only when CUDA is available, giving `""` and `None`
    elsewhere. Calls with a device argument are reported only.
    """

    code = "TP219"
    name = "cuda-memory-housekeeping"
    message = "CUDA memory housekeeping call raises without CUDA"
    fix_title = "Use torch.accelerator's counterpart behind torch.accelerator.is_available() (or CUDA's behind its check)"
    severity = Severity.ERROR
    target_severity = {}
    fix_safety = FixSafety.SAFE
    triggers = (b"reset_peak_memory_stats", b"reset_max_memory_", b"memory_summary", b"mem_get_info", b"ipc_collect")
    callees = frozenset(f"torch.cuda.{name}" for name in (*_RESETS, *_CUDA_ONLY, "mem_get_info"))
    VALID = (
        "import torch\ntorch.accelerator.reset_peak_memory_stats() if torch.accelerator.is_available() else None\n",
        "import torch\nprint(torch.cuda.memory_summary() if torch.cuda.is_available() else '')\n",
    )
    INVALID = (
        Example(
            "import torch\ntorch.cuda.reset_peak_memory_stats()\n",
            fixed="import torch\ntorch.accelerator.reset_peak_memory_stats() if torch.accelerator.is_available() else None\n",
        ),
        Example(
            "import torch\ntorch.cuda.reset_max_memory_allocated()\n",
            fixed="import torch\ntorch.accelerator.reset_peak_memory_stats() if torch.accelerator.is_available() else None\n",
        ),
        Example(
            "import torch\nprint(torch.cuda.memory_summary())\n",
            fixed='import torch\nprint(torch.cuda.memory_summary() if torch.cuda.is_available() else "")\n',
        ),
        Example(
            "import torch\nfree, total = torch.cuda.mem_get_info()\n",
            fixed="import torch\n\n\n" + HELPERS["_host_memory_info"].code + "\n\nfree, total = "
            "torch.accelerator.get_memory_info() if torch.accelerator.is_available() else _host_memory_info()\n",
        ),
        Example(
            "import torch\ntorch.cuda.ipc_collect()\n",
            fixed="import torch\ntorch.cuda.ipc_collect() if torch.cuda.is_available() else None\n",
        ),
        "import torch\nfree, total = torch.cuda.mem_get_info(device)\n",
    )
