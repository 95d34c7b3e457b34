"""Libraries that choose the device themselves, steered to the target through their own settings.

The transformers `Trainer`, HF Accelerate's `Accelerator` and PyTorch Lightning's `Trainer` decide
the device inside library code, which sees the real torch (not the application's facade). They are
not patched: at activation torchport sets the settings these libraries document, from the target
profile's `frameworks` facts (the target's own name in each library), and the run report says what
was steered (decisions of kind `device`) or why a library cannot use the target.

- Accelerate (and the transformers Trainer, which places the model through Accelerate's
  `PartialState`): on the CPU, `ACCELERATE_USE_CPU=true` (honoured by Accelerate and by
  `TrainingArguments`); where Accelerate knows the target itself (the profile names it, e.g. `xla`,
  `neuron`, `mps`) its own detection runs unchanged, including its distributed setup; a target it
  does not know (the emulated device) is given with `ACCELERATE_TORCH_DEVICE`, which both libraries
  read. A setting the user made is kept. On an emulated target the transformers hub kernels (the
  `kernels` package, which refuses device types it does not know) are off: `USE_HUB_KERNELS=NO`.
  `Accelerator(mixed_precision="fp16")` (or the `ACCELERATE_MIXED_PRECISION` that `accelerate launch
  --mixed_precision fp16` sets) follows the precision policy where the application calls it
  (`accelerator_keywords`): what `--precision` makes of CUDA's fp16 autocast; where the target has
  no GradScaler kernels, the Accelerator built (the application's, or a transformers Trainer's:
  `framework_built`) gets the GradScaler the application's own gets there, scaling in plain tensor
  ops. transformers' fused AdamW (`optim`, its default) is unfused where the target has no fused
  optimizer kernels.
- Lightning: `PL_TRAINER_ACCELERATOR` (Lightning's documented environment default for the
  `Trainer(accelerator=...)` argument) is the target's Lightning name, so `Trainer()` with the default
  `accelerator="auto"` runs there; an explicit `accelerator="gpu"` / `"cuda"` written in the application
  is mapped where it leaves the application (`lightning_keywords`, called by `runtime.call`), with
  GPU-style `devices=[0, 1]` / `-1` turned into a process count on the CPU. Where Lightning has no
  accelerator of its own for the target (Neuron, the emulated device, ...), `accelerator="gpu"`
  becomes an instance of Lightning's `Accelerator` API placing on the target backend's devices (with
  `SingleDeviceStrategy(device=...)` for one device). `"auto"` means the GPU on a GPU machine, so
  `Trainer()` / `Fabric()` left at it get the same where the application calls them
  (`framework_defaults`, called by `runtime.framework_call` for callees spelled `Trainer` or
  `Fabric`): the target's Lightning name, or that Accelerator. Fabric does not read
  `PL_TRAINER_ACCELERATOR`; a Lightning environment default the user set (`PL_TRAINER_*`, Fabric's
  `LT_*`) is kept.

The environment is inherited by child processes (DataLoader workers, spawned ranks), which take the
same decisions.
"""

from __future__ import annotations

import os

from torchport.backends.base import package_installed
__all__ = ["steer", "framework_names", "framework_keywords", "framework_defaults", "framework_built",
           "lightning_keywords", "training_arguments_keywords", "accelerator_keywords"]

_TRUE = ("1", "true", "yes", "on")
#: accelerator names that mean the GPU on a GPU machine ("auto" picks it there).
_LIGHTNING_CUDA_NAMES = ("gpu", "cuda", "auto")
_LIGHTNING_PACKAGES = ("lightning", "pytorch_lightning", "lightning_fabric")


def framework_names(backend) -> dict[str, str]:
    """The target's own name in each framework, from its profile (`frameworks`).

    An emulated target has none: the libraries know the real device, not torchport's ``emulated``
    device, so it is reached through the generic settings.
    """
    if _is_emulated(backend):
        return {}
    try:
        facts = backend.profile().data.get("frameworks") or {}
    except Exception:  # a third-party backend without a profile
        facts = {}
    return {key: value for key, value in facts.items() if key != "source"}


