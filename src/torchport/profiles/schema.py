"""The JSON Schema every profile file satisfies (checked by the loader and by the tests)."""

from __future__ import annotations

__all__ = ["PROFILE_SCHEMA", "DTYPE_STATUSES", "OP_STATUSES"]

#: What a dtype can be on a target: computed as is, computed in a narrower type, or rejected.
DTYPE_STATUSES = ("native", "downcast", "refused")
#: What an op can be on a target: run on the device, run on the host, or not run at all.
OP_STATUSES = ("native", "fallback", "unsupported")

PROFILE_SCHEMA: dict = {
    "type": "object",
    "required": [
        "name", "title", "device_type", "emulated_name", "preferred_precision",
        "collective_backends", "memory_bytes", "sources", "dtypes", "ops", "shapes", "fallback",
    ],
    "properties": {
        "name": {"type": "string", "pattern": "^[a-z]+$"},
        "title": {"type": "string"},
        "device_type": {"type": "string"},
        "backend": {"type": "string"},
        "extends": {"type": "string"},
        "emulated_name": {"type": "string", "pattern": "^[a-z]+-emulated$"},
        "preferred_precision": {"enum": ["bfloat16", "float16", "float32"]},
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
                "note": {"type": "string"},
                "source": {"type": "string"},
                "compile_seconds_per_graph": {"type": "number", "minimum": 0},
                "compile_seconds_per_op_signature": {"type": "number", "minimum": 0},
                "compile_cost_source": {"type": "string"},
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
