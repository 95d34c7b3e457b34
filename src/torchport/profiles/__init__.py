"""Target profiles: what each accelerator can and cannot do, as data a user can read and extend.

One YAML file per target in this folder (neuron, xla, mps, xpu, npu, cuda, cpu). A user adds or
overrides a target with their own YAML file, passed by path or found in a folder listed in
``TORCHPORT_PROFILE_PATH``; ``extends: neuron`` starts from a built-in profile and changes only the
keys it names.

    from torchport.profiles import load
    profile = load("neuron")
    profile.dtype_rule("float64")      # DtypeRule(status='downcast', to='float32', ...)
"""

from __future__ import annotations

import marshal
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from torchport.backends import EMULATED_SUFFIX as _SUFFIX
from torchport.errors import ProfileError
from torchport.profiles.schema import CAPABILITY_DEFAULTS, PROFILE_SCHEMA, SchemaViolation, validate

__all__ = [
    "Profile",
    "DtypeRule",
    "OpRule",
    "load",
    "names",
    "PROFILE_DIRECTORY",
    "PROFILE_SCHEMA",
    "aliases",
    "FACTS",
    "CAPABILITY_OPS",
]

#: Where the built-in profiles live.
PROFILE_DIRECTORY = Path(__file__).resolve().parent

#: The ATen ops that are one capability's kernels, what they are and the way without them: where a
#: profile says the target lacks the capability, these are its unsupported ops (`Profile.op_rule`),
#: so the emulated device, the census and the run summary read one fact.
CAPABILITY_OPS: dict[str, tuple[str, str]] = {
    "fused_optimizers": ("fused optimizer kernels",
                         "build the optimizer without fused=True (torchport turns it off where the application "
                         "asks; a library's own setting, such as transformers' optim='adamw_torch_fused', is "
                         "steered where torchport knows it)"),
    "grad_scaler": ("GradScaler kernels",
                    "train in bf16 (--precision auto), or let torchport's GradScaler scale in plain tensor ops "
                    "(the application's own, and Accelerate's where the application builds the Accelerator)"),
}
_CAPABILITY_OF_OP: dict[str, str] = {
    **{f"aten::{name}": "fused_optimizers" for name in ("_fused_adam_", "_fused_adamw_", "_fused_sgd_", "_fused_adagrad_")},
    **{f"aten::{name}": "grad_scaler" for name in ("_amp_foreach_non_finite_check_and_unscale_", "_amp_update_scale_")},
}

@dataclass(frozen=True)
class DtypeRule:
    """How a target treats one dtype: computed as is, downcast to `to`, or refused."""

    status: str
    to: str | None = None
    source: str = ""
    note: str = ""
    message: str = ""


@dataclass(frozen=True)
class OpRule:
    """How a target treats one ATen op that it does not run natively."""

    status: str
    reason: str
    source: str
    fix: str = ""


@dataclass(frozen=True)
class Profile:
    """One target, loaded from YAML. `data` keeps the whole document for reports."""

    name: str
    title: str
    device_type: str
    emulated_name: str
    preferred_precision: str
    collective_backends: tuple[str, ...]
    memory_bytes: int
    static_shapes: bool
    compile_seconds_per_graph: float
    compile_seconds_per_op_signature: float
    dtypes: dict[str, DtypeRule]
    ops: dict[str, OpRule]
    data: dict = field(repr=False, compare=False)
    path: str = ""
    #: Capability flags (grad_scaler, pinned_memory, native_events, ...) and `compiler`.
    capabilities: dict = field(default_factory=dict, compare=False)
    #: What torch.compile(dynamic=True) does: 'supported', 'recompiles' or 'rejected'.
    dynamic_shapes: str = "supported"

    def fact(self, name: str):
        """The value of a named fact (see FACTS) that rules and reports depend on."""
        try:
            return FACTS[name][1](self)
        except KeyError:
            raise ProfileError(f"Unknown profile fact {name!r}. Known facts: {', '.join(FACTS)}.") from None

    def dtype_rule(self, dtype_name: str) -> DtypeRule:
        """The rule for a dtype name such as 'float64'; dtypes the profile omits are native."""
        return self.dtypes.get(dtype_name, DtypeRule("native"))

    def op_rule(self, op_name: str) -> OpRule | None:
        """The rule for 'aten::name.overload' or 'aten::name'; None when the op is native. An op that is
        one capability's kernel (CAPABILITY_OPS) is unsupported where the profile says the target
        lacks that capability, unless the profile names the op itself."""
        rule = self.ops.get(op_name)
        if rule is None and "." in op_name:
            op_name = op_name.split(".", 1)[0]
            rule = self.ops.get(op_name)
        if rule is None and op_name in _CAPABILITY_OF_OP:
            capability = _CAPABILITY_OF_OP[op_name]
            if self.capabilities.get(capability) is False:
                sources = self.data.get("capabilities", {}).get("sources", {})
                kernels, fix = CAPABILITY_OPS[capability]
                rule = OpRule("unsupported", f"the target has no {kernels} (capabilities.{capability}: false)",
                              sources.get(capability, ""), fix)
        return rule

    def downcasts(self) -> dict[str, str]:
        """{'float64': 'float32', ...} for every dtype the target computes in a narrower type."""
        return {name: rule.to for name, rule in self.dtypes.items() if rule.status == "downcast" and rule.to}

    def refused(self) -> list[str]:
        """Dtype names the target rejects."""
        return [name for name, rule in self.dtypes.items() if rule.status == "refused"]

    def to_dict(self) -> dict:
        """The profile as plain data (for JSON reports)."""
        return dict(self.data)