def steer(retarget, environ=None, installed=package_installed) -> list[str]:
    """Steer the installed frameworks to the target; returns the notes it recorded.

    `installed(name)` says whether a package can be imported (found without importing it).
    """
    environ = os.environ if environ is None else environ
    restore(environ)  # settings of an earlier activation in this process are not the user's
    lightning = any(installed(package) for package in _LIGHTNING_PACKAGES)
    accelerate = installed("accelerate")
    hub_kernels = installed("kernels") and installed("transformers")
    if not (lightning or accelerate or hub_kernels):
        return []  # nothing to steer: the profile is not read
    names = framework_names(retarget.backend)
    notes = []
    if hub_kernels and _is_emulated(retarget.backend):
        setting = _set(environ, "USE_HUB_KERNELS", "NO")
        notes.append(("transformers hub kernels", ("transformers",),
                      f"off ({setting}): the kernels package has no kernels for the emulated device; "
                      "transformers runs its own PyTorch layers"))
    if accelerate:
        notes.append(("Accelerate / transformers Trainer", ("accelerate",), _steer_accelerate(retarget, names, environ)))
    if lightning:
        notes.append(("PyTorch Lightning", _LIGHTNING_PACKAGES, _steer_lightning(retarget, names, environ)))
    for topic, modules, note in notes:
        # Reported where the program used the library (the setting itself must be in place before it
        # is imported, by the application or by a child process).
        retarget.decide(f"device of {topic}", note, kind="device", modules=modules)
    return [note for _, _, note in notes]


#: (environment, variable, value) for each setting steer made, to undo when retargeting stops.
_SET: list[tuple[dict, str, str]] = []


def restore(environ=None) -> None:
    """Undo the settings steer made (in `environ`, or in every environment) that still hold its value."""
    kept = []
    for where, variable, value in _SET:
        if environ is not None and where is not environ:
            kept.append((where, variable, value))
        elif where.get(variable) == value:
            del where[variable]
    _SET[:] = kept


def _set(environ, variable: str, value: str) -> str:
    """Set `variable` unless the user set it. The setting is a decision of the run (steer records it),
    not a CUDA usage of the application: it is set whether or not the application uses the library."""
    given = environ.get(variable)
    if given is not None and given != value:
        return f"kept the user's {variable}={given!r} (torchport would set {value!r})"
    if given is None:
        _SET.append((environ, variable, value))
    environ[variable] = value
    return f"{variable}={value}"


def _is_emulated(backend) -> bool:
    from torchport.backends.emulated import EmulatedBackend

    return isinstance(backend, EmulatedBackend)


def _steer_accelerate(retarget, names: dict, environ) -> str:
    target = retarget.backend.name
    own = names.get("accelerate")
    if retarget.type == "cpu":
        setting = _set(environ, "ACCELERATE_USE_CPU", "true")
        return f"run on the CPU ({setting})"
    if own:
        return f"Accelerate detects {own!r} itself: left to its own device selection"
    # the backend's device, not retarget.device(): CUDA_VISIBLE_DEVICES is read when the program first
    # asks about devices, as CUDA reads it, not at activation
    device = str(retarget.backend.device(None))
    setting = _set(environ, "ACCELERATE_TORCH_DEVICE", device)
    return (f"run on {target} ({setting}; Accelerate does not know {retarget.type!r}, so every "
            "process uses that device, and it cannot run distributed there: under torchrun the "
            "application's Accelerator() / Trainer() stops with the reason)")


def _steer_lightning(retarget, names: dict, environ) -> str:
    own = names.get("lightning")
    if not own:
        return (f"PyTorch Lightning has no accelerator of its own for {retarget.backend.name}: "
                "Trainer() / Fabric() called in the application with accelerator 'auto' (the default), "
                "'gpu' or 'cuda' run there through a Lightning Accelerator built on the target backend")
    setting = _set(environ, "PL_TRAINER_ACCELERATOR", own)
    return f"accelerator='auto', 'gpu' and 'cuda' mean {own!r} ({setting})"


def framework_keywords(function, kwargs: dict, site: int):
    """Keywords a framework reads to choose the device or precision, where they leave the application.
    Returns what to do with the object the call builds (None: nothing)."""
    if "accelerator" in kwargs and _is_lightning(function):
        lightning_keywords(kwargs, site, function)
    if any(name in kwargs for name in _TRAINING_ARGUMENTS_STEERED) and _is_training_arguments(function):
        training_arguments_keywords(kwargs, site, function)
    if "mixed_precision" in kwargs and _is_accelerator(function):
        return accelerator_keywords(kwargs, site)
    return None


