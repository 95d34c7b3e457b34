"""Sweeps of the emulated device against the CPU: every OpInfo op and every torch.nn module class.

Each case ends in exactly one status:

- ``agreeing``: the device's results equal the CPU's (values, dtypes, shapes; gradients for modules);
- ``refused by profile``: the device raised the target's error (EmulatedDeviceError): the profile
  says the target lacks the op, dtype or layout;
- ``not emulated``: the device raised NotEmulatedError, naming what the emulator cannot run yet;
- ``wrong``: the device returned something the CPU did not (must never happen);
- ``crashed``: any other exception on the device where the CPU ran (must never happen);
- ``not applicable``: the CPU itself rejects the case (or it has no float32 sample), so there is
  nothing to compare against. Counted and listed, never hidden.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

import torch
from torch.utils import _pytree as pytree

from torchport import emulated
from torchport.emulated.errors import NotEmulatedError
from torchport.errors import EmulatedDeviceError

DEVICE = emulated.DEVICE_TYPE
STATUSES = ("agreeing", "refused by profile", "not emulated", "wrong", "crashed", "not applicable")


@dataclasses.dataclass
class Outcome:
    name: str
    status: str
    detail: str = ""


@dataclasses.dataclass
class Sweep:
    title: str
    outcomes: list[Outcome] = dataclasses.field(default_factory=list)

    def counts(self) -> Counter:
        return Counter(outcome.status for outcome in self.outcomes)

    def named(self, status: str) -> list[Outcome]:
        return [outcome for outcome in self.outcomes if outcome.status == status]

    def table(self) -> str:
        counts = self.counts()
        lines = [f"{self.title}: {len(self.outcomes)} cases"]
        lines += [f"  {status:<20} {counts.get(status, 0):>5}" for status in STATUSES]
        for status in ("refused by profile", "not emulated", "wrong", "crashed", "not applicable"):
            for outcome in self.named(status):
                lines.append(f"  [{status}] {outcome.name}: {outcome.detail[:160]}")
        return "\n".join(lines)


def _host(value):
    if isinstance(value, torch.Tensor):
        if value.layout != torch.strided:
            return value.to_dense().cpu() if value.device.type != "cpu" else value.to_dense()
        return value.cpu()
    return value


def difference(expected, actual, values: bool = True, on_device: bool = True) -> str:
    """'' when `actual` (device results) agrees with `expected` (CPU results), else what differs.

    `values=False` compares dtypes and shapes only (ops whose values are undefined, such as empty);
    `on_device` requires the device's tensor results on the device, so a case that silently ran on
    the CPU cannot pass as agreement.
    """
    expected_leaves, expected_spec = pytree.tree_flatten(expected)
    actual_leaves, actual_spec = pytree.tree_flatten(actual)
    if expected_spec != actual_spec:
        return f"output structure {actual_spec} != {expected_spec}"
    tensors = [leaf for leaf in actual_leaves if isinstance(leaf, torch.Tensor)]
    if on_device and tensors and not any(leaf.device.type == DEVICE for leaf in tensors):
        return "no tensor result is on the device: the case did not run there"
    for index, (want, got) in enumerate(zip(expected_leaves, actual_leaves)):
        if isinstance(want, torch.Tensor) != isinstance(got, torch.Tensor):
            return f"output {index}: {type(got).__name__} instead of {type(want).__name__}"
        if isinstance(want, torch.Tensor):
            want, got = _host(want), _host(got)
            if want.dtype != got.dtype or want.shape != got.shape:
                return f"output {index}: {got.dtype}{tuple(got.shape)} instead of {want.dtype}{tuple(want.shape)}"
            if not values:
                continue
            try:
                torch.testing.assert_close(got, want, equal_nan=True, rtol=1e-5, atol=1e-6)
            except AssertionError as error:
                return f"output {index}: " + " ".join(str(error).split())[:200]
        elif want != got and not (isinstance(want, float) and want != want and got != got):
            return f"output {index}: {got!r} instead of {want!r}"
    return ""


def classify(name: str, run_cpu, run_device, values: bool = True) -> Outcome:
    """Run the case on the CPU, then on the device (same seed), and say which status it ends in."""
    try:
        torch.manual_seed(0)
        expected = run_cpu()
    except Exception as error:  # the case itself is invalid: nothing to compare against
        return Outcome(name, "not applicable", f"the CPU rejects it: {type(error).__name__}: {error}".splitlines()[0])
    try:
        torch.manual_seed(0)
        actual = run_device()
    except NotEmulatedError as error:
        return Outcome(name, "not emulated", str(error))
    except EmulatedDeviceError as error:
        return Outcome(name, "refused by profile", str(error))
    except Exception as error:
        return Outcome(name, "crashed", f"{type(error).__name__}: {' '.join(str(error).split())}")
    problem = difference(expected, actual, values=values)
    return Outcome(name, "wrong", problem) if problem else Outcome(name, "agreeing")


def same_inputs(cpu_sample, device_sample) -> bool:
    """Whether two samples hold equal tensors (non-tensor leaves such as device names may differ)."""
    cpu_leaves, cpu_spec = pytree.tree_flatten(cpu_sample)
    device_leaves, device_spec = pytree.tree_flatten(device_sample)
    if cpu_spec != device_spec:
        return False
    for want, got in zip(cpu_leaves, device_leaves):
        if isinstance(want, torch.Tensor) != isinstance(got, torch.Tensor):
            return False
        if isinstance(want, torch.Tensor):
            got = _host(got)
            if want.layout != torch.strided:
                want = want.to_dense()
            if want.dtype != got.dtype or want.shape != got.shape or not torch.equal(want.nan_to_num(0), got.nan_to_num(0)):
                return False
    return True


# -- the OpInfo sweep -------------------------------------------------------------------------------

#: OpInfo ops whose results hold uninitialised memory: only dtypes and shapes are compared.
UNDEFINED_VALUES = frozenset({"empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided"})


def _samples(op, device: str, count: int, requires_grad: bool = False) -> list:
    torch.manual_seed(0)
    samples = []
    for sample in op.sample_inputs(device, torch.float32, requires_grad=requires_grad):
        samples.append([sample.input, sample.args, sample.kwargs])
        if len(samples) == count:
            break
    return samples


def _forward(op):
    def run(sample):
        return op(sample[0], *sample[1], **sample[2])

    return run


def _forward_and_gradients(op):
    """Outputs and the gradients of their sum with respect to every input that requires grad."""

    def run(sample):
        output = op(sample[0], *sample[1], **sample[2])
        outputs = [leaf for leaf in pytree.tree_leaves(output)
                   if isinstance(leaf, torch.Tensor) and leaf.requires_grad and leaf.is_floating_point()]
        inputs = [leaf for leaf in pytree.tree_leaves(sample) if isinstance(leaf, torch.Tensor) and leaf.requires_grad]
        if not outputs or not inputs:
            return output, []
        return output, list(torch.autograd.grad(sum(leaf.sum() for leaf in outputs), inputs, allow_unused=True))

    return run


def sweep_ops(ops, samples_per_op: int, backward: bool = False) -> Sweep:
    """The first `samples_per_op` float32 samples of every op, on the CPU and on the device.

    With `backward`, every op that supports autograd also has the gradients of its outputs' sum
    compared (with respect to each input that requires grad).

    Device samples are made by OpInfo on the device from the same seed (so OpInfo decides which
    tensors belong on the device, as for CUDA); where their values differ from the CPU's (an
    emulator gap in a factory op would show here), the CPU sample is moved to the device instead.
    """
    kind = "forward and backward" if backward else "forward"
    sweep = Sweep(f"OpInfo ops, float32, {kind}, first {samples_per_op} samples each")
    for op in ops:
        name = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
        if torch.float32 not in op.supported_dtypes("cpu"):
            sweep.outcomes.append(Outcome(name, "not applicable", "no float32 kernel on the CPU"))
            continue
        if backward and not op.supports_autograd:
            sweep.outcomes.append(Outcome(name, "not applicable", "not differentiable"))
            continue
        run = _forward_and_gradients(op) if backward else _forward(op)
        cpu_samples = _samples(op, "cpu", samples_per_op, backward)
        if not cpu_samples:
            sweep.outcomes.append(Outcome(name, "not applicable", "no float32 sample"))
            continue
        try:
            device_samples = _samples(op, DEVICE, samples_per_op, backward)
        except (NotEmulatedError, EmulatedDeviceError):
            device_samples = []
        for index, cpu_sample in enumerate(cpu_samples):
            device_sample = device_samples[index] if index < len(device_samples) else None
            if device_sample is None or not same_inputs(cpu_sample, device_sample):
                device_sample = pytree.tree_map(_leaf_on(DEVICE), cpu_sample)
            sweep.outcomes.append(
                classify(
                    f"{name}[{index}]",
                    lambda sample=cpu_sample: run(sample),
                    lambda sample=device_sample: run(sample),
                    values=op.name not in UNDEFINED_VALUES,
                )
            )
    return sweep


# -- the torch.nn module sweep ----------------------------------------------------------------------

#: torch.nn classes that compute nothing themselves (containers, abstract bases) or need several
#: processes (SyncBatchNorm, DataParallel over devices): the reason is reported with them.
NOT_A_COMPUTATION = {
    "Container": "a deprecated container base class",
    "Module": "the base class",
    "ModuleDict": "a container", "ModuleList": "a container", "ParameterDict": "a container",
    "ParameterList": "a container", "Sequential": "a container (its members are swept)",
    "RNNBase": "an abstract base (RNN, LSTM and GRU are swept)",
    "RNNCellBase": "an abstract base (RNNCell, LSTMCell and GRUCell are swept)",
    "DataParallel": "replicates over several devices; the emulated target has one",
    "SyncBatchNorm": "needs a process group (its forward raises without one, on every device)",
}


def _extra_modules():
    """Constructors and inputs of the torch.nn classes without a usable ModuleInfo entry (built on the CPU)."""
    nn = torch.nn
    randn = torch.randn

    def unpool(dims):
        pool = (nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d)[dims - 1](2, return_indices=True)
        values, indices = pool(randn(1, 2, *([4] * dims)))
        return (values.detach().requires_grad_(), indices)

    log_probs = torch.log_softmax(randn(2, 3, 4, 4), 1).detach().requires_grad_()
    return {
        "AdaptiveLogSoftmaxWithLoss": (lambda: nn.AdaptiveLogSoftmaxWithLoss(8, 10, [4, 8]),
                                       lambda: (randn(4, 8, requires_grad=True), torch.randint(0, 10, (4,)))),
        "AlphaDropout": (lambda: nn.AlphaDropout(0.5), lambda: (randn(4, 5, requires_grad=True),)),
        "ChannelShuffle": (lambda: nn.ChannelShuffle(2), lambda: (randn(1, 4, 2, 2, requires_grad=True),)),
        "CosineSimilarity": (nn.CosineSimilarity, lambda: (randn(3, 5, requires_grad=True), randn(3, 5))),
        "CrossMapLRN2d": (lambda: nn.CrossMapLRN2d(3), lambda: (randn(2, 4, 3, 3, requires_grad=True),)),
        "Dropout": (nn.Dropout, lambda: (randn(4, 5, requires_grad=True),)),
        "Dropout1d": (nn.Dropout1d, lambda: (randn(2, 3, 4, requires_grad=True),)),
        "Dropout2d": (nn.Dropout2d, lambda: (randn(2, 3, 4, 4, requires_grad=True),)),
        "Dropout3d": (nn.Dropout3d, lambda: (randn(2, 3, 2, 2, 2, requires_grad=True),)),
        "FeatureAlphaDropout": (nn.FeatureAlphaDropout, lambda: (randn(2, 3, 4, 4, requires_grad=True),)),
        "EmbeddingBag": (lambda: nn.EmbeddingBag(10, 3, mode="mean"), lambda: (torch.randint(0, 10, (2, 4)),)),
        "Flatten": (nn.Flatten, lambda: (randn(2, 3, 4, requires_grad=True),)),
        "Unflatten": (lambda: nn.Unflatten(1, (2, 2)), lambda: (randn(3, 4, requires_grad=True),)),
        "Fold": (lambda: nn.Fold((4, 4), 2), lambda: (randn(1, 12, 9, requires_grad=True),)),
        "Unfold": (lambda: nn.Unfold(2), lambda: (randn(1, 3, 4, 4, requires_grad=True),)),
        # ModuleInfo's samples for these pass float64 random samples with float32 inputs
        "FractionalMaxPool2d": (lambda: nn.FractionalMaxPool2d(2, output_size=(2, 2)),
                                lambda: (randn(1, 2, 5, 5, requires_grad=True),)),
        "FractionalMaxPool3d": (lambda: nn.FractionalMaxPool3d(2, output_size=(2, 2, 2)),
                                lambda: (randn(1, 2, 5, 5, 5, requires_grad=True),)),
        "Hardsigmoid": (nn.Hardsigmoid, lambda: (randn(4, 5, requires_grad=True),)),
        "Identity": (nn.Identity, lambda: (randn(3, requires_grad=True),)),
        "LazyBatchNorm1d": (nn.LazyBatchNorm1d, lambda: (randn(4, 3, requires_grad=True),)),
        "LazyBatchNorm2d": (nn.LazyBatchNorm2d, lambda: (randn(2, 3, 4, 4, requires_grad=True),)),
        "LazyBatchNorm3d": (nn.LazyBatchNorm3d, lambda: (randn(2, 3, 2, 2, 2, requires_grad=True),)),
        "LazyInstanceNorm1d": (lambda: nn.LazyInstanceNorm1d(affine=True), lambda: (randn(2, 3, 4, requires_grad=True),)),
        "LazyInstanceNorm2d": (lambda: nn.LazyInstanceNorm2d(affine=True), lambda: (randn(2, 3, 4, 4, requires_grad=True),)),
        "LazyInstanceNorm3d": (lambda: nn.LazyInstanceNorm3d(affine=True),
                               lambda: (randn(2, 3, 2, 2, 2, requires_grad=True),)),
        "LazyLinear": (lambda: nn.LazyLinear(4), lambda: (randn(3, 5, requires_grad=True),)),
        "MaxUnpool1d": (lambda: nn.MaxUnpool1d(2), lambda: unpool(1)),
        "MaxUnpool2d": (lambda: nn.MaxUnpool2d(2), lambda: unpool(2)),
        "MaxUnpool3d": (lambda: nn.MaxUnpool3d(2), lambda: unpool(3)),
        "NLLLoss2d": (nn.NLLLoss2d, lambda: (log_probs, torch.randint(0, 3, (2, 4, 4)))),
        "PairwiseDistance": (nn.PairwiseDistance, lambda: (randn(3, 5, requires_grad=True), randn(3, 5))),
        "PixelShuffle": (lambda: nn.PixelShuffle(2), lambda: (randn(1, 4, 2, 2, requires_grad=True),)),
        "PixelUnshuffle": (lambda: nn.PixelUnshuffle(2), lambda: (randn(1, 1, 4, 4, requires_grad=True),)),
        "RReLU": (nn.RReLU, lambda: (randn(4, 5, requires_grad=True),)),
        # In eval mode with a padding mask, TransformerEncoder takes the nested-tensor fast path.
        "TransformerEncoder": (lambda: nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0,
                                                                                       batch_first=True), 2),
                               lambda: (randn(2, 5, 8, requires_grad=True), None,
                                        torch.tensor([[False] * 5, [False] * 3 + [True] * 2]))),
        "TransformerDecoder": (lambda: nn.TransformerDecoder(nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0), 2),
                               lambda: (randn(3, 2, 8, requires_grad=True), randn(4, 2, 8))),
        "TripletMarginLoss": (nn.TripletMarginLoss, lambda: (randn(3, 5, requires_grad=True), randn(3, 5), randn(3, 5))),
        "TripletMarginWithDistanceLoss": (nn.TripletMarginWithDistanceLoss,
                                          lambda: (randn(3, 5, requires_grad=True), randn(3, 5), randn(3, 5))),
        "Upsample": (lambda: nn.Upsample(scale_factor=2), lambda: (randn(1, 1, 2, 2, requires_grad=True),)),
        "UpsamplingBilinear2d": (lambda: nn.UpsamplingBilinear2d(scale_factor=2),
                                 lambda: (randn(1, 1, 2, 2, requires_grad=True),)),
        "UpsamplingNearest2d": (lambda: nn.UpsamplingNearest2d(scale_factor=2),
                                lambda: (randn(1, 1, 2, 2, requires_grad=True),)),
    }


def _leaf_on(device: str):
    """Inputs as leaves on `device` (so both sides' input gradients are kept alike)."""

    def leaf(value):
        if isinstance(value, torch.Tensor):
            return value.detach().to(device).requires_grad_(value.requires_grad)
        return value

    return leaf


def _forward_backward(module, args, kwargs):
    """Outputs, input gradients and parameter gradients of one training step's forward and backward."""
    output = module(*args, **kwargs)
    floats = [leaf for leaf in pytree.tree_leaves(output)
              if isinstance(leaf, torch.Tensor) and leaf.is_floating_point() and leaf.requires_grad]
    if floats:
        sum(leaf.float().sum() for leaf in floats).backward()
    inputs = [leaf for leaf in pytree.tree_leaves((args, kwargs)) if isinstance(leaf, torch.Tensor) and leaf.requires_grad]
    return {
        "output": output,
        "input_grads": [leaf.grad for leaf in inputs],
        "parameter_grads": {name: parameter.grad for name, parameter in module.named_parameters()},
    }


def _forward_eval(module, args, kwargs):
    """Outputs of an inference forward (eval mode, no autograd: the path fused fast paths take)."""
    with torch.no_grad():
        return module(*args, **kwargs)


def _module_case(name: str, build, make_args, training: bool = True) -> Outcome:
    torch.manual_seed(0)
    try:
        module = build()
        args, kwargs = make_args()
    except Exception as error:
        return Outcome(name, "not applicable", f"the CPU rejects it: {type(error).__name__}: {error}".splitlines()[0])
    module.train(training)
    torch.manual_seed(0)
    device_module = build().train(training)  # built again from the same seed (lazy modules cannot be copied)
    step = _forward_backward if training else _forward_eval
    device_args = pytree.tree_map(_leaf_on(DEVICE), (args, kwargs))
    args, kwargs = pytree.tree_map(_leaf_on("cpu"), (args, kwargs))

    def run_device():
        moved = device_module.to(DEVICE)
        return step(moved, *device_args)

    return classify(name, lambda: step(module, args, kwargs), run_device)


def nn_classes() -> list[type]:
    """Every torch.nn.Module subclass torch.nn exports."""
    import inspect

    classes = {value for value in vars(torch.nn).values()
               if inspect.isclass(value) and issubclass(value, torch.nn.Module)}
    return sorted(classes, key=lambda cls: cls.__name__)


def sweep_nn_modules(samples_per_module: int) -> Sweep:
    """Forward and backward of every torch.nn class on the CPU and on the device, in training mode."""
    from torch.testing._internal.common_modules import module_db

    sweep = Sweep(f"torch.nn modules, float32, first {samples_per_module} inputs each: training forward and"
                  " backward, and eval forward")
    infos: dict[type, list] = {}
    for info in module_db:
        infos.setdefault(info.module_cls, []).append(info)
    extra = _extra_modules()
    for cls in nn_classes():
        name = cls.__name__
        if name in NOT_A_COMPUTATION:
            sweep.outcomes.append(Outcome(name, "not applicable", NOT_A_COMPUTATION[name]))
            continue
        if cls in infos:
            for info in infos[cls]:
                torch.manual_seed(0)
                inputs = info.module_inputs_func(info, device="cpu", dtype=torch.float32, requires_grad=True, training=True)
                for index, module_input in enumerate(inputs[:samples_per_module]):
                    constructor = module_input.constructor_input
                    forward = module_input.forward_input
                    variant = f"{name}{'.' + info.variant_name if getattr(info, 'variant_name', '') else ''}[{index}]"
                    for training in (True, False):
                        sweep.outcomes.append(_module_case(
                            variant + ("" if training else ".eval"),
                            lambda cls=cls, constructor=constructor: cls(*constructor.args, **constructor.kwargs),
                            lambda forward=forward: (forward.args, forward.kwargs),
                            training,
                        ))
        if name in extra:
            build, make_args = extra[name]
            for training in (True, False):
                sweep.outcomes.append(_module_case(f"{name}[0]{'' if training else '.eval'}", build,
                                                   lambda make_args=make_args: (make_args(), {}), training))
        if cls not in infos and name not in extra:
            sweep.outcomes.append(Outcome(name, "crashed", "no sample: add it to the sweep's table of extra modules"))
    return sweep
