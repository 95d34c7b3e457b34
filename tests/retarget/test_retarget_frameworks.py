"""Libraries that choose the device themselves (transformers Trainer, Accelerate, Lightning) run on
the target under retargeting, steered through their own settings, and the report says so.

The end-to-end tests need the library installed (they are skipped otherwise: none of these is a
dependency of torchport); the decisions from the profiles are tested without them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import types

import pytest
from gloo_teardown import TEARDOWN_ABORT, relaunched

from torchport import backends
from torchport.retarget import frameworks
from torchport.retarget.report import Recorder
from torchport.retarget.state import Retarget


def _decisions(report: dict) -> dict:
    """The report's decisions of any kind, by topic."""
    return {entry["topic"]: entry["decision"] for entry in report["decisions"]}


def _installed(*names: str) -> bool:
    return all(importlib.util.find_spec(name) is not None for name in names)


def _retarget(device: str) -> Retarget:
    return Retarget(backend=backends.resolve(device), precision="keep", recorder=Recorder())


def _installed_only(*packages):
    return lambda name: name in packages


# -- decisions from the profiles (no library needed) ------------------------------------------------
def test_profile_names_the_target_in_each_framework_and_an_emulated_twin_has_none():
    assert frameworks.framework_names(backends.get("xla")) == {"accelerate": "xla", "lightning": "tpu", "safetensors": "xla"}
    assert "safetensors" not in frameworks.framework_names(backends.get("neuron"))  # safetensors has no neuron device
    assert frameworks.framework_names(backends.get("cpu"))["lightning"] == "cpu"
    assert "lightning" not in frameworks.framework_names(backends.get("neuron"))
    # the libraries know the real device, not torchport's `emulated` one
    assert frameworks.framework_names(backends.get("xla-emulated")) == {}


@pytest.fixture
def imported(monkeypatch):
    """Make the named modules look imported by the program (decisions about a library are reported
    only then), without importing the real library."""
    def make(*names):
        for name in names:
            monkeypatch.setitem(sys.modules, name, sys.modules.get(name) or types.ModuleType(name))
    return make


def test_cpu_target_steers_accelerate_and_lightning_through_their_settings_and_reports_it(imported):
    retarget, environ = _retarget("cpu"), {}
    frameworks.steer(retarget, environ, installed=_installed_only("accelerate", "pytorch_lightning"))
    assert environ == {"ACCELERATE_USE_CPU": "true", "PL_TRAINER_ACCELERATOR": "cpu"}
    imported("accelerate", "pytorch_lightning")
    report = retarget.recorder.to_dict()
    assert not report["redirected"]  # settings, not CUDA usages of the application
    assert "ACCELERATE_USE_CPU=true" in _decisions(report)["device of Accelerate / transformers Trainer"]
    assert "PL_TRAINER_ACCELERATOR=cpu" in _decisions(report)["device of PyTorch Lightning"]
    summary = retarget.recorder.summary()
    assert "  device: device of Accelerate / transformers Trainer: " in summary, summary
    assert "precision" not in summary.split("device of Accelerate")[0].splitlines()[-1], summary


def test_a_library_the_program_never_imported_is_steered_but_not_reported(monkeypatch):
    retarget, environ = _retarget("cpu"), {}
    monkeypatch.delitem(sys.modules, "accelerate", raising=False)
    frameworks.steer(retarget, environ, installed=_installed_only("accelerate"))
    assert environ == {"ACCELERATE_USE_CPU": "true"}  # in place for an import that may still come
    assert "device of Accelerate" not in retarget.recorder.summary()
    monkeypatch.setitem(sys.modules, "accelerate", types.ModuleType("accelerate"))
    assert "device of Accelerate" in retarget.recorder.summary()


def test_a_second_activation_replaces_the_first_ones_settings_and_does_not_call_them_the_users(imported):
    imported("accelerate")
    environ = {}
    frameworks.steer(_retarget("cpu"), environ, installed=_installed_only("accelerate"))
    assert environ == {"ACCELERATE_USE_CPU": "true"}
    retarget = _retarget("neuron-emulated")
    frameworks.steer(retarget, environ, installed=_installed_only("accelerate"))
    assert environ == {"ACCELERATE_TORCH_DEVICE": str(retarget.device())}
    assert "kept the user's" not in _decisions(retarget.recorder.to_dict())["device of Accelerate / transformers Trainer"]
    frameworks.restore(environ)
    assert environ == {}


def test_accelerator_keyword_of_a_library_other_than_lightning_keeps_its_meaning():
    def fit(**kwargs):  # a torch-based library's own `accelerator=` (not Lightning's)
        return kwargs

    fit.__module__ = "some_trainer_lib.api"
    from torchport.retarget import state

    state.set_current(_retarget("cpu"))
    try:
        kwargs = {"accelerator": "gpu", "devices": [0, 1]}
        frameworks.framework_keywords(fit, kwargs, site=0)
        assert kwargs == {"accelerator": "gpu", "devices": [0, 1]}
    finally:
        state.set_current(None)