def framework_defaults(function, args: tuple, kwargs: dict, site: int) -> tuple:
    """A framework class called without the keyword that names its device or precision: Lightning's
    `Trainer()` / `Fabric()` left at accelerator="auto", which picks the GPU on a GPU machine
    (Lightning's own environment default, where set by the user or by `steer` for a Trainer on a
    target Lightning names, decides instead), Accelerate's `Accelerator()` reading the mixed precision
    `accelerate launch` left in the environment. Also refuses what the framework cannot do on the
    target (`_refuse_undistributed`) and puts Lightning's precision on the CPU target under the policy.
    transformers' `HfArgumentParser((..., TrainingArguments))` builds the TrainingArguments inside
    transformers from the command line or a file: it is given a subclass that steers them as the
    application's own `TrainingArguments(...)` call is steered (`steered_arguments_class`).
    Returns the positional arguments to call with."""
    from torchport.retarget import state

    retarget = state.current()
    if retarget is None:
        return args
    if _is_argument_parser(function):
        return _steered_parser_arguments(args, kwargs, site)
    if _is_transformers_pipeline(function):
        _pipeline_device(retarget, kwargs, site)
        return args
    if _is_training_arguments(function):
        _steer_fused_optimizer(kwargs, site, function)
        return args
    if _is_accelerator(function) or _is_transformers_trainer(function):
        _refuse_undistributed(retarget, function, site)
    if _is_accelerator(function):
        # `accelerate launch --mixed_precision fp16` (or its config) hands the choice over in the
        # environment, which Accelerator() reads when not given one: the same request as the keyword
        requested = os.environ.get("ACCELERATE_MIXED_PRECISION", "").lower()
        if "mixed_precision" not in kwargs and requested in _ACCELERATE_MIXED:
            kwargs["mixed_precision"] = requested
        return args
    if not _is_lightning(function) or not _takes_accelerator(function):
        return args
    if retarget.type == "cpu" and "precision" in kwargs \
            and str(kwargs.get("accelerator", "auto")).lower() in _LIGHTNING_CUDA_NAMES:
        # Lightning itself turns 16-mixed into bf16-mixed on the CPU: the precision policy decides
        _lightning_precision(function, kwargs, retarget)
    if "accelerator" in kwargs or os.environ.get(_lightning_environment(function)[0]) is not None:
        return args
    lightning_keywords(kwargs, site, function, default="auto")
    return args


def _is_argument_parser(function) -> bool:
    return isinstance(function, type) and any(
        cls.__name__ == "HfArgumentParser" and cls.__module__.startswith("transformers")
        for cls in function.__mro__
    )


def _steered_parser_arguments(args: tuple, kwargs: dict, site: int) -> tuple:
    """`HfArgumentParser(dataclass_types, ...)` with each TrainingArguments class among the types
    replaced by its steered subclass."""
    def steered(types):
        if isinstance(types, type):
            return steered_arguments_class(types, site) if _is_training_arguments(types) else types
        if isinstance(types, (list, tuple)):
            return type(types)(steered(item) for item in types)
        return types  # another iterable: transformers' own error or answer

    if "dataclass_types" in kwargs:
        kwargs["dataclass_types"] = steered(kwargs["dataclass_types"])
        return args
    return (steered(args[0]), *args[1:]) if args else args


_STEERED_CLASSES: dict[tuple[type, int], type] = {}


def steered_arguments_class(cls: type, site: int) -> type:
    """A subclass of the TrainingArguments class `cls` (transformers' or the application's own
    dataclass deriving from it) whose construction is steered as `TrainingArguments(...)` written
    in the application is (`training_arguments_keywords`): transformers' parser fills every field,
    so a value equal to its field's default is taken as not given (as when the application leaves
    the keyword out). What it makes is an instance of `cls` itself, so equality, copies and pickles
    are those of `cls` (a saved `training_args.bin` loads without torchport); the parser reads the
    fields `cls` has."""
    import dataclasses

    key = (cls, site)
    if key in _STEERED_CLASSES:
        return _STEERED_CLASSES[key]
    defaults = {field.name: field.default for field in dataclasses.fields(cls)
                if field.init and field.default is not dataclasses.MISSING}

    def __new__(steered_class, *args, **kwargs):
        given = {name: value for name, value in kwargs.items()
                 if not (name in defaults and type(value) in (bool, type(None)) and value is defaults[name])}
        defaulted = {name: value for name, value in kwargs.items() if name not in given}
        if any(name in given for name in _TRAINING_ARGUMENTS_STEERED):
            training_arguments_keywords(given, site, cls, every_field=True)
        else:  # transformers' default optimizer, given by the parser like every field
            _steer_fused_optimizer(given, site, cls, every_field=True)
        instance = cls.__new__(cls)
        cls.__init__(instance, *args, **{**defaulted, **given})
        return instance  # not of the steered class: Python does not run __init__ again

    namespace = {"__new__": __new__, "__module__": cls.__module__, "__qualname__": cls.__qualname__,
                 "__doc__": cls.__doc__}
    steered = type(cls)(cls.__name__, (cls,), namespace)
    _STEERED_CLASSES[key] = steered
    return steered


