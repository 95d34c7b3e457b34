"""The one precision vocabulary of `run`, `check` and `compare`: a word means the same thing everywhere.

Each command supports the policies that make sense for it (`run` rewrites a program's autocast,
`compare` applies a policy to one side of a comparison, `check` always keeps the program's dtypes),
but no word means one thing to one command and another thing to another. Old spellings keep
working with a deprecation message that names the replacement.

    from torchport.precision import resolve
    resolve("bfloat16", "compare")   # 'bf16'
    resolve("fp32", "compare")       # 'no-fp64', with a FutureWarning: use 'no-fp64'
"""

from __future__ import annotations

import warnings

from torchport.errors import UsageError

__all__ = ["POLICIES", "SYNONYMS", "DEPRECATED", "SUPPORTED", "resolve", "spellings", "describe", "by_policy"]

#: Every policy word and what it means, wherever it is accepted.
POLICIES: dict[str, str] = {
    "keep": "run the dtypes the code asks for: its autocast as written, float64 kept",
    "auto": "CUDA's float16 autocast runs in the target's preferred precision (off where that is float32)",
    "bf16": "autocast in bfloat16",
    "fp16": "autocast in float16",
    "fp32": "autocast off: compute in float32 where the code asked for autocast; float64 kept",
    "no-fp64": "float64 parameters, buffers and inputs become float32 first, as on targets without fp64; "
               "autocast as written",
}

#: Other spellings of the same policy (not deprecated).
SYNONYMS: dict[str, str] = {
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "native": "keep",
    "default": "keep",
    "none": "keep",
}

#: Old spellings that meant something else in one command: {spelling: {command: replacement}}.
#: `compare` used to read 'fp32'/'float32' as "no float64", while `run` reads 'fp32' as "autocast off".
DEPRECATED: dict[str, dict[str, str]] = {
    "fp32": {"compare": "no-fp64"},
    "float32": {"compare": "no-fp64"},
}

#: The policies each command supports.
SUPPORTED: dict[str, tuple[str, ...]] = {
    "run": ("keep", "auto", "bf16", "fp32"),
    "check": ("keep",),
    "compare": ("keep", "no-fp64", "bf16", "fp16"),
}


def spellings(command: str, deprecated: bool = False) -> list[str]:
    """The spellings `command` accepts: its policies and their synonyms (and, with `deprecated`,
    the old spellings it still takes)."""
    supported = SUPPORTED[command]
    words = [*supported, *(word for word, policy in SYNONYMS.items() if policy in supported)]
    if deprecated:
        words += [word for word, commands in DEPRECATED.items() if command in commands]
    return words


def by_policy(command: str) -> dict[str, tuple[str, ...]]:
    """{policy: (every spelling of it that `command` accepts, deprecated ones included)}."""
    table: dict[str, tuple[str, ...]] = {}
    for policy in SUPPORTED[command]:
        words = [policy, *(word for word, target in SYNONYMS.items() if target == policy)]
        words += [word for word, commands in DEPRECATED.items() if commands.get(command) == policy]
        table[policy] = tuple(words)
    return table


def describe(command: str) -> str:
    """One line per policy `command` supports, for help texts."""
    return "; ".join(f"{word}: {POLICIES[word]}" for word in SUPPORTED[command])


def resolve(text: str, command: str) -> str:
    """The policy word `text` names for `command`; a deprecated spelling warns (FutureWarning) and
    names its replacement; an unknown one raises UsageError with the allowed words."""
    key = str(text).strip().lower()
    replacement = DEPRECATED.get(key, {}).get(command)
    if replacement is not None:
        warnings.warn(
            f"torchport {command}: precision {text!r} is deprecated; use {replacement!r} "
            f"({POLICIES[replacement]}). Elsewhere {key!r} means: {POLICIES.get(key, 'nothing')}.",
            FutureWarning,
            stacklevel=3,
        )
        return replacement
    policy = SYNONYMS.get(key, key)
    if policy in SUPPORTED[command]:
        return policy
    where = [name for name, supported in SUPPORTED.items() if policy in supported]
    elsewhere = f" ({policy!r} is a policy of {', '.join(where)}, not of {command})" if where else ""
    raise UsageError(
        f"Unknown precision policy {text!r} for {command}{elsewhere}. Allowed: {', '.join(spellings(command))}. "
        f"Meanings: {describe(command)}."
    )
