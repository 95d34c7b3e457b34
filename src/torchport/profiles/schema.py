"""The JSON Schema every profile file satisfies, and the one validator that checks it.

`validate` is plain Python over the subset of JSON Schema this file uses (type, enum, pattern,
required, properties, additionalProperties, items, minItems, minimum, minProperties), so a user's
install (no jsonschema) and development check a profile the same way; the tests compare it with
jsonschema where that is installed.
"""

from __future__ import annotations

import difflib
import re

__all__ = [
    "PROFILE_SCHEMA",
    "DTYPE_STATUSES",
    "OP_STATUSES",
    "DYNAMIC_SHAPES",
    "CAPABILITIES",
    "CAPABILITY_DEFAULTS",
    "SchemaViolation",
    "validate",
]

#: What a dtype can be on a target: computed as is, computed in a narrower type, or rejected.
DTYPE_STATUSES = ("native", "downcast", "refused")
#: What an op can be on a target: run on the device, run on the host, or not run at all.
OP_STATUSES = ("native", "fallback", "unsupported")
#: What torch.compile(dynamic=True) does on a target: works, recompiles per new shape, is rejected.
DYNAMIC_SHAPES = ("supported", "recompiles", "rejected")
#: The capability flags a profile states (besides `compiler`, a string), read by the Backend base.
CAPABILITIES = (
    "grad_scaler", "pinned_memory", "native_events", "native_streams", "loads_to_device", "fused_optimizers",
)
#: Capability flags a profile may leave out, and what leaving one out means (a profile written before
#: the flag existed keeps loading, and says the conservative thing).
CAPABILITY_DEFAULTS = {"sync_batchnorm": False, "capturable_optimizers": False, "profiler_activity": None,
                       "sdpa_backends": ["MATH"]}
#: What `profiler_activity` may name: a `torch.profiler.ProfilerActivity` of a device, or null (none).
PROFILER_ACTIVITIES = ("CUDA", "XPU", "MTIA", "HPU", "PrivateUse1")
#: What `sdpa_backends` may list: `torch.nn.attention.SDPBackend` names (MATH runs everywhere).
SDPA_BACKENDS = ("MATH", "FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "OVERRIDEABLE")

PROFILE_SCHEMA: dict = {
    "type": "object",
    "required": [
        "name", "title", "device_type", "emulated_name", "preferred_precision",
        "collective_backends", "memory_bytes", "sources", "dtypes", "ops", "shapes", "fallback",
        "capabilities",
    ],
    "properties": {
        "name": {"type": "string", "pattern": "^[a-z]+$"},
        "title": {"type": "string"},
        "device_type": {"type": "string"},
        "backend": {"type": "string"},
        "extends": {"type": "string"},
        "emulated_name": {"type": "string", "pattern": "^[a-z]+-emulated$"},
        "preferred_precision": {"enum": ["bfloat16", "float16", "float32"]},
        "preferred_precision_requires": {
            "type": "object",
            "required": ["host_cpu_flags_any", "otherwise"],
            "properties": {
                "host_cpu_flags_any": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                "otherwise": {"enum": ["bfloat16", "float16", "float32"]},
                "source": {"type": "string"},
            },
            "additionalProperties": False,
        },
        "package": {"type": "string"},
        "capabilities": {
            "type": "object",
            "required": [*CAPABILITIES, "compiler"],
            "properties": {
                **{name: {"type": "boolean"} for name in CAPABILITIES},
                **{name: {"type": "boolean"} for name, default in CAPABILITY_DEFAULTS.items()
                   if isinstance(default, bool)},
                "profiler_activity": {"enum": [*PROFILER_ACTIVITIES, None]},
                "sdpa_backends": {"type": "array", "items": {"enum": list(SDPA_BACKENDS)}, "minItems": 1},
                "compiler": {"type": "string"},
                "sources": {"type": "object", "additionalProperties": {"type": "string"}},
            },
            "additionalProperties": False,
        },
        "collective_backends": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        "memory_bytes": {"type": "integer", "minimum": 1},
        "sources": {"type": "object", "additionalProperties": {"type": "string"}, "minProperties": 1},
        "dtypes": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "required": ["status"],
                "properties": {
                    "status": {"enum": list(DTYPE_STATUSES)},
                    "to": {"type": "string"},
                    "source": {"type": "string"},
                    "note": {"type": "string"},
                    "message": {"type": "string"},
                },
                "additionalProperties": False,
            },
        },
        "ops": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "required": ["status", "reason", "source"],
                "properties": {
                    "status": {"enum": list(OP_STATUSES)},
                    "reason": {"type": "string"},
                    "fix": {"type": "string"},
                    "source": {"type": "string"},
                },
                "additionalProperties": False,
            },
        },
        "shapes": {
            "type": "object",
            "required": ["static", "source", "compile_seconds_per_graph", "compile_seconds_per_op_signature"],
            "properties": {
                "static": {"type": "boolean"},
                "dynamic": {"enum": list(DYNAMIC_SHAPES)},
                "note": {"type": "string"},
                "source": {"type": "string"},
                "compile_seconds_per_graph": {"type": "number", "minimum": 0},
                "compile_seconds_per_op_signature": {"type": "number", "minimum": 0},
                "compile_cost_source": {"type": "string"},
            },
            "additionalProperties": False,
        },
        "out_of_memory": {
            "type": "object",
            "required": ["source"],
            "properties": {
                "types": {"type": "array", "items": {"type": "string"}},
                "messages": {"type": "array", "items": {"type": "string"}},
                "source": {"type": "string"},
            },
            "additionalProperties": False,
        },
        "autocast": {
            # The target's autocast op lists (aten op names, `name.overload` where it matters): ops run
            # in the autocast dtype, in float32, in float32 unless the call names a dtype, and in the
            # widest dtype of their inputs. Every other op runs in the dtype it receives. Read by
            # torchport.autocast_policy.
            "type": "object",
            "required": ["lower_precision", "float32", "source"],
            "properties": {
                "lower_precision": {"type": "array", "items": {"type": "string"}},
                "float32": {"type": "array", "items": {"type": "string"}},
                "float32_unless_dtype": {"type": "array", "items": {"type": "string"}},
                "promote": {"type": "array", "items": {"type": "string"}},
                # ops the autocast refuses: op name -> the error it raises
                "refused": {"type": "object", "additionalProperties": {"type": "string"}},
                "source": {"type": "string"},
            },
            "additionalProperties": False,
        },
        "frameworks": {
            # The target's own name in libraries that choose the device themselves (absent: the
            # library has none); read by torchport.retarget.frameworks.
            "type": "object",
            "required": ["source"],
            "properties": {
                "accelerate": {"type": "string"},
                "lightning": {"type": "string"},
                "safetensors": {"type": "string"},
                "source": {"type": "string"},
            },
            "additionalProperties": False,
        },
        "fallback": {
            "type": "object",
            "required": ["mechanism"],
            "properties": {"mechanism": {"type": "string"}, "strict_default": {"type": "boolean"}},
            "additionalProperties": False,
        },
    },
    "additionalProperties": False,
}