def _is_transformers_pipeline(function) -> bool:
    return getattr(function, "__name__", None) == "pipeline" and \
        str(getattr(function, "__module__", "")).startswith("transformers")


def _pipeline_device(retarget, kwargs: dict, site: int) -> None:
    """transformers' `pipeline()` without a device runs on cuda:0 on a GPU machine (and moves the model
    there); transformers sees no CUDA here, so it is given the target, where it has a device."""
    from torchport.retarget import runtime

    if not retarget.accelerator or kwargs.get("device") is not None or kwargs.get("device_map") is not None:
        return
    kwargs["device"] = retarget.device(0)
    runtime.HITS[site] += 1
    retarget.decide("device of transformers pipeline()", f"{retarget.backend.name}, as cuda:0 on a GPU machine "
                                                          "(a pipeline given no device)", kind="device",
                    modules=("transformers",))


def _refuse_undistributed(retarget, function, site: int) -> None:
    """Accelerate (and the transformers Trainer through it) runs distributed only on devices it knows:
    under torchrun on a target it does not know (the emulated device), each process would train alone
    on the whole dataset, a different run from the GPU machine's, without a word. That is refused."""
    if framework_names(retarget.backend).get("accelerate"):
        return
    processes = os.environ.get("WORLD_SIZE", "")
    if os.environ.get("LOCAL_RANK") is None or not processes.isdigit() or int(processes) < 2:
        return
    from torchport.emulated.errors import not_emulated

    # a gap of the rehearsal, not of the target (whose profile names it to Accelerate): a check of the
    # program says "not checked", not "blocked"
    raise not_emulated(
        f"{function.__module__.partition('.')[0]}'s distributed run ({processes} processes) on {retarget.backend.name}",
        f"Accelerate distributes only on devices it knows, and it does not know {retarget.type!r}: each process "
        "would train alone. Rehearse the distributed run with --device cpu (Accelerate's MULTI_CPU), or run one "
        "process here")


def _is_transformers_trainer(function) -> bool:
    return isinstance(function, type) and any(
        cls.__name__ == "Trainer" and cls.__module__.startswith("transformers") for cls in function.__mro__
    )


def _lightning_environment(function) -> tuple[str, str]:
    """The environment variables holding the default `accelerator=` and `strategy=` of a Lightning
    callee: Fabric reads its CLI's (`LT_*`), the Trainer `PL_TRAINER_*`."""
    fabric = any(cls.__name__ == "Fabric" for cls in getattr(function, "__mro__", ()))
    return ("LT_ACCELERATOR", "LT_STRATEGY") if fabric else ("PL_TRAINER_ACCELERATOR", "PL_TRAINER_STRATEGY")


def _takes_accelerator(function) -> bool:
    import inspect

    try:
        return "accelerator" in inspect.signature(function).parameters
    except (TypeError, ValueError):
        return False


def _is_lightning(function) -> bool:
    """Whether `function` is Lightning's (another library's `accelerator=` keeps its own meaning)."""
    from torchport.retarget.destination import module_of

    return (module_of(function) or "").partition(".")[0] in _LIGHTNING_PACKAGES


def _is_training_arguments(function) -> bool:
    return isinstance(function, type) and any(
        cls.__name__ == "TrainingArguments" and cls.__module__.startswith("transformers")
        for cls in function.__mro__
    )


#: TrainingArguments keywords written for a GPU that the target changes.
_TRAINING_ARGUMENTS_STEERED = ("fp16", "bf16", "tf32", "torch_compile")