#: The facts a rule's severity may depend on: name -> (what it means, how the profile answers it).
FACTS: dict = {
    "float64": ("how float64 is computed: native, downcast or refused", lambda p: p.dtype_rule("float64").status),
    "int64": ("how int64 is computed: native, downcast or refused", lambda p: p.dtype_rule("int64").status),
    "data-dependent shapes": (
        "what an op with a data-dependent output shape (aten::nonzero) does: native, fallback or unsupported",
        lambda p: (p.op_rule("aten::nonzero") or OpRule("native", "", "")).status,
    ),
    "dynamic shapes": ("what torch.compile(dynamic=True) does: supported, recompiles or rejected",
                       lambda p: p.dynamic_shapes),
    "accelerator": ("whether the target is an accelerator (false only for the host CPU)",
                    lambda p: p.device_type != "cpu"),
    "execution": (
        "how ops run: 'host' (the CPU itself), 'graph' (static-shape graphs, a host sync cuts one) or 'eager'",
        lambda p: "host" if p.device_type == "cpu" else "graph" if p.static_shapes else "eager",
    ),
    "vendor package": ("whether the device needs a package outside torch (the profile's 'package')",
                       lambda p: bool(p.data.get("package"))),
    **{
        f"capability {name}": (f"the profile's capabilities.{name}", lambda p, name=name: p.capabilities[name])
        for name in ("grad_scaler", "pinned_memory", "fused_optimizers", "compiler")
    },
}


def names() -> list[str]:
    """Every built-in target name."""
    return sorted(path.stem for path in PROFILE_DIRECTORY.glob("*.yaml"))


def _search_path() -> list[Path]:
    extra = [Path(part) for part in os.environ.get("TORCHPORT_PROFILE_PATH", "").split(os.pathsep) if part]
    return [*extra, PROFILE_DIRECTORY]


def _canonical(name: str) -> str:
    """'trainium', 'trainium-emulated', 'neuron-emulated' -> 'neuron': the backend registry's names
    and aliases are the one table; a name it does not know (a user profile) is kept as is."""
    from torchport import backends
    from torchport.errors import UnknownDeviceError

    key = name.strip().lower().removesuffix(_SUFFIX)
    try:
        return backends.canonical_name(key).removesuffix(_SUFFIX)
    except UnknownDeviceError:
        return key


def aliases() -> dict[str, str]:
    """{alias: target} for every backend alias that names a target with a profile."""
    from torchport import backends

    known = set(names())
    table = {}
    for alias in backends.names():
        if alias == "auto" or alias.endswith(_SUFFIX):
            continue
        target = _canonical(alias)
        if target != alias and target in known:
            table[alias] = target
    return dict(sorted(table.items()))


def _registered_profile(key: str) -> Path | None:
    """The profile file a registered (third-party) backend ships in its own package."""
    from torchport import backends
    from torchport.errors import UnknownDeviceError

    try:
        backend = backends.get(key)
    except UnknownDeviceError:
        return None
    path = backend.profile_file()
    return path if path is not None and path.is_file() else None


def _find(name: str) -> Path:
    key = _canonical(name)
    for directory in _search_path():
        candidate = directory / f"{key}.yaml"
        if candidate.is_file():
            return candidate
    registered = _registered_profile(key)
    if registered is not None:
        return registered
    raise ProfileError(
        f"Unknown target {name!r}. Known targets: {', '.join(names())} (aliases: {', '.join(aliases())}). "
        "Pass one of them, or a path to your own profile YAML (see torchport/profiles/neuron.yaml)."
    )