def test_emulated_target_is_given_to_accelerate_by_device_and_lightning_says_it_cannot(imported):
    imported("lightning")
    retarget, environ = _retarget("neuron-emulated"), {}
    frameworks.steer(retarget, environ, installed=_installed_only("accelerate", "lightning"))
    assert environ == {"ACCELERATE_TORCH_DEVICE": str(retarget.device())}
    decisions = _decisions(retarget.recorder.to_dict())
    assert "no accelerator of its own for neuron-emulated" in decisions["device of PyTorch Lightning"]


def test_transformers_hub_kernels_are_off_on_an_emulated_target_only(imported):
    # the kernels package refuses device types it does not know ("Unsupported device type 'emulated'")
    imported("transformers")
    retarget, environ = _retarget("neuron-emulated"), {}
    frameworks.steer(retarget, environ, installed=_installed_only("transformers", "kernels"))
    assert environ == {"USE_HUB_KERNELS": "NO"}
    assert "USE_HUB_KERNELS=NO" in _decisions(retarget.recorder.to_dict())["device of transformers hub kernels"]
    environ = {}
    frameworks.steer(_retarget("cpu"), environ, installed=_installed_only("transformers", "kernels"))
    assert environ == {}


def test_a_setting_the_user_made_is_kept_and_named(imported):
    imported("accelerate")
    retarget, environ = _retarget("cpu"), {"ACCELERATE_USE_CPU": "false"}
    frameworks.steer(retarget, environ, installed=_installed_only("accelerate"))
    assert environ == {"ACCELERATE_USE_CPU": "false"}
    decision = _decisions(retarget.recorder.to_dict())["device of Accelerate / transformers Trainer"]
    assert "kept the user's ACCELERATE_USE_CPU='false'" in decision


def test_nothing_is_set_for_libraries_that_are_not_installed():
    retarget, environ = _retarget("cpu"), {}
    assert frameworks.steer(retarget, environ, installed=_installed_only()) == []
    assert environ == {}


@pytest.mark.parametrize("device, precision, given, expected", [
    ("cpu", "keep", {"bf16": True}, {"bf16": True, "use_cpu": True}),
    ("cpu", "fp32", {"fp16": True}, {"fp16": False, "bf16": False, "use_cpu": True}),
    ("cpu", "keep", {"fp16": True, "use_cpu": False}, {"fp16": True, "use_cpu": False}),
    # transformers would refuse bf16 there; its default optimizer, the fused AdamW, is unfused where the
    # target has no fused kernels
    ("neuron-emulated", "bf16", {"fp16": True}, {"fp16": True, "optim": "adamw_torch"}),
    ("neuron-emulated", "keep", {"fp16": True, "optim": "adamw_torch_fused"}, {"fp16": True, "optim": "adamw_torch"}),
    ("neuron-emulated", "keep", {"fp16": True, "optim": "sgd"}, {"fp16": True, "optim": "sgd"}),
    # the evaluation's half type follows the training's; TF32 is NVIDIA's; compile with the target's compiler
    ("cpu", "bf16", {"fp16": True, "fp16_full_eval": True},
     {"fp16": False, "bf16": True, "bf16_full_eval": True, "use_cpu": True}),
    ("cpu", "fp32", {"fp16": True, "fp16_full_eval": True}, {"fp16": False, "bf16": False, "use_cpu": True}),
    ("cpu", "keep", {"bf16": True, "tf32": True}, {"bf16": True, "tf32": None, "use_cpu": True}),
    ("neuron-emulated", "keep", {"torch_compile": True, "torch_compile_mode": "max-autotune"},
     {"torch_compile": True, "torch_compile_backend": "aot_eager", "optim": "adamw_torch"}),
])
def test_training_arguments_precision_follows_the_policy_where_it_leaves_the_application(device, precision, given,
                                                                                         expected):
    from torchport.retarget import runtime, state

    retarget = Retarget(backend=backends.resolve(device), precision=precision, recorder=Recorder())
    state.set_current(retarget)
    try:
        kwargs = dict(given)
        frameworks.training_arguments_keywords(kwargs, runtime.register_site("app.py", 1, "TrainingArguments"))
    finally:
        state.set_current(None)
    assert kwargs == expected
    assert any(topic.startswith("transformers TrainingArguments") for topic in retarget.recorder.decisions)


def test_training_arguments_bf16_on_an_emulated_target_is_named_as_not_emulated():
    # transformers refuses bf16 on devices it does not know with "assign use_cpu": the real reason instead
    from torchport.emulated.errors import NotEmulatedError
    from torchport.retarget import runtime, state

    state.set_current(Retarget(backend=backends.resolve("neuron-emulated"), precision="keep", recorder=Recorder()))
    try:
        with pytest.raises(NotEmulatedError, match="transformers accepts bf16 only on devices it knows"):
            frameworks.training_arguments_keywords({"bf16": True},
                                                   runtime.register_site("app.py", 1, "TrainingArguments"))
    finally:
        state.set_current(None)