def training_arguments_keywords(kwargs: dict, site: int, cls: type | None = None, every_field: bool = False) -> None:
    """`TrainingArguments(fp16=True)` / `(bf16=True)` written for CUDA, under the precision policy.

    fp16 becomes what `--precision` makes of CUDA's fp16 autocast (bf16 where the target prefers it
    under `auto`, off under `fp32`), as for the application's own autocast, and `fp16_full_eval`
    follows it; on the CPU `use_cpu=True` (transformers' own setting; without it a bf16 run stops with
    "Your setup doesn't support bf16/gpu"). transformers checks bf16 only on devices it knows, so on
    an emulated target fp16 is kept. `tf32=True` (transformers refuses it off an Ampere GPU) is
    NVIDIA's matmul mode, a no-op elsewhere as the application's own TF32 flags are;
    `torch_compile=True` compiles with the target's compiler, as the application's torch.compile does.
    `cls` is the TrainingArguments class called (transformers' when not known), whose defaults count;
    `every_field`: the keywords are every field, as transformers' parser gives them.
    """
    import torch

    from torchport.retarget import amp, runtime, state

    _steer_tf32_and_compile(kwargs, site)
    _steer_fused_optimizer(kwargs, site, cls, every_field)
    retarget = state.current()
    requested = "bf16" if kwargs.get("bf16") else "fp16" if kwargs.get("fp16") else None
    if requested is not None:
        effective = amp.effective_dtype(torch.bfloat16 if requested == "bf16" else torch.float16)
        wanted = {torch.bfloat16: "bf16", torch.float16: "fp16", None: None}.get(effective, requested)
        topic = f"transformers TrainingArguments {requested}=True"
        if wanted == "bf16" and requested != "bf16" and _is_emulated(retarget.backend):
            retarget.decide(topic, f"kept fp16: transformers cannot tell that {retarget.backend.name} "
                                   "supports bf16 (it checks the devices it knows)")
        elif wanted == "bf16" and _is_emulated(retarget.backend):
            from torchport.emulated.errors import not_emulated

            # transformers' own refusal ("Your setup doesn't support bf16/gpu ... assign use_cpu") would
            # send the user to the CPU for a reason that is not the target's
            raise not_emulated(f"{topic} on {retarget.backend.name}",
                               "transformers accepts bf16 only on devices it knows and refuses the emulated one "
                               "(the real target passes its check); rehearse the bf16 run with --device cpu, or "
                               "this one with --precision fp32")
        elif wanted != requested:
            kwargs["fp16"] = wanted == "fp16"
            kwargs["bf16"] = wanted == "bf16"
            note = ""
            if kwargs.pop(f"{requested}_full_eval", False):  # evaluation in the same half type as training
                if wanted is not None:
                    kwargs[f"{wanted}_full_eval"] = True
                note = f"; {requested}_full_eval=True -> {f'{wanted}_full_eval=True' if wanted else 'fp32 evaluation'}"
            runtime.HITS[site] += 1
            retarget.decide(topic, f"{wanted or 'fp32'} on {retarget.backend.name} "
                                   f"({'no mixed precision' if wanted is None else wanted + '=True'}){note}")
        elif wanted == "fp16" and retarget.type == "cpu":
            retarget.decide(topic, _FP16_ON_CPU.format(who="the Trainer's Accelerate"))
        else:
            retarget.decide(topic, f"kept on {retarget.backend.name}")
    if retarget.type == "cpu" and "use_cpu" not in kwargs:
        kwargs["use_cpu"] = True
        runtime.HITS[site] += 1


#: transformers' name of the fused AdamW, and of the same optimizer unfused.
_FUSED_ADAMW, _ADAMW = "adamw_torch_fused", "adamw_torch"


def _steer_fused_optimizer(kwargs: dict, site: int, cls: type | None = None, every_field: bool = False) -> None:
    """`optim="adamw_torch_fused"` (transformers' default from torch 2.8 on) on a target without fused
    optimizer kernels: `optim="adamw_torch"`, as the application's own `fused=True` is turned off.
    Left out, `optim` is the default of the class called (`cls`: an application's subclass may have its
    own); `every_field`: the keywords hold every field (transformers' parser), so a value equal to the
    default is not taken as written."""
    from torchport.retarget import runtime, state

    retarget = state.current()
    if retarget.backend.supports_fused_optimizers:
        return
    if cls is None:
        from transformers import TrainingArguments as cls
    field = getattr(cls, "__dataclass_fields__", {}).get("optim")
    default = getattr(field, "default", None)
    requested = kwargs.get("optim", default)
    if str(getattr(requested, "value", requested)) != _FUSED_ADAMW:
        return
    given = "optim" in kwargs and not (every_field and str(getattr(default, "value", default)) == _FUSED_ADAMW)
    kwargs["optim"] = _ADAMW
    runtime.HITS[site] += 1
    written = f"optim={_FUSED_ADAMW!r}" if given else f"optim left at its default ({_FUSED_ADAMW!r})"
    retarget.decide(f"transformers TrainingArguments {written}",
                    f"optim={_ADAMW!r}: {retarget.backend.name} has no fused optimizer kernels (its profile says "
                    "so), as the application's own fused=True is turned off", kind="adapted")


