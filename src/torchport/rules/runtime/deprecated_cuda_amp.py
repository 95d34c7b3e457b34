"""TP208: `torch.cuda.amp.autocast` / `torch.cuda.amp.GradScaler` (deprecated)."""

from __future__ import annotations

import ast
from typing import Any

from torchport.rules.base import Example, Finding, Fix, FixSafety, Severity
from torchport.rules.context import PythonContext
from torchport.rules.patterns import CallRule

__all__ = ["DeprecatedCudaAmp"]

_FIXABLE = {"torch.cuda.amp.autocast": "autocast", "torch.cuda.amp.GradScaler": "GradScaler"}


class DeprecatedCudaAmp(CallRule):
    """`torch.cuda.amp` is deprecated and CUDA-only.

    **What it does**: finds calls of `torch.cuda.amp.autocast(...)`, `torch.cuda.amp.GradScaler(...)`,
    `custom_fwd` and `custom_bwd`, however imported (`from torch.cuda import amp`,
    `from torch.cuda.amp import autocast`).

    **Why it matters**: off CUDA, autocast only warns and does nothing and GradScaler disables
    itself, so mixed precision silently turns off; PyTorch deprecated the module for `torch.amp`.

    **Example**:

        with torch.cuda.amp.autocast(dtype=torch.bfloat16):
            loss = model(batch)

    **Use instead**: `torch.amp.autocast("cuda", ...)`, then make the device type a variable:
    `torch.amp.autocast(device.type, ...)`.

    **Fix safety**: safe: `torch.amp.autocast("cuda", ...)` and `torch.amp.GradScaler("cuda", ...)`
    are exactly what the deprecated names call (autocast's positional arguments become keywords and
    its float16 default is written out, so that the dtype stays float16 on any device). The remaining 'cuda' is reported by TP209.
    """

    code = "TP208"
    name = "deprecated-cuda-amp"
    message = "torch.cuda.amp is deprecated and CUDA-only"
    fix_title = "Use torch.amp.autocast / torch.amp.GradScaler with a device type"
    severity = Severity.WARNING
    fix_safety = FixSafety.SAFE
    triggers = (b"autocast", b"GradScaler", b"custom_fwd", b"custom_bwd")
    callees = frozenset({*_FIXABLE, "torch.cuda.amp.custom_fwd", "torch.cuda.amp.custom_bwd"})
    VALID = ("import torch\nwith torch.amp.autocast('cuda'):\n    pass\n",)
    INVALID = (
        Example(
            "import torch\nwith torch.cuda.amp.autocast(dtype=torch.bfloat16):  # mixed precision\n    pass\n",
            fixed='import torch\nwith torch.amp.autocast("cuda", dtype=torch.bfloat16):  # mixed precision\n    pass\n',
        ),
        Example(
            "import torch\nfrom torch.cuda import amp\nscaler = amp.GradScaler()\n",
            fixed='import torch\nfrom torch.cuda import amp\nscaler = torch.amp.GradScaler("cuda")\n',
        ),
        Example(
            "from torch.cuda.amp import autocast\nwith autocast(enabled=True):\n    pass\n",
            fixed="from torch.cuda.amp import autocast\nimport torch\n\n"
            'with torch.amp.autocast("cuda", enabled=True, dtype=torch.float16):\n    pass\n',
        ),
        "import torch\n@torch.cuda.amp.custom_fwd(cast_inputs=torch.float32)\ndef f(ctx, x):\n    pass\n",
    )

    def report_call(self, node: ast.Call, name: str, context: PythonContext) -> None:
        if name not in _FIXABLE:
            context.report(self, node)
            return
        prefix, needs_import = context.torch_prefix()
        fix = Fix(
            FixSafety.SAFE,
            replacement=f"{prefix}.amp.{_FIXABLE[name]}",
            edit="add-device-type",
            needs_torch_import=needs_import,
        )
        context.report(self, node, fix=fix)

    def transform(self, node: Any, finding: Finding) -> Any:
        import libcst as cst

        arguments = list(node.args)
        if finding.fix.replacement.endswith(".autocast"):
            arguments = self._autocast_arguments(arguments, finding.fix.replacement.rsplit(".amp.", 1)[0])
        device_argument = cst.Arg(
            value=cst.SimpleString('"cuda"'),
            comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")) if arguments else cst.MaybeSentinel.DEFAULT,
        )
        return node.with_changes(func=cst.parse_expression(finding.fix.replacement), args=[device_argument, *arguments])

    @staticmethod
    def _autocast_arguments(arguments: list, torch: str) -> list:
        """torch.cuda.amp.autocast's positional (enabled, dtype, cache_enabled) as keywords, since
        torch.amp.autocast takes (device_type, dtype, enabled, ...), and its float16 default made
        explicit: CPU autocast would otherwise pick bfloat16."""
        import libcst as cst

        names = ("enabled", "dtype", "cache_enabled")
        no_space = cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))
        converted = []
        for index, argument in enumerate(arguments):
            if argument.keyword is None and not argument.star and index < len(names):
                argument = argument.with_changes(keyword=cst.Name(names[index]), equal=no_space)
            converted.append(argument)
        if not any(argument.keyword is not None and argument.keyword.value == "dtype" for argument in converted):
            if converted:
                converted[-1] = converted[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            dtype = cst.parse_expression(f"{torch}.float16")
            converted.append(cst.Arg(keyword=cst.Name("dtype"), value=dtype, equal=no_space))
        return converted
