"""Models for the serve tests: a deterministic linear model, a faulty one whose faults fire only on a
non-CPU device (the primary), and a perturbed one for shadow mode."""

from __future__ import annotations

import asyncio
import time

import torch

FEATURES = 8
#: Value of inputs[0][0] that makes the primary fail in one way (any other value: a healthy call).
MARKERS = {"error": 1001.0, "timeout": 1002.0, "nonfinite": 1003.0, "oom": 1004.0}


class FaultPlan:
    """Shared by every copy of a FaultyModel (deepcopy keeps the same plan)."""

    def __init__(self, hang_s: float = 0.5):
        self.hang_s = hang_s
        self.down = False
        self.primary_calls = 0

    def __deepcopy__(self, memo):
        return self


class FaultyModel(torch.nn.Module):
    """A linear layer; on a non-CPU device it throws, hangs, returns NaN or raises OOM on marked inputs,
    and fails every call while the plan is down."""

    def __init__(self, plan: FaultPlan):
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(FEATURES, 4)
        self.plan = plan

    def forward(self, inputs):
        outputs = self.linear(inputs)
        if inputs.device.type == "cpu":
            return outputs
        self.plan.primary_calls += 1
        if self.plan.down:
            raise RuntimeError("primary device lost")
        marker = float(inputs[0, 0])
        if marker == MARKERS["error"]:
            raise RuntimeError("kernel failed on the primary")
        if marker == MARKERS["timeout"]:
            time.sleep(self.plan.hang_s)
            return outputs
        if marker == MARKERS["nonfinite"]:
            return outputs * float("nan")
        if marker == MARKERS["oom"]:
            raise torch.OutOfMemoryError("primary out of memory: tried to allocate 2.00 GiB")
        return outputs


class PerturbedModel(torch.nn.Module):
    """A linear layer whose outputs on a non-CPU device are off by `scale` relative noise."""

    def __init__(self, scale: float):
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(FEATURES, 4)
        self.scale = scale

    def forward(self, inputs):
        outputs = self.linear(inputs)
        if inputs.device.type != "cpu" and self.scale:
            generator = torch.Generator().manual_seed(int(inputs.sum().item() * 1000) % (2 ** 31))
            noise = torch.randn(outputs.shape, generator=generator).to(outputs.device)
            outputs = outputs + self.scale * outputs.abs().mean() * noise
        return outputs


def make_linear():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(FEATURES, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def sample(index: int, marker: float | None = None) -> list[list[float]]:
    """A deterministic input row; with `marker`, its first element is that fault marker."""
    generator = torch.Generator().manual_seed(index)
    row = torch.randn(1, FEATURES, generator=generator)
    if marker is not None:
        row[0, 0] = marker
    return row.tolist()


#: The primary of the in-process tests: the emulated Trainium device (a real non-CPU PyTorch device).
PRIMARY = "neuron-emulated"


def faulty(plan: FaultPlan, **options):
    """A Deployment of FaultyModel on PRIMARY with the CPU as fallback (timeout 0.2 s unless given)."""
    from torchport.serve import Deployment

    options.setdefault("timeout_s", 0.2)
    return Deployment(lambda: FaultyModel(plan), primary=PRIMARY, fallback="cpu", **options)


def fallback_answer(deployment, rows):
    """What the fallback device itself answers for `rows`, computed outside the runtime."""
    with torch.inference_mode():
        return deployment.fallback.model()(torch.tensor(rows)).tolist()


#: The two ways a request reaches a Deployment: from a thread, and as `torchport serve` sends it.
FORMS = ("predict", "predict_async")


def ask(deployment, payload, form: str = "predict"):
    """`deployment.predict(payload)`, or `predict_async` awaited in an event loop of its own."""
    if form == "predict_async":
        return asyncio.run(deployment.predict_async(payload))
    return deployment.predict(payload)


def settle(deployment, limit_s: float = 5.0) -> None:
    """Wait until the hung calls a test left behind have returned (a thread still inside a model at
    interpreter exit can abort the process)."""
    deadline = time.monotonic() + limit_s
    while deployment._primary_workers.abandoned and time.monotonic() < deadline:
        time.sleep(0.02)


#: Value of inputs[0][0] that makes SlowModel take SLOW_S seconds on every device.
SLOW_MARKER, SLOW_S = 2001.0, 3.0


class SlowModel(torch.nn.Module):
    """make_linear's model that takes SLOW_S seconds on inputs marked SLOW_MARKER, on any device."""

    def __init__(self):
        super().__init__()
        self.model = make_linear()

    def forward(self, inputs):
        if float(inputs.reshape(-1)[0]) == SLOW_MARKER:
            time.sleep(SLOW_S)
        return self.model(inputs)


def make_slow_model():
    return SlowModel()


def make_slow_loading():
    """A factory that takes two seconds, as a large checkpoint's load does."""
    time.sleep(2.0)
    return make_linear()


class RowsDropped(torch.nn.Module):
    """make_linear's model; while `drop`, on the primary (a non-CPU device) it answers only the first
    row of a batch."""

    def __init__(self):
        super().__init__()
        self.model = make_linear()
        self.drop = False

    def forward(self, inputs):
        outputs = self.model(inputs)
        return outputs[:1] if self.drop and inputs.device.type != "cpu" else outputs


def make_without_its_setting():
    """A factory whose settings helper exits when a variable is missing, as argparse and many
    model-loading helpers do."""
    raise SystemExit(3)


class CatalogueIds(torch.nn.Module):
    """Scores three catalogue items and answers the best one's 64-bit id, held in a buffer (ids beyond
    2**31: a primary computing int64 as int32 would hold them wrapped)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.score = torch.nn.Linear(4, 3)
        self.register_buffer("item_ids", torch.tensor([3_000_000_001, 3_000_000_002, 7_500_000_003]))

    def forward(self, inputs):
        return self.item_ids[self.score(inputs).argmax(-1)]


def make_catalogue_ids():
    return CatalogueIds()