# -- end to end ------------------------------------------------------------------------------------
#: a one-layer GPT-2 from a config and a dataset of 8 sequences, for the Trainer programs below
TINY_GPT = """config = GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=50, n_positions=16)
model = GPT2LMHeadModel(config)
class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 8
    def __getitem__(self, i):
        ids = torch.arange(8) % 50
        return {"input_ids": ids, "labels": ids}
"""

TRAINER = """
import sys, torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
{TINY_GPT}if sys.argv[1] == "fp16":  # written out as keywords
    args = TrainingArguments(output_dir="out", per_device_train_batch_size=4, max_steps=2, report_to=[],
                             save_strategy="no", fp16=True)
else:  # from a config dict
    config = dict(output_dir="out", per_device_train_batch_size=4, max_steps=2, report_to=[], save_strategy="no")
    config[sys.argv[1]] = True
    args = TrainingArguments(**config)
trainer = Trainer(model=model, args=args, train_dataset=Data())
computed = []  # what the training forward passes compute in
model.lm_head.register_forward_hook(lambda module, inputs, output: computed.append(str(output.dtype)))
trainer.train()
print("app_sees_cuda=" + str(torch.cuda.is_available()))
print("model=" + next(model.parameters()).device.__str__().split(":")[0])
print("mixed_precision=" + str(trainer.accelerator.mixed_precision))
print("computes_in=" + computed[0])
print("fused=" + str(trainer.optimizer.param_groups[0]["fused"]))
print("scaler=" + str(getattr(trainer.accelerator.scaler, "_scale", None)))
""".replace("{TINY_GPT}", TINY_GPT)


@pytest.mark.skipif(not _installed("transformers", "accelerate"), reason="needs transformers and accelerate")
@pytest.mark.parametrize("device, device_type, precision", [
    ("cpu", "cpu", "fp16"), ("cpu", "cpu", "bf16"), ("neuron-emulated", "emulated", "fp16")])
def test_transformers_trainer_mixed_precision_trains_on_the_target(program, tmp_path, device, device_type, precision):
    # bf16=True without use_cpu=True stops in TrainingArguments on a machine without a GPU; retargeted it runs
    result = program(TRAINER, "--device", device, "--precision", "keep", "--report", "report.json",
                     args=[precision])
    assert result.returncode == 0, result.stderr[-3000:]
    values = result.values()
    assert values["app_sees_cuda"] == "True"
    assert values["model"] == device_type
    assert values["mixed_precision"] == precision
    report = json.loads((tmp_path / "report.json").read_text())
    assert _decisions(report)["device of Accelerate / transformers Trainer"].startswith("run on")
    # the report says what the forward passes compute in: Accelerate runs fp16 autocast only off the CPU
    computes_in = {("cpu", "fp16"): "torch.float32", ("cpu", "bf16"): "torch.bfloat16",
                   ("neuron-emulated", "fp16"): "torch.float16"}[(device, precision)]
    assert values["computes_in"] == computes_in
    decision = _decisions(report)[f"transformers TrainingArguments {precision}=True"]
    assert ("runs in fp32" in decision) == (computes_in == "torch.float32")
    # transformers' default optimizer is the fused AdamW, and fp16 gets a GradScaler: where the target
    # has kernels for neither, the Trainer gets what the application's own code gets there (unfused,
    # a scaler in plain tensor ops), and no kernel the target lacks runs
    lacking = device == "neuron-emulated"
    assert values["fused"] == ("None" if lacking else "True")
    assert ("transformers Trainer's GradScaler" in _decisions(report)) == (lacking and precision == "fp16")
    if lacking:
        assert values["scaler"].startswith("tensor(65536.")  # scaled as on CUDA
    lacks = [entry["topic"] for entry in report["decisions"] if entry["kind"] == "target lacks"]
    assert not [topic for topic in lacks if topic.startswith(("aten::_amp_", "aten::_fused_"))], lacks


SEQ2SEQ_TRAINER = """
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Seq2SeqTrainer, Seq2SeqTrainingArguments
{TINY_GPT}args = Seq2SeqTrainingArguments(output_dir="out", max_steps=1, report_to=[], save_strategy="no", fp16=True)
trainer = Seq2SeqTrainer(model=model, args=args, train_dataset=Data())
print("scaler=" + type(trainer.accelerator.scaler).__module__.split(".")[0])
""".replace("{TINY_GPT}", TINY_GPT)


@pytest.mark.skipif(not _installed("transformers", "accelerate"), reason="needs transformers and accelerate")
def test_a_seq2seq_trainer_gets_the_scaler_a_trainer_gets(program, tmp_path):
    result = program(SEQ2SEQ_TRAINER, "--device", "neuron-emulated", "--precision", "keep", "--report", "report.json")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.values()["scaler"] == "torchport"  # scaling in plain tensor ops: neuron has no GradScaler kernels
    assert "transformers Trainer's GradScaler" in _decisions(json.loads((tmp_path / "report.json").read_text()))