def _steer_tf32_and_compile(kwargs: dict, site: int) -> None:
    from torchport.retarget import runtime, state

    retarget = state.current()
    if kwargs.get("tf32") and retarget.type != "cuda":
        kwargs["tf32"] = None  # transformers' default: it leaves torch's matmul settings alone
        runtime.HITS[site] += 1
        retarget.decide("transformers TrainingArguments tf32=True",
                        f"no-op on {retarget.backend.name}: TF32 is NVIDIA's matmul mode (transformers refuses it "
                        "off an Ampere GPU)", kind="adapted")
    if kwargs.get("torch_compile") and kwargs.get("torch_compile_backend") in (None, "inductor"):
        chosen = retarget.backend.compile_backend()
        if chosen != "inductor":
            kwargs["torch_compile_backend"] = chosen
            kwargs.pop("torch_compile_mode", None)  # inductor's
            runtime.HITS[site] += 1
            retarget.decide("transformers TrainingArguments torch_compile=True",
                            f"compiled with backend {chosen!r} (the {retarget.backend.name} target's compiler) "
                            "instead of inductor", kind="adapted")


def _is_accelerator(function) -> bool:
    return isinstance(function, type) and any(
        cls.__name__ == "Accelerator" and cls.__module__.startswith("accelerate")
        for cls in function.__mro__
    )


#: What a kept fp16 does on the CPU target where Accelerate runs the mixed precision.
_FP16_ON_CPU = ("runs in fp32 on the CPU: {who} enables fp16 autocast only on accelerators "
                "(--precision auto or bf16 gives bf16 autocast)")

#: Accelerate's mixed-precision names for CUDA autocast dtypes.
_ACCELERATE_MIXED = {"fp16": "float16", "bf16": "bfloat16"}


def accelerator_keywords(kwargs: dict, site: int):
    """`Accelerator(mixed_precision="fp16")` written for a GPU, under the precision policy, through
    Accelerate's own settings: the dtype becomes what `--precision` makes of CUDA's fp16 autocast
    ("bf16" where the target prefers it under `auto`, "no" under `fp32`). Where fp16 is kept on a
    target without GradScaler kernels, the Accelerator built gets the GradScaler the application's own
    gets there (`_scaler_in_plain_ops`): the same settings, scaling in plain tensor ops, so the
    gradients, skipped steps and scale are CUDA's. Accelerate enables fp16 autocast only off the CPU:
    on the CPU target a kept fp16 runs in fp32, which the report says. Returns what to do with the
    Accelerator built (None: nothing)."""
    import torch

    from torchport.retarget import amp, runtime, state

    retarget = state.current()
    requested = str(kwargs["mixed_precision"]).lower()
    if requested not in _ACCELERATE_MIXED:
        return
    topic = f"Accelerate mixed_precision={requested!r}"
    effective = amp.effective_dtype(getattr(torch, _ACCELERATE_MIXED[requested]))
    wanted = {torch.bfloat16: "bf16", torch.float16: "fp16", None: "no"}[effective]
    if wanted != requested:
        kwargs["mixed_precision"] = wanted
        runtime.HITS[site] += 1
        what = "fp32 (no mixed precision)" if wanted == "no" else f"{wanted} autocast"
        retarget.decide(topic, f"{what} on {retarget.backend.name} (mixed_precision={wanted!r})")
    elif wanted == "fp16" and retarget.type == "cpu":
        retarget.decide(topic, _FP16_ON_CPU.format(who="Accelerate"))
    elif wanted == "fp16" and not retarget.backend.supports_grad_scaler:
        return lambda accelerator: _scaler_in_plain_ops(accelerator, topic, f"fp16 kept on {retarget.backend.name}, "
                                                                             "Accelerate's GradScaler", site)
    else:
        retarget.decide(topic, f"kept on {retarget.backend.name}")
    return None


def framework_built(function, made):
    """What a framework class the application called built, given what the target needs: the
    transformers Trainer's Accelerator (built inside transformers) gets the GradScaler the
    application's own gets on a target without GradScaler kernels (`_scaler_in_plain_ops`)."""
    if _is_transformers_trainer(function):
        from torchport.retarget import state

        retarget = state.current()
        accelerator = getattr(made, "accelerator", None)
        if (retarget is not None and not retarget.backend.supports_grad_scaler
                and getattr(accelerator, "scaler", None) is not None):
            _scaler_in_plain_ops(accelerator, "transformers Trainer's GradScaler", "the Trainer's GradScaler")
    return made