class SchemaViolation(ValueError):
    """One place where a document breaks the schema: `where` (a key path), the value, what is allowed."""

    def __init__(self, where: str, value, allowed: str, missing: tuple[str, ...] = ()):
        self.where = where
        self.value = value
        self.allowed = allowed
        #: Required keys the mapping at `where` lacks (then `value` is not the point).
        self.missing = missing
        super().__init__(f"{where} lacks {', '.join(missing)}" if missing else f"{where} = {value!r}: {allowed}")


_TYPES = {
    "object": (dict, "a mapping"),
    "array": (list, "a list"),
    "string": (str, "a string"),
    "boolean": (bool, "true or false"),
    "integer": (int, "a whole number"),
    "number": ((int, float), "a number"),
}


def _check_type(expected: str, value, where: str) -> None:
    kind, words = _TYPES[expected]
    # YAML's true/false are ints to Python: a boolean is never a number here.
    if isinstance(value, bool) and expected in ("integer", "number"):
        raise SchemaViolation(where, value, f"must be {words}")
    if not isinstance(value, kind):
        raise SchemaViolation(where, value, f"must be {words}")


def _unknown_key(key: str, known: list[str], where: str):
    close = difflib.get_close_matches(str(key), known, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return SchemaViolation(where, key, f"unknown key; {hint}allowed keys: {', '.join(known)}")


def validate(document, schema: dict = PROFILE_SCHEMA, where: str = "") -> None:
    """Raise SchemaViolation at the first place `document` breaks `schema`."""
    label = where or "(top level)"
    if "type" in schema:
        _check_type(schema["type"], document, label)
    if "enum" in schema and document not in schema["enum"]:
        raise SchemaViolation(label, document, f"allowed values: {', '.join(map(str, schema['enum']))}")
    if "pattern" in schema and not re.search(schema["pattern"], document):
        raise SchemaViolation(label, document, f"must match {schema['pattern']}")
    if "minimum" in schema and document < schema["minimum"]:
        raise SchemaViolation(label, document, f"must be at least {schema['minimum']}")
    if isinstance(document, list):
        if len(document) < schema.get("minItems", 0):
            raise SchemaViolation(label, document, f"needs at least {schema['minItems']} item(s)")
        for index, item in enumerate(document):
            validate(item, schema.get("items", {}), f"{label}[{index}]")
    if not isinstance(document, dict):
        return
    prefix = f"{where}." if where else ""
    missing = [key for key in schema.get("required", ()) if key not in document]
    if missing:
        raise SchemaViolation(label, None, "", missing=tuple(missing))
    if len(document) < schema.get("minProperties", 0):
        raise SchemaViolation(label, document, f"needs at least {schema['minProperties']} entry(ies)")
    properties = schema.get("properties", {})
    extra = schema.get("additionalProperties", True)
    for key, value in document.items():
        if key in properties:
            validate(value, properties[key], f"{prefix}{key}")
        elif extra is False:
            raise _unknown_key(key, list(properties), f"{prefix}{key}")
        elif isinstance(extra, dict):
            validate(value, extra, f"{prefix}{key}")