ACCELERATE = """
import os, sys, torch
from accelerate import Accelerator
if sys.argv[1] == "keyword":
    accelerator = Accelerator(mixed_precision="fp16")
elif sys.argv[1] == "disabled":  # the application turned the scaler off itself
    from accelerate.utils import GradScalerKwargs
    accelerator = Accelerator(mixed_precision="fp16", kwargs_handlers=[GradScalerKwargs(enabled=False)])
else:  # `accelerate launch --mixed_precision fp16 train.py` hands it over in the environment
    accelerator = Accelerator()
model = torch.nn.Linear(8, 8)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
x = torch.randn(4, 8, device=accelerator.device)
with accelerator.autocast():
    inner = (x @ x.T).dtype
loss = model(x).float().pow(2).mean()
accelerator.backward(loss)
optimizer.step()
print("device=" + accelerator.device.__str__().split(":")[0])
print("dtype=" + str(inner))
print("scaler=" + str(accelerator.scaler is not None and accelerator.scaler.is_enabled()))
"""


def _cpu_auto_dtype() -> str:
    from torchport.backends.cpu import has_native_bf16

    return "torch.bfloat16" if has_native_bf16() else "torch.float32"


@pytest.mark.skipif(not _installed("accelerate"), reason="needs accelerate")
@pytest.mark.parametrize("form", ["keyword", "environment"])
@pytest.mark.parametrize("device, precision, expected", [
    ("cpu", "keep", ("cpu", "torch.float32", "False", "runs in fp32 on the CPU")),
    ("cpu", "auto", ("cpu", None, "False", "on cpu")),
    ("neuron-emulated", "keep", ("emulated", "torch.float16", "True", "GradScaler kept on neuron-emulated, which has no "
                                                                      "GradScaler kernels")),
    ("neuron-emulated", "auto", ("emulated", "torch.bfloat16", "False", "bf16 autocast on neuron-emulated")),
])
def test_accelerate_fp16_follows_the_precision_policy_and_is_reported(program, tmp_path, form, device, precision,
                                                                      expected):
    # on a GPU machine Accelerator(mixed_precision="fp16") autocasts in fp16 with a GradScaler: on the
    # target it takes what --precision makes of CUDA's fp16 autocast, through Accelerate's own settings
    device_type, dtype, scaler, decision = expected
    result = program(ACCELERATE, "--device", device, "--precision", precision, "--report", "report.json",
                     args=[form], env={"ACCELERATE_MIXED_PRECISION": "fp16"} if form == "environment" else None)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.values() == {"device": device_type, "dtype": dtype or _cpu_auto_dtype(), "scaler": scaler}
    report = json.loads((tmp_path / "report.json").read_text())
    assert decision in _decisions(report)["Accelerate mixed_precision='fp16'"]


@pytest.mark.skipif(not _installed("accelerate"), reason="needs accelerate")
def test_an_accelerate_scaler_the_application_turned_off_stays_off_and_is_reported_so(program, tmp_path):
    result = program(ACCELERATE, "--device", "neuron-emulated", "--precision", "keep", "--report", "report.json",
                     args=["disabled"])
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.values()["scaler"] == "False"
    decision = _decisions(json.loads((tmp_path / "report.json").read_text()))["Accelerate mixed_precision='fp16'"]
    assert "disabled, as the application configured it" in decision and "plain tensor ops" not in decision


ACCELERATE_SMALL_GRADIENTS = """
import torch
from accelerate import Accelerator
accelerator = Accelerator(mixed_precision="fp16")
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
model, optimizer = accelerator.prepare(model, optimizer)
x = torch.randn(4, 8, device=accelerator.device)
before = model[0].weight.detach().clone()
loss = model(x).float().sum() * 1e-8  # gradients below fp16's smallest subnormal unless scaled
accelerator.backward(loss)
print("nonzero=" + str(int((model[0].weight.grad != 0).sum())))
optimizer.step()
print("weights=" + str(model[0].weight.detach().cpu().sum().item()))
print("scale=" + str(accelerator.scaler.get_scale()))
"""


@pytest.mark.skipif(not _installed("accelerate"), reason="needs accelerate")
def test_accelerate_fp16_scales_gradients_on_a_target_without_scaler_kernels_as_the_hand_port(program):
    # a GPU machine (and the hand port on the emulated device) keeps Accelerate's GradScaler: gradients
    # of 1e-8 survive in fp16; the neuron profile has no GradScaler kernels, so the scaler torchport
    # gives Accelerate scales in plain tensor ops, to the same values
    retargeted = program(ACCELERATE_SMALL_GRADIENTS, "--device", "neuron-emulated", "--precision", "keep")
    assert retargeted.returncode == 0, retargeted.stderr[-3000:]
    hand_port = program('from torchport.emulated import activate; activate("neuron")\n' + ACCELERATE_SMALL_GRADIENTS,
                        form="plain", env={"ACCELERATE_TORCH_DEVICE": "emulated:0"})
    assert hand_port.returncode == 0, hand_port.stderr[-3000:]
    assert retargeted.values()["nonzero"] == "64"
    assert retargeted.values() == hand_port.values()


