"""The one traversal of nested values compare uses: model outputs, module outputs, inputs and
batches, whatever their structure, flattened with `torch.utils._pytree`.

Tuples, lists, dicts and NamedTuples are pytree nodes already; transformers registers its
`ModelOutput` classes. A dataclass, or a mapping that is not a plain dict (`UserDict`, a tokenizer's
`BatchEncoding`, a dict subclass), is registered here the first time one is met, so its tensors are
seen rather than skipped as one opaque leaf.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Mapping
from typing import Any, Callable

__all__ = ["Flat", "flatten", "flatten_tensors", "map_tensors", "map_tensors_with_paths", "describe_leaf"]

_lock = threading.Lock()
# Classes that could not be registered (registration raised): flattened as opaque leaves.
_refused: set[type] = set()


@dataclasses.dataclass
class Flat:
    """A value flattened: its tensors with their paths, and every other leaf with its type name."""

    tensors: list[tuple[str, Any]]
    others: list[tuple[str, str]]


def _register_dataclass(cls: type) -> None:
    from torch.utils import _pytree as pytree

    names = tuple(field.name for field in dataclasses.fields(cls))

    def flatten_fields(value):
        return [getattr(value, name) for name in names], names

    def flatten_with_keys(value):
        return [(pytree.GetAttrKey(name), getattr(value, name)) for name in names], names

    def unflatten(values, context):
        # Rebuilt without calling __init__/__post_init__: the copy holds the same fields, nothing else runs.
        rebuilt = object.__new__(cls)
        for name, item in zip(context, values):
            object.__setattr__(rebuilt, name, item)
        return rebuilt

    pytree.register_pytree_node(cls, flatten_fields, unflatten, flatten_with_keys_fn=flatten_with_keys)


def _register_mapping(cls: type) -> None:
    from torch.utils import _pytree as pytree

    def flatten_items(value):
        keys = list(value.keys())
        return [value[key] for key in keys], keys

    def flatten_with_keys(value):
        keys = list(value.keys())
        return [(pytree.MappingKey(key), value[key]) for key in keys], keys

    def unflatten(values, context):
        items = dict(zip(context, values))
        try:
            return cls(items)
        except Exception:  # a constructor that does not take a dict: a plain dict holds the same items
            return items

    pytree.register_pytree_node(cls, flatten_items, unflatten, flatten_with_keys_fn=flatten_with_keys)


def _registrar(leaf: Any) -> Callable[[type], None] | None:
    """How to register the class of `leaf` so its contents are traversed, or None when it is a leaf."""
    import torch

    cls = type(leaf)
    if isinstance(leaf, (torch.Tensor, torch.nn.Module, type)) or cls in _refused:
        return None
    if dataclasses.is_dataclass(leaf):
        return _register_dataclass
    if isinstance(leaf, Mapping):
        return _register_mapping
    return None


def _register_unknown(leaves: list[Any]) -> bool:
    """Register the classes among `leaves` that hold values; True when any was registered."""
    from torch.utils import _pytree as pytree

    pending = {type(leaf): registrar for leaf in leaves if (registrar := _registrar(leaf)) is not None}
    if not pending:
        return False
    with _lock:
        for cls, registrar in pending.items():
            if cls in pytree.SUPPORTED_NODES:
                continue
            try:
                registrar(cls)
            except Exception:  # another registry holds it, or its fields cannot be read: keep it a leaf
                _refused.add(cls)
    return True


def _leaves_with_paths(value: Any) -> list[tuple[str, Any]]:
    from torch.utils import _pytree as pytree

    # Each round registers the containers found among the leaves; nesting depth bounds the rounds.
    for _ in range(64):
        try:
            pairs = [(pytree.keystr(path), leaf) for path, leaf in pytree.tree_flatten_with_path(value)[0]]
        except ValueError:  # a node registered elsewhere without key paths: index paths instead
            pairs = [(f"[{index}]", leaf) for index, leaf in enumerate(pytree.tree_leaves(value))]
        if not _register_unknown([leaf for _, leaf in pairs]):
            return pairs
    return pairs


def describe_leaf(leaf: Any) -> str:
    """The type name of a leaf that is not a tensor, as a report shows it."""
    return type(leaf).__qualname__


def flatten(value: Any) -> Flat:
    """Every leaf of `value`: tensors (with paths like `.logits` or `[0]['mask']`) and the other
    values but None."""
    import torch

    tensors, others = [], []
    for path, leaf in _leaves_with_paths(value):
        if isinstance(leaf, torch.Tensor):
            tensors.append((path, leaf))
        elif leaf is not None:  # an absent value (attention weights not asked for) holds nothing to compare
            others.append((path, describe_leaf(leaf)))
    return Flat(tensors, others)


def flatten_tensors(value: Any) -> list[tuple[str, Any]]:
    """Every tensor inside `value`, whatever its structure, with its path."""
    return flatten(value).tensors


def map_tensors(function: Callable[[Any], Any], value: Any) -> Any:
    """`value` with `function` applied to every tensor inside, the structure kept."""
    import torch
    from torch.utils import _pytree as pytree

    _leaves_with_paths(value)  # registers the containers inside, so tree_map reaches every tensor
    return pytree.tree_map_only(torch.Tensor, function, value)


def map_tensors_with_paths(function: Callable[[str, Any], Any], value: Any) -> Any:
    """`value` with `function(path, tensor)` applied to every tensor inside (paths as `flatten`
    names them), the structure kept."""
    import torch
    from torch.utils import _pytree as pytree

    if isinstance(value, torch.Tensor):
        return function("", value)
    _leaves_with_paths(value)  # registers the containers inside
    return pytree.tree_map_with_path(
        lambda path, leaf: function(pytree.keystr(path), leaf) if isinstance(leaf, torch.Tensor) else leaf, value)