def _scaler_in_plain_ops(accelerator, topic: str, what: str, site: int | None = None):
    """The Accelerator built on a target without GradScaler kernels: its GradScaler (torch's, whose
    kernels the target lacks) becomes the one torchport gives the application there, with the same
    settings (its GradScalerKwargs included; one they disable stays off). A scaler of another kind (FSDP's
    sharded one) is kept, and its kernels are named where the program runs them. The report says
    which."""
    import torch

    from torchport.retarget import amp, runtime, state

    retarget = state.current()
    scaler = getattr(accelerator, "scaler", None)
    if type(scaler) is torch.amp.GradScaler and not scaler.is_enabled():
        retarget.decide(topic, f"{what} disabled, as the application configured it")
    elif type(scaler) is torch.amp.GradScaler:
        accelerator.scaler = amp.target_grad_scaler(
            init_scale=scaler._init_scale, growth_factor=scaler._growth_factor, backoff_factor=scaler._backoff_factor,
            growth_interval=scaler._growth_interval)
        if site is not None:
            runtime.HITS[site] += 1
        retarget.decide(topic, f"{what} {amp.scaling_in_plain_ops(retarget.backend.name)}")
    elif scaler is None:
        retarget.decide(topic, f"{what}: none (Accelerate made no scaler)")
    else:
        retarget.decide(topic, f"{what} kept as Accelerate built it ({type(scaler).__name__}); "
                               f"{retarget.backend.name} has no GradScaler kernels")
    return accelerator


def lightning_keywords(kwargs: dict, site: int, function=None, default: str | None = None) -> None:
    """`Trainer(accelerator="gpu", devices=[0])` leaving the application: the target's Lightning name.

    Called by `runtime.call` for a call into a torch-based library that passes `accelerator=`, and by
    `framework_defaults` with `default="auto"` for a Lightning call that leaves it out.
    """
    from torchport.retarget import runtime, state

    value = kwargs.get("accelerator", default)
    if not isinstance(value, str) or value.lower() not in _LIGHTNING_CUDA_NAMES:
        return
    retarget = state.current()
    own = framework_names(retarget.backend).get("lightning")
    if not own:
        accelerator = _target_accelerator(function, retarget.backend)
        if accelerator is None:
            retarget.decide(
                f"accelerator={value!r} in PyTorch Lightning",
                f"accelerator={value!r} kept: PyTorch Lightning has no accelerator for {retarget.backend.name}",
                kind="device",
            )
            return
        runtime.HITS[site] += 1
        kwargs["accelerator"] = accelerator
        devices = accelerator.get_parallel_devices(kwargs.get("devices", "auto"))
        if kwargs.get("strategy", "auto") == "auto" and len(devices) == 1 \
                and os.environ.get(_lightning_environment(function)[1]) is None:
            # Lightning places a single device of an accelerator it does not know on the CPU unless
            # the strategy names the device (its documented SingleDeviceStrategy(device=...)).
            strategy = _single_device_strategy(function, devices[0])
            if strategy is not None:
                kwargs["strategy"] = strategy
        _lightning_precision(function, kwargs, retarget)
        return
    runtime.HITS[site] += 1
    kwargs["accelerator"] = own
    if own == "cpu":
        devices = kwargs.get("devices")
        if isinstance(devices, (list, tuple)):
            kwargs["devices"] = max(1, len(devices))
        elif devices == -1 or devices == "-1":
            kwargs["devices"] = 1  # "every GPU": the CPU is one device


#: Lightning's mixed-precision flags, and the autocast dtype each asks for on CUDA.
_LIGHTNING_MIXED = {"16-mixed": "float16", "16": "float16", 16: "float16", "bf16-mixed": "bfloat16", "bf16": "bfloat16"}