LIGHTNING = """
import torch
try:
    import lightning.pytorch as pl
except ImportError:
    import pytorch_lightning as pl
class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
    def training_step(self, batch, index):
        return self.layer(batch[0]).pow(2).mean()
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)
data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 4)), batch_size=4)
options = dict(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False)
if FORM == "gpu":
    trainer = pl.Trainer(accelerator="gpu", devices=[0], **options)
elif FORM == "auto":
    trainer = pl.Trainer(**options)
else:  # every argument written out, the accelerator left at its default
    trainer = pl.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False)
trainer.fit(Model(), data)
print("device=" + trainer.strategy.root_device.__str__().split(":")[0])
"""


@pytest.mark.skipif(not (_installed("lightning") or _installed("pytorch_lightning")), reason="needs Lightning")
@pytest.mark.parametrize("form, device, device_type", [
    ("gpu", "cpu", "cpu"), ("auto", "cpu", "cpu"), ("gpu", "neuron-emulated", "emulated"),
    ("auto", "neuron-emulated", "emulated"), ("default", "neuron-emulated", "emulated")])
def test_lightning_trainer_for_the_gpu_trains_on_the_target(program, form, device, device_type):
    # neuron-emulated: Lightning has no accelerator for it; an Accelerator subclass on the target places
    # it, also for Trainer() left at accelerator="auto" (the GPU, on a GPU machine)
    result = program(f"FORM = {form!r}\n" + LIGHTNING, "--device", device)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.values()["device"] == device_type


FABRIC = """
import torch
try:
    from lightning import Fabric
except ImportError:
    from lightning_fabric import Fabric
fabric = Fabric(devices=1)
model = fabric.setup(torch.nn.Linear(4, 1))
print("device=" + fabric.device.__str__().split(":")[0])
print("parameters=" + next(model.parameters()).device.__str__().split(":")[0])
"""


@pytest.mark.skipif(not (_installed("lightning") or _installed("lightning_fabric")), reason="needs Lightning Fabric")
def test_lightning_fabric_left_at_auto_runs_on_the_target(program):
    result = program(FABRIC, "--device", "neuron-emulated")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.values() == {"device": "emulated", "parameters": "emulated"}


