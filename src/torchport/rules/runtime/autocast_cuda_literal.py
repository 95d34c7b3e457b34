"""TP209: `torch.autocast('cuda')` / `GradScaler('cuda')` / `device_type='cuda'`."""

from __future__ import annotations

import ast

from torchport.fix import neutral
from torchport.rules.base import Example, Fix, FixSafety, PythonRule, Severity
from torchport.rules.context import PythonContext, keyword_argument
from torchport.rules.patterns import is_cuda_string, neutral_fix

__all__ = ["AutocastCudaLiteral"]

_AMP_CALLEES = {"torch.autocast", "torch.amp.autocast", "torch.amp.GradScaler", "torch.GradScaler"}


class AutocastCudaLiteral(PythonRule):
    """Mixed precision pinned to the `'cuda'` device type.

    **What it does**: finds `torch.autocast('cuda')`, `torch.amp.autocast(device_type='cuda')` and
    `torch.amp.GradScaler('cuda')`.

    **Why it matters**: off CUDA, autocast warns and turns itself off, and the scaler disables
    itself: training silently runs in float32 (slower, and different numerics from the GPU run).

    **Example**:

        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(x)

    **Use instead**: `torch.autocast(device.type, dtype=torch.bfloat16)`.

    **Fix safety**: unsafe. The literal becomes the type of the best available device, 'cuda'
    on a CUDA machine; elsewhere mixed precision runs on the local accelerator or the CPU (CPU
    autocast computes in bfloat16 or float16), instead of turning itself off. An autocast without a
    dtype gets `dtype=torch.float16`, CUDA's default, which other devices do not share.
    """

    code = "TP209"
    name = "autocast-cuda-literal"
    message = "Autocast / GradScaler pinned to 'cuda' turns itself off elsewhere"
    fix_title = "Pass the resolved device type: torch.autocast(device.type, ...)"
    severity = Severity.WARNING
    target_severity = Severity.per_fact("accelerator", {False: Severity.INFO})
    fix_safety = FixSafety.UNSAFE
    unsafe_reason = "mixed precision runs on the local accelerator or the CPU instead of switching itself off"
    triggers = (b"autocast", b"GradScaler")
    node_types = (ast.Call,)
    VALID = (
        "import torch\nwith torch.autocast(device.type):\n    pass\n",
        "import torch\nwith torch.autocast('cpu', dtype=torch.bfloat16):\n    pass\n",
    )
    INVALID = (
        Example(
            "import torch\nwith torch.autocast('cuda', dtype=torch.bfloat16):\n    pass\n",
            fixed="import torch\nwith torch.autocast(torch.accelerator.current_accelerator().type if "
            'torch.accelerator.is_available() else "cpu", dtype=torch.bfloat16):\n    pass\n',
        ),
        Example(
            "import torch\nwith torch.amp.autocast(device_type='cuda'):\n    pass\n",
            fixed="import torch\nwith torch.amp.autocast(device_type=torch.accelerator.current_accelerator().type if "
            'torch.accelerator.is_available() else "cpu", dtype=torch.float16):\n    pass\n',
        ),
        "from torch.amp import GradScaler\nscaler = GradScaler('cuda')\n",
    )

    def check(self, node: ast.Call, context: PythonContext) -> None:
        if context.called(node) not in _AMP_CALLEES:
            return
        keyword = keyword_argument(node, "device_type") or keyword_argument(node, "device")
        value = keyword.value if keyword else (node.args[0] if node.args else None)
        if not is_cuda_string(value):
            return
        bare_type = neutral_fix(context, lambda torch: neutral.device_type(torch, bare=True))
        if "autocast" not in (context.called(node) or "") or keyword_argument(node, "dtype") or len(node.args) > 1:
            context.report(self, value, fix=bare_type)
            return
        # CUDA autocast defaults to float16, other devices' to bfloat16: keep float16 by saying so
        call = context.segment(node)
        replacement = f"{call[:-1].rstrip().rstrip(',')}, dtype={bare_type.replacement.split('.', 1)[0]}.float16)"
        replacement = replacement.replace(context.segment(value), bare_type.replacement, 1)
        context.report(self, node, fix=Fix(FixSafety.UNSAFE, replacement=replacement,
                                           needs_torch_import=bare_type.needs_torch_import))