def _lightning_precision(function, kwargs: dict, retarget) -> None:
    """`precision="16-mixed"` with the target's Lightning Accelerator: Lightning autocasts on 'cuda'
    for any accelerator that is not the CPU (off CUDA: a warning, then fp32); its documented
    `plugins=[MixedPrecision(precision, device)]` autocasts on the target instead, with the dtype the
    precision policy makes of CUDA's (bf16 where the target prefers it under `auto`)."""
    import importlib

    import torch

    from torchport.retarget import amp

    flag = kwargs.get("precision")
    package = _lightning_package(function)
    if flag not in _LIGHTNING_MIXED or package is None:
        return
    try:
        mixed = importlib.import_module(package + ".plugins").MixedPrecision
    except (ImportError, AttributeError):
        return
    effective = amp.effective_dtype(getattr(torch, _LIGHTNING_MIXED[flag]))
    topic = f"precision={flag!r} in PyTorch Lightning"
    if effective is None:
        kwargs["precision"] = "32-true"
        retarget.decide(topic, f"32-true on {retarget.backend.name} (the precision policy turns autocast off)")
        return
    precision = "bf16-mixed" if effective is torch.bfloat16 else "16-mixed"
    scaler = None
    if precision == "16-mixed":
        scaler = amp.target_grad_scaler()
    plugins = kwargs.get("plugins") or []
    plugins = list(plugins) if isinstance(plugins, (list, tuple)) else [plugins]
    kwargs["plugins"] = [*plugins, mixed(precision, device=retarget.type, scaler=scaler)]
    del kwargs["precision"]
    otherwise = ("it would run bf16-mixed on the CPU" if retarget.type == "cpu"
                 else "it autocasts on 'cuda' otherwise")
    retarget.decide(topic, f"{precision} autocast on {retarget.backend.name} (Lightning's MixedPrecision plugin "
                           f"for device {retarget.type!r}; {otherwise})")


#: (module of Lightning's Accelerator base, where the callee's module starts with the prefix)
_ACCELERATOR_BASES = (
    ("lightning.fabric", "lightning.fabric.accelerators"),
    ("lightning", "lightning.pytorch.accelerators"),
    ("lightning_fabric", "lightning_fabric.accelerators"),
    ("pytorch_lightning", "pytorch_lightning.accelerators"),
)
_ACCELERATOR_CLASSES: dict[str, type] = {}


def _lightning_package(function) -> str | None:
    """'lightning.pytorch', 'lightning.fabric', ...: the Lightning package `function` is from (None: not Lightning's)."""
    from torchport.retarget.destination import module_of

    module = module_of(function) or ""
    for prefix, base_module in _ACCELERATOR_BASES:
        if module == prefix or module.startswith(prefix + "."):
            return base_module.rsplit(".", 1)[0]
    return None


def _target_accelerator(function, backend):
    """An instance of Lightning's `Accelerator` API for the target, for the Lightning `function` is from.

    Lightning takes an Accelerator instance for `accelerator=` (its documented way to add a device);
    this one places on the target backend's devices. None when the callee is not Lightning's.
    """
    import importlib

    package = _lightning_package(function)
    if package is None:
        return None
    base_module = package + ".accelerators"
    cls = _ACCELERATOR_CLASSES.get(base_module)
    if cls is None:
        try:
            base = importlib.import_module(base_module).Accelerator
        except (ImportError, AttributeError):
            return None
        cls = _ACCELERATOR_CLASSES[base_module] = _accelerator_class(base, backend)
    return cls()


def _single_device_strategy(function, device):
    import importlib

    package = _lightning_package(function)
    if package is None:
        return None
    try:
        return importlib.import_module(package + ".strategies").SingleDeviceStrategy(device=device)
    except (ImportError, AttributeError):
        return None


def _accelerator_class(base: type, backend) -> type:
    import torch

    device_type = backend.device_type

    def count() -> int:
        return max(1, backend.device_count()) if backend.is_accelerator() else 1

    def indices(devices) -> list[int]:
        if devices in ("auto", -1, "-1", None):
            return list(range(count()))
        if isinstance(devices, str):
            devices = [int(item) for item in devices.split(",") if item.strip()] if "," in devices else int(devices)
        if isinstance(devices, int):
            return list(range(devices))
        return [int(item) for item in devices]

    class TargetAccelerator(base):
        """Lightning's Accelerator for torchport's target (placement only; stats are not collected)."""

        def setup_device(self, device) -> None:
            if torch.device(device).type != device_type:
                raise ValueError(f"Device should be {device_type!r}, got {device} instead.")

        def teardown(self) -> None:
            pass

        def get_device_stats(self, device) -> dict:
            return {}

        @staticmethod
        def parse_devices(devices):
            return indices(devices)

        @staticmethod
        def get_parallel_devices(devices):
            return [torch.device(device_type, index) for index in indices(devices)]

        @staticmethod
        def auto_device_count() -> int:
            return count()

        @staticmethod
        def is_available() -> bool:
            return True

        @staticmethod
        def name() -> str:
            return f"torchport-{backend.name}"

        @classmethod
        def register_accelerators(cls, accelerator_registry) -> None:
            return None

    TargetAccelerator.__name__ = TargetAccelerator.__qualname__ = f"{backend.name.replace('-', '_')}_accelerator"
    return TargetAccelerator