@pytest.mark.skipif(not (_installed("lightning") or _installed("lightning_fabric")), reason="needs Lightning Fabric")
def test_a_lightning_accelerator_the_user_set_in_the_environment_is_kept(program):
    result = program(FABRIC, "--device", "neuron-emulated", env={"LT_ACCELERATOR": "cpu"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.values()["device"] == "cpu"


def test_an_application_class_named_trainer_keeps_its_own_default(program):
    source = """
    class Trainer:
        def __init__(self, accelerator="auto", devices=1):
            self.accelerator = accelerator
    print("accelerator=" + Trainer().accelerator)
    """
    result = program(source, "--device", "neuron-emulated")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.values() == {"accelerator": "auto"}


def test_framework_defaults_do_nothing_once_retargeting_is_off():
    from torchport.retarget import state

    class Trainer:  # a stand-in for a Lightning class reached from code rewritten earlier
        __module__ = "lightning.pytorch.trainer.trainer"

        def __init__(self, accelerator="auto"):
            pass

    assert state.current() is None
    kwargs = {}
    assert frameworks.framework_defaults(Trainer, (), kwargs, site=0) == ()
    assert kwargs == {}


LIGHTNING_MIXED = """
import torch
try:
    import lightning.pytorch as pl
except ImportError:
    import pytorch_lightning as pl
seen = []
class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
    def training_step(self, batch, index):
        out = self.layer(batch[0])
        seen.append(out.dtype)
        return out.float().pow(2).mean()
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)
data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 4)), batch_size=4)
trainer = pl.Trainer(accelerator="gpu", devices=1, precision="16-mixed", max_epochs=1, logger=False,
                     enable_checkpointing=False, enable_progress_bar=False)
trainer.fit(Model(), data)
print("device=" + trainer.strategy.root_device.__str__().split(":")[0])
print("dtype=" + str(seen[0]))
scaler = getattr(trainer.precision_plugin, "scaler", None)
print("scaler=" + str(scaler is not None and scaler.is_enabled()))
"""


@pytest.mark.skipif(not (_installed("lightning") or _installed("pytorch_lightning")), reason="needs Lightning")
@pytest.mark.parametrize("device, precision, dtype, scaler", [
    ("neuron-emulated", "keep", "torch.float16", "True"), ("neuron-emulated", "auto", "torch.bfloat16", "False"),
    ("cpu", "keep", "torch.float16", "True")])
def test_lightning_mixed_precision_autocasts_as_the_policy_says(program, device, precision, dtype, scaler):
    # Lightning autocasts on 'cuda' for any accelerator but the CPU: off CUDA that is a warning, then fp32;
    # kept fp16 trains with a loss scaler (in plain tensor ops: neuron has no GradScaler kernels). On the
    # CPU Lightning itself turns 16-mixed into bf16-mixed, which --precision keep does not ask for
    result = program(LIGHTNING_MIXED, "--device", device, "--precision", precision)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.values() == {"device": device.replace("neuron-", ""), "dtype": dtype, "scaler": scaler}
    assert "CUDA is not available" not in result.stderr


ACCELERATE_TORCHRUN = """
import os, torch
from accelerate import Accelerator
accelerator = Accelerator()
model = accelerator.prepare(torch.nn.Linear(4, 1).to(accelerator.device))
torch.manual_seed(accelerator.process_index)  # each process its own batch: DDP averages the gradients
model(torch.randn(8, 4, device=accelerator.device)).sum().backward()
gradient = model.module.weight.grad.cpu() if hasattr(model, "module") else model.weight.grad.cpu()
gathered = accelerator.gather(gradient.to(accelerator.device)[None]).cpu()
with open(f"rank{os.environ['LOCAL_RANK']}.txt", "w") as out:
    out.write(f"{accelerator.num_processes} {bool(torch.equal(gathered[0], gathered[-1]))}")
"""


@pytest.mark.skipif(not _installed("accelerate"), reason="needs accelerate")
def test_accelerate_under_torchrun_runs_distributed_or_says_it_cannot(tmp_path):
    # a GPU machine runs 2 processes of Accelerate's MULTI_GPU with averaged gradients. The CPU target
    # rehearses that with Accelerate's MULTI_CPU; Accelerate cannot distribute on a device it does not
    # know (the emulated one): the program stops with the reason rather than train each process alone
    script = tmp_path / "train.py"
    script.write_text(ACCELERATE_TORCHRUN)
    env = {**os.environ, "TORCHPORT_QUIET": "1", "OMP_NUM_THREADS": "1"}
    for device in ("cpu", "neuron-emulated"):
        def launch(device=device):
            return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                                   "-m", "torchport", "run", "--device", device, str(script)],
                                  capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)

        completed = relaunched(launch, lambda outcome: TEARDOWN_ABORT in outcome.stderr)  # gloo's exit abort
        if device == "cpu":
            assert completed.returncode == 0, completed.stderr[-3000:]
            assert [(tmp_path / f"rank{rank}.txt").read_text() for rank in (0, 1)] == ["2 True", "2 True"]
        else:
            assert completed.returncode != 0
            assert "accelerate's distributed run (2 processes)" in completed.stderr
            assert "Rehearse the distributed run with --device cpu" in completed.stderr


FSDP2_TORCHRUN = """
import os, torch, torch.nn as nn, torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from torch.distributed.device_mesh import init_device_mesh
dist.init_process_group("nccl")
rank = dist.get_rank()
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
mesh = init_device_mesh("cuda", (dist.get_world_size(),))  # the FSDP2 tutorial's and torchtitan's mesh
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)).cuda()
for layer in (model[0], model[2]):
    fully_shard(layer, mesh=mesh)
fully_shard(model, mesh=mesh)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
generator = torch.Generator().manual_seed(100 + rank)
for step in range(3):
    x, y = torch.randn(4, 8, generator=generator).cuda(), torch.randn(4, 1, generator=generator).cuda()
    loss = nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
total = sum(p.full_tensor().sum().item() for p in model.parameters())
with open(f"rank{rank}.txt", "w") as out:
    out.write(f"{loss.item():.6f} {total:.6f}")
dist.destroy_process_group()
"""


def test_fsdp2_over_a_cuda_device_mesh_under_torchrun(tmp_path):
    # init_device_mesh("cuda", ...) crashed in torch.cuda.set_device on every target; the CPU target
    # now trains as the gloo hand port does, the emulated device stops with what is not emulated
    env = {**os.environ, "TORCHPORT_QUIET": "1", "OMP_NUM_THREADS": "1"}
    hand_port = FSDP2_TORCHRUN.replace('"nccl"', '"gloo"').replace('init_device_mesh("cuda"', 'init_device_mesh("cpu"') \
        .replace(".cuda()", "").replace('torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))', "")
    results = {}
    for name, source, torchport in (("hand", hand_port, []), ("cpu", FSDP2_TORCHRUN, ["cpu"]),
                                    ("emulated", FSDP2_TORCHRUN, ["neuron-emulated"])):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "train.py").write_text(source)
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
        command += ["-m", "torchport", "run", "--device", *torchport, "train.py"] if torchport else ["train.py"]

        def launch(command=command, folder=folder):
            return subprocess.run(command, capture_output=True, text=True, env=env, cwd=folder, timeout=300)

        completed = relaunched(launch, lambda outcome: TEARDOWN_ABORT in outcome.stderr)
        results[name] = completed
        if name != "emulated":
            assert completed.returncode == 0, completed.stderr[-3000:]
            results[name] = [(folder / f"rank{rank}.txt").read_text() for rank in (0, 1)]
    assert results["cpu"] == results["hand"]
    assert results["emulated"].returncode != 0
    assert "Rehearse FSDP with --device cpu" in results["emulated"].stderr


