"""What code `torch.compile` traces makes of torchport's own functions."""

from __future__ import annotations

__all__ = ["constant_in_compiled_code"]


def constant_in_compiled_code(function):
    """Mark `function` to be called once at trace time, its result held as a constant in the compiled
    code, as `torch.compiler.assume_constant_result` marks it, without importing Dynamo (about a
    second of the program's start) to do so: the mark is the attribute Dynamo reads."""
    function._dynamo_marked_constant = True
    return function