def _merge(base: dict, override: dict) -> dict:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _read(path: Path) -> dict:
    document = _parsed(path)
    if not isinstance(document, dict):
        raise ProfileError(f"Profile {str(path)!r} is not a mapping. Start from torchport/profiles/neuron.yaml.")
    parent = document.pop("extends", None)
    if parent:
        document = _merge(_read(_find(parent)), document)
    return document


#: Bumped when the layout of a parsed-profile cache entry changes.
_PARSED_FORMAT = 1


def _parsed(path: Path):
    """The YAML document in `path`, parsed (read back from the cache when the file is unchanged: the
    YAML parser is most of what loading a profile costs at start-up)."""
    try:
        status = path.stat()
    except OSError as error:
        raise ProfileError(f"Cannot read profile {str(path)!r}: {error}. Fix the file or pass another target.") from error
    stamp = (_PARSED_FORMAT, str(path.resolve()), status.st_mtime_ns, status.st_size)
    entry = _parsed_entry(stamp)
    try:
        with open(entry, "rb") as handle:
            cached_stamp, document = marshal.loads(handle.read())
        if cached_stamp == stamp:
            return document
    except (OSError, EOFError, ValueError, TypeError):
        pass
    import yaml

    try:
        document = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except (OSError, yaml.YAMLError) as error:
        raise ProfileError(f"Cannot read profile {str(path)!r}: {error}. Fix the file or pass another target.") from error
    if not sys.dont_write_bytecode:
        try:
            blob = marshal.dumps((stamp, document))
        except ValueError:  # a value marshal cannot hold (a YAML date): parsed each time
            return document
        from torchport.fileio import cache_write

        cache_write(entry, blob)
    return document


def _parsed_entry(stamp: tuple) -> Path:
    import hashlib

    from torchport.fileio import default_cache_dir

    where = hashlib.blake2b(stamp[1].encode(), digest_size=12).hexdigest()
    return default_cache_dir() / "profiles" / f"{Path(stamp[1]).stem}.{where}.marshal"


def _validate(document: dict, path: Path) -> None:
    """The one validation, the same with or without jsonschema installed (schema.validate)."""
    try:
        validate(document)
    except SchemaViolation as error:
        if error.missing:
            raise ProfileError(
                f"Profile {str(path)!r}: {error.where} lacks the required key(s) {', '.join(error.missing)}. "
                "Add them, or start with 'extends: <target>' to inherit them from a built-in profile."
            ) from None
        raise ProfileError(
            f"Profile {str(path)!r}: {error.where} = {error.value!r} is not allowed: {error.allowed}. "
            "Fix the file (the built-in profiles in torchport/profiles are complete examples)."
        ) from None
    for dtype_name, rule in document["dtypes"].items():
        if rule["status"] == "downcast" and not rule.get("to"):
            raise ProfileError(
                f"Profile {str(path)!r}: dtypes.{dtype_name} is 'downcast' but names no 'to' dtype. "
                "Add 'to: float32' (or the dtype the target computes it in)."
            )


def load(target: str | os.PathLike) -> Profile:
    """The profile for a target name, alias, '<name>-emulated' or path to a YAML file."""
    path = Path(target)
    if path.suffix in {".yaml", ".yml"} or os.sep in str(target):
        if not path.is_file():
            what = "is a folder" if path.is_dir() else "does not exist"
            raise ProfileError(
                f"Profile file {str(target)!r} {what}. Pass the path of a profile YAML file, or a target name: "
                f"{', '.join(names())}."
            )
    else:
        path = _find(str(target))
    document = _read(path)
    _validate(document, path)
    shapes = document["shapes"]
    return Profile(
        name=document["name"],
        title=document["title"],
        device_type=document["device_type"],
        emulated_name=document["emulated_name"],
        preferred_precision=document["preferred_precision"],
        collective_backends=tuple(document["collective_backends"]),
        memory_bytes=int(document["memory_bytes"]),
        static_shapes=bool(shapes["static"]),
        compile_seconds_per_graph=float(shapes["compile_seconds_per_graph"]),
        compile_seconds_per_op_signature=float(shapes["compile_seconds_per_op_signature"]),
        dtypes={key: DtypeRule(**value) for key, value in document["dtypes"].items()},
        ops={key: OpRule(**value) for key, value in (document["ops"] or {}).items()},
        data=document,
        path=str(path),
        capabilities={**CAPABILITY_DEFAULTS,
                      **{key: value for key, value in document["capabilities"].items() if key != "sources"}},
        dynamic_shapes=shapes.get("dynamic") or ("recompiles" if shapes["static"] else "supported"),
    )