PIPELINE = """
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, BertConfig, BertForSequenceClassification, pipeline
vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "hello": 4, "world": 5}
tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
tok = PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                              sep_token="[SEP]")
config = BertConfig(vocab_size=6, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
model = BertForSequenceClassification(config).cuda().eval()
classify = pipeline("text-classification", model=model, tokenizer=tok)  # no device: cuda:0 on a GPU machine
label = classify("hello world")[0]["label"]
batch = tok(["hello world"], return_tensors="pt").to("cuda")
with torch.no_grad():
    logits = model(**batch).logits  # the application's own call after the pipeline's
print("model_is_cuda=" + str(next(model.parameters()).is_cuda))
print("label=" + label)
print("logits=" + str(tuple(logits.shape)))
"""


@pytest.mark.skipif(not _installed("transformers", "tokenizers"), reason="needs transformers")
def test_a_pipeline_given_no_device_runs_on_the_target_and_leaves_the_model_there(program):
    # transformers sees no CUDA: it would pick the CPU and move the application's model there in place
    result = program(PIPELINE, "--device", "neuron-emulated")
    assert result.returncode == 0, result.stderr[-3000:]
    values = result.values()
    assert (values["model_is_cuda"], values["logits"]) == ("True", "(1, 2)")
    assert values["label"] in ("LABEL_0", "LABEL_1")


@pytest.mark.skipif(not _installed("transformers", "accelerate"), reason="needs transformers")
def test_training_arguments_tf32_alone_is_a_reported_no_op(program, tmp_path):
    # transformers refuses tf32=True off an Ampere GPU: on the GPU machine the script runs
    result = program("from transformers import TrainingArguments\n"
                     "args = TrainingArguments(output_dir='out', tf32=True, report_to=[])\n"
                     "print('tf32=' + str(args.tf32))\n", "--device", "cpu", "--report", "report.json")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.values() == {"tf32": "None"}
    report = json.loads((tmp_path / "report.json").read_text())
    assert "no-op on cpu" in _decisions(report)["transformers TrainingArguments tf32=True"]


# HF's example scripts (run_clm.py and kin): TrainingArguments from the command line or a JSON file
# through HfArgumentParser, often an application subclass of them, and Trainer saves them with torch.save
OPTIMIZERS = """
import dataclasses
from transformers import HfArgumentParser, Seq2SeqTrainingArguments, TrainingArguments

@dataclasses.dataclass
class AdafactorArguments(TrainingArguments):  # an application's subclass with its own default
    optim: str = "adafactor"

def optim(args):
    return str(getattr(args.optim, "value", args.optim))

print("default=" + optim(TrainingArguments(output_dir="out", report_to=[])))
print("seq2seq=" + optim(Seq2SeqTrainingArguments(output_dir="out", report_to=[], fp16=True)))
print("given_sgd=" + optim(TrainingArguments(output_dir="out", report_to=[], optim="sgd")))
print("given_fused=" + optim(TrainingArguments(output_dir="out", report_to=[], optim="adamw_torch_fused")))
print("subclass=" + optim(AdafactorArguments(output_dir="out", report_to=[], fp16=True)))
(parsed,) = HfArgumentParser((TrainingArguments,)).parse_args_into_dataclasses(["--output_dir", "out"])
print("parsed=" + optim(parsed))
(parsed,) = HfArgumentParser((TrainingArguments,)).parse_args_into_dataclasses(["--output_dir", "out", "--fp16"])
print("parsed_fp16=" + optim(parsed))
"""


@pytest.mark.skipif(not _installed("transformers"), reason="needs transformers")
def test_transformers_fused_adamw_default_is_unfused_where_the_target_has_no_fused_kernels(program, tmp_path):
    # transformers' default optimizer is the fused AdamW (torch >= 2.8), which Neuron's profile says it
    # has no kernels for: unfused, however the arguments are built, as the application's own
    # fused=True is turned off; an optimizer the application chose (its own default too) is kept
    result = program(OPTIMIZERS, "--device", "neuron-emulated", "--report", "report.json")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.values() == {"default": "adamw_torch", "seq2seq": "adamw_torch", "given_sgd": "sgd",
                               "given_fused": "adamw_torch", "subclass": "adafactor", "parsed": "adamw_torch",
                               "parsed_fp16": "adamw_torch"}
    decisions = _decisions(json.loads((tmp_path / "report.json").read_text()))
    assert "transformers TrainingArguments optim left at its default ('adamw_torch_fused')" in decisions
    assert "transformers TrainingArguments optim='adamw_torch_fused'" in decisions  # the line that wrote it
    cpu = program(OPTIMIZERS, "--device", "cpu")  # the CPU has fused kernels
    assert cpu.returncode == 0, cpu.stderr[-3000:]
    assert cpu.values()["default"] == "adamw_torch_fused"


PARSED_ARGUMENTS = """
import copy, dataclasses, sys, torch
from transformers import (GPT2Config, GPT2LMHeadModel, HfArgumentParser, Seq2SeqTrainingArguments, Trainer,
                          TrainingArguments)
import myargs
parser = HfArgumentParser((myargs.ModelArguments, myargs.MyTrainingArguments))
if sys.argv[1].endswith(".json"):
    model_args, args = parser.parse_json_file(sys.argv[1])
elif sys.argv[1] == "code":  # the application's subclass built in the code (LLaVA/FastChat-style)
    model_args = myargs.ModelArguments(model_name="gpt")
    args = myargs.MyTrainingArguments(output_dir="out", per_device_train_batch_size=4, max_steps=1, report_to=[],
                                      save_strategy="no", fp16=True, tf32=True, warm_start=True)
else:
    model_args, args = parser.parse_args_into_dataclasses()
print("kind=" + type(args).__name__ + "," + str(isinstance(args, Seq2SeqTrainingArguments)))
print("copies=" + str(copy.deepcopy(args) == args and type(copy.copy(args)) is myargs.MyTrainingArguments))
print("own_field=" + str(args.warm_start) + "," + model_args.model_name)
print("tf32=" + str(args.tf32))
copied = dataclasses.replace(args, max_steps=2)
{TINY_GPT}trainer = Trainer(model=model, args=copied, train_dataset=Data())
computed = []
model.lm_head.register_forward_hook(lambda module, inputs, output: computed.append(str(output.dtype)))
trainer.train()
print("mixed_precision=" + str(trainer.accelerator.mixed_precision))
print("computes_in=" + computed[0])
torch.save(args, "training_args.bin")
""".replace("{TINY_GPT}", TINY_GPT)

MYARGS = """
from dataclasses import dataclass, field
from transformers import Seq2SeqTrainingArguments

@dataclass
class ModelArguments:
    model_name: str = field(default="tiny")

@dataclass
class MyTrainingArguments(Seq2SeqTrainingArguments):
    warm_start: bool = field(default=False)
"""


@pytest.mark.skipif(not _installed("transformers", "accelerate"), reason="needs transformers and accelerate")
@pytest.mark.parametrize("source", ["command_line", "json", "code"])
def test_training_arguments_parsed_by_hf_argument_parser_are_steered(program, tmp_path, source):
    # `--fp16 --tf32 True` from the command line (or a JSON file) is the same request as
    # TrainingArguments(fp16=True, tf32=True) in the code: tf32 stopped the run in transformers'
    # own check ("--tf32 requires Ampere"), and fp16 ran in fp32 outside the precision policy; so
    # is the application's own subclass built in its code (it was not steered); the arguments are
    # the application's class (equal to their copies, which they were not)
    from torchport.backends.cpu import has_native_bf16

    (tmp_path / "myargs.py").write_text(MYARGS)
    given = dict(output_dir="out", per_device_train_batch_size=4, max_steps=1, report_to=[], save_strategy="no",
                 fp16=True, tf32=True, warm_start=True, model_name="gpt")
    if source == "json":
        (tmp_path / "args.json").write_text(json.dumps(given))
        args = ["args.json"]
    elif source == "code":
        args = ["code"]
    else:
        args = ["--output_dir", "out", "--per_device_train_batch_size", "4", "--max_steps", "1", "--report_to",
                "none", "--save_strategy", "no", "--fp16", "--tf32", "True", "--warm_start", "--model_name", "gpt"]
    result = program(PARSED_ARGUMENTS, "--device", "cpu", "--precision", "auto", "--report", "report.json",
                     args=args)
    assert result.returncode == 0, result.stderr[-3000:]
    values = result.values()
    assert values["kind"] == "MyTrainingArguments,True" and values["own_field"] == "True,gpt"
    assert values["copies"] == "True"
    assert values["tf32"] == "None"
    bf16 = has_native_bf16()
    assert values["mixed_precision"] == ("bf16" if bf16 else "no")
    assert values["computes_in"] == ("torch.bfloat16" if bf16 else "torch.float32")
    decisions = _decisions(json.loads((tmp_path / "report.json").read_text()))
    assert decisions["transformers TrainingArguments fp16=True"].startswith("bf16" if bf16 else "fp32")
    assert "no-op on cpu" in decisions["transformers TrainingArguments tf32=True"]
    # what the program saved loads without torchport, as the application's own class
    loaded = subprocess.run([sys.executable, "-c", "import torch; a = torch.load('training_args.bin', "
                             "weights_only=False); print(type(a).__module__, type(a).__name__, a.warm_start)"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert loaded.stdout.split() == ["myargs", "MyTrainingArguments", "True"], loaded.stderr[-2000:]
