"""Retargeting to a device that is not the CPU: the emulated Neuron device (PrivateUse1)."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_cuda_program_lands_on_the_emulated_device_and_mixing_with_cpu_fails(program):
    source = """
    import torch
    x = torch.randn(4, 4).cuda()
    model = torch.nn.Linear(4, 2).to("cuda:0")
    print("type=" + x.device.__str__().split(":")[0])
    print("param_type=" + next(model.parameters()).device.__str__().split(":")[0])
    print("is_cuda=" + str(x.is_cuda))
    print("allocated_positive=" + str(torch.cuda.memory_allocated() > 0))
    try:
        x + torch.ones(4, 4)
        print("mixed=allowed")
    except RuntimeError:
        print("mixed=refused")
    print("roundtrip=" + str(torch.equal(x.cpu().cuda().cpu(), x.cpu())))
    """
    result = program(source, "--device", "neuron-emulated")
    assert result.returncode == 0, result.stderr
    values = result.values()
    assert values["type"] == values["param_type"] == "emulated"
    assert values["is_cuda"] == "True"
    assert values["allocated_positive"] == "True"  # the target's own memory statistics
    assert values["mixed"] == "refused"
    assert values["roundtrip"] == "True"


def _train(device, tmp_path):
    result_file = tmp_path / f"{device}.json"
    completed = subprocess.run(
        [sys.executable, "-m", "torchport", "run", "--device", device, "--precision", "keep",
         "train_gpt_cuda.py", "--steps", "6", "--no-amp", "--result", str(result_file),
         "--checkpoint", str(tmp_path / f"{device}.pt")],
        cwd=os.path.join(ROOT, "examples"), capture_output=True, text=True, timeout=600,
        env={**os.environ, "TORCHPORT_QUIET": "1"},
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads(result_file.read_text()), completed.stdout


def test_bundled_training_on_the_emulated_target_tracks_the_cpu(tmp_path):
    emulated, stdout = _train("neuron-emulated", tmp_path)
    cpu, _ = _train("cpu", tmp_path)
    assert "emulated" in stdout  # get_device_name() answered by the target
    # Attention takes the math path on the emulated device and a fused kernel on the CPU:
    # equal to fp32 rounding, not bit for bit.
    for emulated_loss, cpu_loss in zip(emulated["losses"], cpu["losses"]):
        assert abs(emulated_loss - cpu_loss) <= 1e-4 * abs(cpu_loss)
    assert abs(emulated["reloaded_loss"] - cpu["reloaded_loss"]) <= 1e-4 * abs(cpu["reloaded_loss"])


def test_fused_optimizer_follows_the_targets_profile(program, tmp_path):
    source = """
    import torch
    model = torch.nn.Linear(4, 2).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1, fused=True)
    model(torch.ones(3, 4, device="cuda")).sum().backward()
    optimizer.step()
    print("fused=" + str(optimizer.param_groups[0]["fused"]))
    """
    for device, fused in (("neuron-emulated", "False"), ("cpu", "True")):
        report = tmp_path / f"{device}.json"
        result = program(source, "--device", device, "--report", str(report))
        assert result.returncode == 0, result.stderr
        assert result.values()["fused"] == fused  # the neuron profile has no fused kernels; the CPU does
        decisions = {entry["topic"]: entry["kind"] for entry in json.loads(report.read_text())["decisions"]}
        assert (decisions.get("fused optimizers") == "adapted") == (fused == "False"), decisions


def test_ops_the_target_lacks_are_named_once_by_run_with_the_line_that_reached_them(program, tmp_path):
    # aten::nonzero (data-dependent shape) and a fused optimizer's kernel built by a library torchport
    # does not steer: the emulator runs both, which Trainium does not natively: the summary names each
    # once, with the application's line (and the library in between)
    library = tmp_path / "lib"
    library.mkdir()
    (library / "optimizers.py").write_text("import torch\n"
                                           "def build(params):\n"
                                           "    return torch.optim.AdamW(params, lr=0.1, fused=True)\n")
    source = """
    import torch, optimizers
    model = torch.nn.Linear(4, 2).cuda()
    optimizer = optimizers.build(model.parameters())
    for _ in range(2):
        x = torch.randn(3, 4, device="cuda")
        print("kept=" + str(len(torch.nonzero(x > 0))))
        model(x).sum().backward()
        optimizer.step()
    """
    report = tmp_path / "report.json"
    options = ("--device", "neuron-emulated", "--no-scope", str(library), "--report", str(report))
    path = {"PYTHONPATH": os.pathsep.join(filter(None, (str(library), os.environ.get("PYTHONPATH"))))}
    result = program(source, *options, env=path)
    assert result.returncode == 0, result.stderr[-3000:]
    lacks = {entry["topic"]: entry["decision"] for entry in json.loads(report.read_text())["decisions"]
             if entry["kind"] == "target lacks"}
    assert set(lacks) == {"aten::nonzero", "aten::_fused_adamw_"}, lacks
    assert "data-dependent output shape" in lacks["aten::nonzero"]
    assert "First reached at app.py:7;" in lacks["aten::nonzero"]
    assert "no fused optimizer kernels" in lacks["aten::_fused_adamw_"]
    assert "First reached at app.py:9 (through " in lacks["aten::_fused_adamw_"]
    # --strict refuses what the application's own line calls, not what torch's code reaches (printing)
    strict = program("import torch\nx = torch.randn(4, device='cuda')\nprint(x)\nprint('printed=True')\n"
                     "torch.nonzero(x > 0)\n", "--strict", "--device", "neuron-emulated")
    assert strict.values()["printed"] == "True" and strict.returncode != 0
    assert "Op aten::nonzero is unsupported on target 'neuron'" in strict.stderr
    # the CPU target lacks neither
    plain = program(source, "--device", "cpu", "--no-scope", str(library), "--report", str(report), env=path)
    assert plain.returncode == 0, plain.stderr[-3000:]
    assert not [entry for entry in json.loads(report.read_text())["decisions"] if entry["kind"] == "target lacks"]


def test_copies_of_device_tensors_and_storages_moved_by_map_location_work_on_the_emulated_device(program, tmp_path):
    # an EMA copy of a model, copy.deepcopy of a tensor and `map_location=lambda s, loc: s.cuda(0)`
    # all make a storage on the device (these crashed the process before)
    source = f"""
    import copy, torch
    model = torch.nn.Linear(3, 2).cuda()
    ema = copy.deepcopy(model)
    print("ema_device=" + next(ema.parameters()).device.__str__().split(":")[0])
    print("ema_same=" + str(torch.equal(ema(torch.ones(1, 3).cuda()), model(torch.ones(1, 3).cuda()))))
    x = torch.arange(4.0).cuda()
    y = copy.deepcopy(x)
    y.add_(1)
    print("copy=" + str(y.cpu().tolist()) + str(x.cpu().tolist()))
    torch.save({{"w": x}}, {str(tmp_path / "ck.pt")!r})
    loaded = torch.load({str(tmp_path / "ck.pt")!r}, map_location=lambda storage, loc: storage.cuda(0))
    print("loaded=" + loaded["w"].device.__str__().split(":")[0] + str(loaded["w"].cpu().tolist()))
    """
    result = program(source, "--device", "neuron-emulated")
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.values() == {"ema_device": "emulated", "ema_same": "True",
                               "copy": "[1.0, 2.0, 3.0, 4.0][0.0, 1.0, 2.0, 3.0]",
                               "loaded": "emulated[0.0, 1.0, 2.0, 3.0]"}


def test_what_the_program_saves_on_the_target_is_a_checkpoint_saved_on_cuda(program, tmp_path):
    # the way back: the original code on a GPU machine loads it on CUDA; torchport loads it on the target
    checkpoint = tmp_path / "ck.pt"
    source = f"""
    import torch
    x = torch.arange(4.0).cuda()
    torch.save({{"w": x, "host": torch.ones(2)}}, {str(checkpoint)!r})
    torch.save({{"w": x}}, {str(checkpoint) + ".legacy"!r}, _use_new_zipfile_serialization=False)
    back = torch.load({str(checkpoint)!r})
    print("back=" + back["w"].device.__str__().split(":")[0] + "," + back["host"].device.__str__().split(":")[0])
    """
    result = program(source, "--device", "neuron-emulated")
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.values() == {"back": "emulated,cpu"}
    check = ("import sys, torch\n"
             "for path in sys.argv[1:]:\n"
             "    seen = []\n"
             "    data = torch.load(path, map_location=lambda s, location: (seen.append(location), s)[1])\n"
             "    print(sorted(seen), data['w'].tolist())\n"
             "torch.load(sys.argv[1])\n")
    plain = subprocess.run([sys.executable, "-c", check, str(checkpoint), str(checkpoint) + ".legacy"],
                           capture_output=True, text=True, timeout=120)
    assert plain.stdout.splitlines() == ["['cpu', 'cuda:0'] [0.0, 1.0, 2.0, 3.0]", "['cuda:0'] [0.0, 1.0, 2.0, 3.0]"]
    # without CUDA here, torch stops as it stops on any checkpoint saved on a GPU
    assert "Attempting to deserialize object on a CUDA device" in plain.stderr


def test_default_device_forms_place_factories_on_the_emulated_device(program):
    # these built tensors on the CPU while the emulated device wrapped torch's factories
    source = """
    import torch
    with torch.device("cuda"):
        a = torch.zeros(2)
        layer = torch.nn.Linear(2, 2)
    print("context=" + a.device.__str__().split(":")[0] + "," + layer.weight.device.__str__().split(":")[0])
    torch.set_default_device("cuda")
    print("default=" + torch.zeros(2).device.__str__().split(":")[0] + "," + torch.get_default_device().__str__().split(":")[0])
    torch.set_default_device(None)
    torch.set_default_tensor_type(torch.cuda.FloatTensor)
    print("class=" + torch.zeros(2).device.__str__().split(":")[0])
    torch.set_default_tensor_type("torch.cuda.FloatTensor")
    print("string=" + torch.zeros(2).device.__str__().split(":")[0])
    torch.set_default_tensor_type(torch.FloatTensor)
    print("back=" + torch.zeros(2).device.__str__().split(":")[0])
    """
    result = program(source, "--device", "neuron-emulated")
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.values() == {"context": "emulated,emulated", "default": "emulated,emulated",
                               "class": "emulated", "string": "emulated", "back": "cpu"}


def test_dataparallel_runs_its_replica_on_the_emulated_device(program):
    # torch's DataParallel scatters with CUDA-only collectives (torch._C._scatter) off CUDA
    source = """
    import torch, torch.nn as nn
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU())
    if torch.cuda.device_count() >= 1:
        model = nn.DataParallel(model, device_ids=list(range(torch.cuda.device_count())))
    model = model.cuda()
    out = model(torch.ones(5, 4))
    out.sum().backward()
    print("out=" + out.device.__str__().split(":")[0] + str(tuple(out.shape)) + str(model.device_ids) + str(model.output_device))
    print("grad=" + model.module[0].weight.grad.device.__str__().split(":")[0])
    """
    result = program(source, "--device", "neuron-emulated")
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.values() == {"out": "emulated(5, 3)[0]0", "grad": "emulated"}


def test_a_generator_for_cuda_draws_reproducibly_on_the_emulated_device(program):
    source = """
    import torch
    g = torch.Generator(device="cuda")
    g.manual_seed(7)
    a = torch.randn(3, generator=g, device="cuda")
    g.manual_seed(7)
    b = torch.randn(3, generator=g, device="cuda")
    x = torch.empty(4, device="cuda").uniform_(generator=g)
    print("same=" + str(torch.equal(a, b)) + "," + a.device.__str__().split(":")[0] + "," + x.device.__str__().split(":")[0])
    """
    result = program(source, "--device", "neuron-emulated")
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.values() == {"same": "True,emulated,emulated"}


def test_a_checkpoint_with_args_and_a_scaler_under_the_auto_policy_loads_on_a_gpu_machine(program, tmp_path):
    # the way back: `torch.save(args)` holding args.device, and the GradScaler of a program whose
    # fp16 became bf16 (neuron, no GradScaler kernels) saved as the enabled scaler's state a GPU has
    checkpoint = tmp_path / "ck.pt"
    source = f"""
    import argparse, torch
    args = argparse.Namespace(device=torch.device("cuda:0"))
    scaler = torch.cuda.amp.GradScaler()
    torch.save({{"args": args, "scaler": scaler.state_dict()}}, {str(checkpoint)!r})
    print("scale=" + str(scaler.get_scale()) + "," + str(scaler.is_enabled()))
    import copy  # a copy in the process (a best-state snapshot) keeps that state too
    twin = copy.deepcopy({{"scaler": scaler}})["scaler"]
    print("copy=" + str(twin.get_scale()) + "," + str(twin.state_dict().get("scale")) + "," + str(type(twin) is type(scaler)))
    """
    result = program(source, "--device", "neuron-emulated")
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.values() == {"scale": "65536.0,True", "copy": "65536.0,65536.0,True"}
    check = ("import sys, torch\n"
             "data = torch.load(sys.argv[1], map_location='cpu', weights_only=False)\n"
             "scaler = torch.amp.GradScaler('cpu')\n"  # an enabled scaler, as the GPU's is
             "scaler.load_state_dict(data['scaler'])\n"
             "print(data['args'].device, scaler.get_scale())\n")
    plain = subprocess.run([sys.executable, "-c", check, str(checkpoint)], capture_output=True, text=True, timeout=120)
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.split() == ["cuda:0", "65536.0"]


@pytest.mark.parametrize("device", ["cpu", "neuron-emulated"])
def test_a_checkpoint_with_the_cuda_generator_state_loads_on_a_gpu_machine_and_resumes_exactly(program, tmp_path, device):
    # fairseq/Megatron-style checkpoints hold `torch.cuda.get_rng_state()`: a GPU machine's
    # `torch.cuda.set_rng_state` takes only CUDA's 16 bytes (Philox seed, offset), and a resume on
    # the target continues the draws the run would have made
    checkpoint = tmp_path / "ck.pt"
    source = f"""
    import os, torch
    if os.path.exists({str(checkpoint)!r}):
        state = torch.load({str(checkpoint)!r})
        torch.cuda.set_rng_state(state["cuda_rng_state"])
        resumed = torch.rand(3, device="cuda").tolist()
        torch.cuda.default_generators[0].set_state(state["all"][0])  # Megatron's tracker restores so
        print("resumed=" + str(resumed == state["next"]) + "," + str(torch.rand(3, device="cuda").tolist() == state["next"]))
    else:
        torch.cuda.manual_seed(11)
        start = torch.cuda.get_rng_state()
        torch.rand(5, device="cuda")
        state = torch.cuda.get_rng_state().cpu()  # a host tensor on a GPU too: `.cpu()` is itself
        states = torch.cuda.get_rng_state_all()
        following = torch.rand(3, device="cuda").tolist()
        torch.save({{"cuda_rng_state": state, "all": states, "next": following}}, {str(checkpoint)!r})
        print("state=" + str(state.dtype) + "," + str(tuple(state.shape)) + "," + str(len(states)) + ","
              + str(torch.equal(start, state)))  # the offset follows the draws, as CUDA's
    """
    result = program(source, "--device", device)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.values() == {"state": "torch.uint8,(16,),1,False"}
    result = program(source, "--device", device)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.values() == {"resumed": "True,True"}
    # the original code on a GPU machine: CUDA's set_state takes 16 bytes, a seed and an offset that
    # is a multiple of 4
    check = ("import sys, torch\n"
             "data = torch.load(sys.argv[1])\n"
             "for state in [data['cuda_rng_state'], *data['all']]:\n"
             "    seed, offset = state.contiguous().view(torch.int64).tolist()\n"
             "    print(state.dtype, state.numel(), seed, offset % 4)\n")
    plain = subprocess.run([sys.executable, "-c", check, str(checkpoint)], capture_output=True, text=True, timeout=120)
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.split("\n")[:2] == ["torch.uint8 16 11 0"] * 2


def test_a_legacy_constructor_under_a_cuda_default_tensor_type_is_named_in_the_mixing_error(program):
    # NeRF's `torch.Tensor([1e10])` after set_default_tensor_type('torch.cuda.FloatTensor'): a GPU makes
    # a CUDA tensor; here the legacy constructor makes a host one (a known gap): the error says so
    source = """
    import torch
    torch.set_default_tensor_type("torch.cuda.FloatTensor")
    far = torch.ones(3) * torch.Tensor([1e10])
    """
    result = program(source, "--device", "neuron-emulated")
    assert result.returncode != 0
    assert "legacy constructors (torch.Tensor(data)" in result.stderr and "torch.tensor(data)" in result.stderr


GENERATOR_STATE = """
import torch
g = torch.Generator(device="cuda").manual_seed(7)  # a resumable sampler's generator (diffusers' idiom)
torch.randn(4, generator=g, device="cuda")
state = g.get_state()
print("state=" + str((state.numel(), state.dtype)))
expected = torch.randn(4, generator=g, device="cuda")
torch.save({"sampler_rng": state}, "sampler.pt")
resumed = torch.Generator(device="cuda")
resumed.set_state(torch.load("sampler.pt")["sampler_rng"])
print("resumed=" + str(torch.equal(torch.randn(4, generator=resumed, device="cuda"), expected)))
print("host=" + str(torch.Generator().get_state().numel()))
"""


@pytest.mark.parametrize("device", ["cpu", "neuron-emulated"])
def test_a_cuda_generators_state_is_cudas_sixteen_bytes_and_resumes_exactly(program, tmp_path, device):
    # a GPU machine's torch.Generator("cuda").get_state() is Philox's 16 bytes, and set_state there
    # takes nothing else: a checkpoint holding the host's 5056 bytes would not restore on the GPU
    result = program(GENERATOR_STATE, "--device", device)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.values() == {"state": "(16, torch.uint8)", "resumed": "True", "host": "5056"}
    import torch

    saved = torch.load(tmp_path / "sampler.pt")["sampler_rng"]  # what the original code loads on a GPU
    assert saved.numel() == 16 and saved.dtype == torch.uint8


def test_devices_in_a_gpu_checkpoint_equal_the_programs_own_and_save_as_written(program, tmp_path):
    # written as a GPU machine writes it: torch.device objects of CUDA wherever the program kept one
    gpu_checkpoint = tmp_path / "gpu.pt"
    write = ("import argparse, sys, torch\n"
             "torch.save({'device': torch.device('cuda', 0), 'args': argparse.Namespace(device=torch.device('cuda'))},"
             " sys.argv[1])\n")
    written = subprocess.run([sys.executable, "-c", write, str(gpu_checkpoint)], capture_output=True, text=True,
                             timeout=120)
    assert written.returncode == 0, written.stderr
    resaved = tmp_path / "resaved.pt"
    source = f"""
    import torch
    state = torch.load({str(gpu_checkpoint)!r}, weights_only=False)
    print("same=" + str(state["device"] == torch.device("cuda", 0)) + "," + str(state["args"].device == torch.device("cuda")))
    print("ones=" + torch.ones(1, device=state["device"]).device.__str__().split(":")[0])
    plain = {{"device": torch.device("cuda", 0), "plain": torch.device("cuda")}}
    torch.save(plain, {str(resaved)!r})
    print("weights_only=" + str(torch.load({str(resaved)!r})["device"] == torch.device("cuda", 0)))  # torch's default
    """
    result = program(source, "--device", "neuron-emulated")
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.values() == {"same": "True,True", "ones": "emulated", "weights_only": "True"}
    check = "import sys, torch\nprint(torch.load(sys.argv[1]))\n"
    plain = subprocess.run([sys.executable, "-c", check, str(resaved)], capture_output=True, text=True, timeout=120)
    assert plain.returncode == 0, plain.stderr
    # 'cuda' stays 'cuda' (no ordinal), as a GPU machine writes it
    assert plain.stdout.strip() == "{'device': device(type='cuda', index=0), 'plain': device(type='cuda')}"


def test_float64_computed_in_float32_by_the_target_is_reported_by_run(program, tmp_path):
    source = """
    import torch
    x = torch.tensor([1e-10], dtype=torch.float64, device="cuda")
    print("value=" + repr(((x + 1) - 1).item()) + "," + str(x.dtype))
    """
    report = tmp_path / "report.json"
    result = program(source, "--device", "neuron-emulated", "--precision", "keep", "--report", str(report))
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.values() == {"value": "0.0,torch.float64"}  # Trainium has no float64: float32's rounding
    decisions = {d["topic"]: d for d in json.loads(report.read_text())["decisions"]}
    assert decisions["float64 on neuron-emulated"]["kind"] == "adapted"
    assert "computed in float32" in decisions["float64 on neuron-emulated"]["decision"]
    assert "reached at app.py:3)" in decisions["float64 on neuron-emulated"]["decision"]  # the line that made it


def test_seeding_and_restoring_the_cuda_generator_are_reported_where_the_host_generator_serves(program, tmp_path):
    # the emulated device draws from the host generator: a per-rank device seed (Megatron-style)
    # restarts host draws too, and a GPU's Philox state cannot be restored bit for bit: both reported
    source = """
    import torch
    torch.cuda.manual_seed(100)
    torch.cuda.set_rng_state(torch.tensor([42, 7], dtype=torch.int64).view(torch.uint8))
    states = torch.cuda.get_rng_state_all()
    print("states=" + str(len(states)) + "," + str(len(states) == torch.cuda.device_count()))
    """
    report = tmp_path / "report.json"
    result = program(source, "--device", "neuron-emulated", "--report", str(report))
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.values() == {"states": "1,True"}
    data = json.loads(report.read_text())
    decisions = {d["topic"]: d["decision"] for d in data["decisions"]}
    assert "seeds the host generator" in decisions["torch.cuda.manual_seed"]
    assert "seed 42, offset 7" in decisions["CUDA generator state"]
    redirected = {entry["api"] for entry in data["redirected"]}
    assert {"torch.cuda.set_rng_state", "torch.cuda.get_rng_state_all"} <= redirected


def test_forking_or_restoring_the_host_generator_alone_is_reported_where_it_also_draws_the_devices(program, tmp_path):
    # a GPU keeps the two generators apart: a host-only fork leaves the device's draws going on, and
    # restoring the CUDA generator leaves host draws going on; one generator here serves both
    source = """
    import torch
    torch.manual_seed(1)
    with torch.random.fork_rng(devices=[]):
        first = torch.rand(2, device="cuda").tolist()
    with torch.random.fork_rng(devices=[]):
        again = torch.rand(2, device="cuda").tolist()
    states = torch.cuda.get_rng_state_all()
    torch.cuda.set_rng_state_all(states)
    print("repeated=" + str(first == again))
    """
    for device in ("neuron-emulated", "cpu"):
        report = tmp_path / f"{device}.json"
        result = program(source, "--device", device, "--report", str(report))
        assert result.returncode == 0, result.stderr[-2000:]
        assert result.values() == {"repeated": "True"}  # the difference the report owns up to
        decisions = {d["topic"]: d["decision"] for d in json.loads(report.read_text())["decisions"]}
        assert "device draws inside the block are rewound" in decisions["torch.random.fork_rng(devices=[])"]
        assert "host draws made since the state was taken" in decisions["torch.cuda.set_rng_state"]


AMP_OVERFLOW = """
import json, torch
torch.manual_seed(0)
device = "cuda"
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
scaler = torch.cuda.amp.GradScaler(init_scale=2.0**10, growth_interval=2)
scales, losses = [], []
for step in range(8):
    x = torch.randn(4, 8, device=device)
    if step == 3:
        x = x * 1e4  # the fp16 backward overflows: the step must be skipped and the scale backed off
    with torch.cuda.amp.autocast():
        loss = model(x).float().pow(2).mean()
    opt.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    scales.append(scaler.get_scale())
    losses.append(loss.item())
weights = [p.detach().cpu().tolist() for p in model.parameters()]
print("RESULT " + json.dumps({"scales": scales, "losses": losses, "weights": weights}))
"""


def test_fp16_training_skips_an_overflowing_step_on_a_target_without_scaler_kernels(program, tmp_path):
    # neuron has no GradScaler kernels: the scaler works in plain tensor ops, so the overflowing
    # step is skipped as on CUDA; the hand port is the CPU's GradScaler, whose kernels are torch's own
    result = program(AMP_OVERFLOW, "--device", "neuron-emulated", "--precision", "keep")
    assert result.returncode == 0, result.stderr[-2000:]
    ported = (AMP_OVERFLOW.replace('device = "cuda"', 'device = "cpu"')
              .replace("torch.cuda.amp.GradScaler(", 'torch.amp.GradScaler("cpu", ')
              .replace("torch.cuda.amp.autocast()", 'torch.autocast("cpu", dtype=torch.float16)'))
    (tmp_path / "ported.py").write_text(ported)
    hand = subprocess.run([sys.executable, str(tmp_path / "ported.py")], capture_output=True, text=True, timeout=120)
    assert hand.returncode == 0, hand.stderr[-2000:]

    def outcome(stdout):
        return json.loads(stdout.split("RESULT ", 1)[1])

    retargeted, expected = outcome(result.stdout), outcome(hand.stdout)
    assert expected["scales"][3] == expected["scales"][2] / 2  # the port did overflow at step 3
    assert retargeted == expected


def test_a_scaler_under_the_auto_policy_answers_the_inf_checks_code_reaches_into(program):
    # "skip the step together across ranks": all_reduce of the scaler's per-device inf flags after
    # unscale_ (modded-nanogpt-style trainers); under --precision auto fp16 became bf16 and the
    # scaler stays the enabled one a GPU runs (on neuron in plain tensor ops)
    source = """
    import torch
    model = torch.nn.Linear(4, 1).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.cuda.amp.GradScaler()
    with torch.cuda.amp.autocast():
        loss = model(torch.randn(2, 4, device="cuda")).float().pow(2).mean()
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    found = scaler._found_inf_per_device(opt)
    print("skipped=" + str(sum(v.item() for v in found.values())))
    print("devices=" + ",".join(sorted(str(d.type) for d in found)))
    scaler.step(opt)
    scaler.update()
    print("enabled=" + str(scaler.is_enabled()))
    # a NaN batch: the step is skipped and the scale backs off, as CUDA's scaler does it
    before = model.weight.detach().clone()
    with torch.cuda.amp.autocast():
        loss = model(torch.full((2, 4), float("nan"), device="cuda")).float().pow(2).mean()
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    found = sum(v.item() for v in scaler._found_inf_per_device(opt).values())
    scaler.step(opt)
    scaler.update()
    print("nan_step=" + str(found) + "," + str(torch.equal(model.weight.detach(), before)) + "," + str(scaler.get_scale()))
    """
    result = program(source, "--device", "neuron-emulated", "--precision", "auto")
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.values() == {"skipped": "0.0", "devices": "cuda", "enabled": "True",
                               "nan_step": "1.0,True,32768.0"}


def test_cuda_memory_stats_keys_read_the_emulated_allocator(program):
    # a logger reading CUDA's allocator statistics by name sees the device's own bytes
    source = """
    import torch
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_stats()
    x = torch.empty(1000, device="cuda")
    del x
    after = torch.cuda.memory_stats()
    print("allocated=" + str(after["allocated_bytes.all.allocated"] - before["allocated_bytes.all.allocated"]))
    print("freed=" + str(after["allocated_bytes.all.freed"] - before["allocated_bytes.all.freed"]))
    print("peak=" + str(after["allocated_bytes.all.peak"] - before["allocated_bytes.all.current"]))
    print("retries=" + str(after["num_alloc_retries"]))
    """
    result = program(source, "--device", "neuron-emulated")
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.values() == {"allocated": "4000", "freed": "4000", "peak": "4000", "retries": "0"}


COMPILED_TRAINING = os.path.join(os.path.dirname(os.path.abspath(__file__)), "compiled_training.py")


def test_torch_compile_in_the_application_runs_on_the_emulated_device(program, tmp_path):
    # inductor has no code generator for the device: the application's torch.compile (function,
    # module, decorator, Module.compile, inductor's mode=) runs Dynamo's graphs eagerly on it, reported
    result = program(open(COMPILED_TRAINING).read(), "--device", "neuron-emulated", "--precision", "keep",
                     "--report", "report.json")
    assert result.returncode == 0, result.stderr[-3000:]
    values = json.loads(result.stdout.strip().splitlines()[-1])
    assert values["device"] == values["head"] == "emulated"
    assert values["scale"] is True
    assert abs(values["losses"]["compiled"] - values["losses"]["eager"]) < 1e-5, values
    assert "Graph break" not in result.stderr and "Dynamo does not know" not in result.stderr
    decisions = {entry["topic"]: entry["decision"] for entry in json.loads((tmp_path / "report.json").read_text())["decisions"]}
    compiled = [decision for topic, decision in decisions.items() if topic.startswith("torch.compile")]
    assert compiled and all("'aot_eager'" in decision for decision in compiled)
    # one decision for each distinct request: every dropped setting is named
    assert decisions["torch.compile mode='reduce-overhead'"].endswith("mode='reduce-overhead' dropped")


def test_a_device_tensor_sent_to_another_process_fails_with_the_way_out(program):
    # Hogwild on a GPU hands the model to mp.Process through CUDA IPC; the emulated device cannot
    # share its memory: one clear error instead of PyTorch's "_share_fd_: only available on CPU"
    source = """
    import torch
    import torch.multiprocessing as mp

    def train(model):
        pass

    if __name__ == "__main__":
        mp.set_start_method("spawn", force=True)
        model = torch.nn.Linear(2, 2).cuda()
        model.share_memory()
        process = mp.Process(target=train, args=(model,))
        try:
            process.start()
            process.join()
        except RuntimeError as error:
            print("error=" + str(error))
        host = mp.Process(target=train, args=(torch.nn.Linear(2, 2),))
        host.start(); host.join()
        print("host_exit=" + str(host.exitcode))
    """
    result = program(source, "--device", "neuron-emulated")
    assert result.returncode == 0, result.stderr[-3000:]
    values = result.values()
    assert "cannot be sent to another process" in values["error"] and "tensor.cpu()" in values["error"]
    assert values["host_exit"] == "0"


def test_a_device_tensor_put_on_a_queue_by_a_spawned_worker_arrives(program):
    # multi-GPU evaluation returns results through a Queue (CUDA IPC on a GPU); a queue pickles in its
    # feeder thread, where a refusal never reached the application: the receiver waited forever
    source = """
    import torch
    import torch.multiprocessing as mp

    def worker(rank, queue):
        queue.put((rank, torch.full((3,), float(rank + 1), device="cuda", dtype=torch.bfloat16)))

    if __name__ == "__main__":
        context = mp.get_context("spawn")
        queue = context.Queue()
        processes = [context.Process(target=worker, args=(rank, queue)) for rank in range(2)]
        for process in processes:
            process.start()
        results = sorted(queue.get(timeout=60) for _ in processes)
        for process in processes:
            process.join()
        print("got=" + ";".join(f"{rank}:{t.tolist()}:{t.dtype}:{t.is_cuda}" for rank, t in results))
    """
    result = program(source, "--device", "neuron-emulated")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.values() == {"got": "0:[1.0, 1.0, 1.0]:torch.bfloat16:True;1:[2.0, 2.0, 2.0]:torch.bfloat16:True"}


def test_a_dict_map_location_leaves_unlisted_cuda_devices_on_the_target(program):
    # torch restores a location the dict does not list where it was saved ('cuda:0' on a GPU machine)
    source = """
    import io, torch
    buffer = io.BytesIO()
    torch.save({"w": torch.ones(2, device="cuda")}, buffer)
    buffer.seek(0)
    w = torch.load(buffer, map_location={"cuda:1": "cuda:0"})["w"]
    print("loaded=" + w.device.__str__().split(":")[0] + "," + str(w.is_cuda) + "," + str(w.sum().item()))
    """
    result = program(source, "--device", "neuron-emulated")
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.values() == {"loaded": "emulated,True,2.0"}


def test_safetensors_loads_onto_a_target_it_has_no_device_type_for(program, tmp_path):
    # safetensors refuses device types it does not list ('emulated', 'neuron'): the file is read on
    # the host and load_file's tensors moved to the target, reported; safe_open's stay on the host
    report = tmp_path / "report.json"
    source = f"""
    import torch
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file
    path = {str(tmp_path / "w.safetensors")!r}
    save_file({{"w": torch.arange(4.0)}}, path)
    loaded = load_file(path, device="cuda")["w"]
    print("load_file=" + loaded.device.__str__().split(":")[0] + "," + str(loaded.tolist()))
    with safe_open(path, framework="pt", device=0) as handle:
        print("safe_open=" + handle.get_tensor("w").device.__str__().split(":")[0])
    """
    result = program(source, "--device", "neuron-emulated", "--report", str(report))
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.values() == {"load_file": "emulated,[0.0, 1.0, 2.0, 3.0]", "safe_open": "cpu"}
    decisions = {entry["topic"]: entry["decision"] for entry in json.loads(report.read_text())["decisions"]}
    assert "moved to emulated:0" in decisions["safetensors load_file(device=...)"]
    assert "tensors stay on the host" in decisions["safetensors safe_open(device=...)"]


def test_a_forked_dataloader_worker_placing_batches_on_the_device_fails_instead_of_hanging(program):
    # collate_fn calling .cuda() in forked workers after the parent used the GPU: CUDA refuses it
    # ("Cannot re-initialize CUDA in forked subprocess") and the DataLoader re-raises it; the
    # emulated device refuses it as well, where the batch would otherwise be lost on its way back
    source = """
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    model = torch.nn.Linear(2, 1).cuda()
    def collate(batch):
        return torch.stack([item[0] for item in batch]).cuda()
    loader = DataLoader(TensorDataset(torch.ones(8, 2)), batch_size=4, num_workers=1, collate_fn=collate)
    try:
        for batch in loader:
            model(batch)
        print("outcome=ran")
    except RuntimeError as error:
        print("outcome=" + type(error).__name__ + ("/spawn" if "'spawn'" in str(error) else ""))
    """
    result = program(source, "--device", "neuron-emulated")
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.values() == {"outcome": "EmulatedDeviceError/spawn"}


def test_a_spawned_dataloader_worker_placing_batches_on_the_device_delivers_them(program):
    # with the spawn start method CUDA hands the worker's device batch over through IPC; the
    # emulated device sends a copy made again on the device (it hung: the batch was dropped)
    source = """
    import torch
    from torch.utils.data import DataLoader
    def collate(batch):
        return torch.stack(batch).cuda() * 2
    if __name__ == "__main__":
        loader = DataLoader([torch.arange(3.0)] * 4, batch_size=2, num_workers=1, collate_fn=collate,
                            multiprocessing_context="spawn")
        batches = list(loader)
        print("batches=" + ",".join(batch.device.__str__() + str(batch.is_cuda) for batch in batches))  # the truth
        print("values=" + str(batches[0].cpu().tolist()))
    """
    result = program(source, "--device", "neuron-emulated")
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.values() == {"batches": "emulated:0True,emulated:0True",
                               "values": "[[0.0, 2.0, 4.0], [0.0, 2.0, 4.0]]"}


HALF_MODEL_INFERENCE = """
import hashlib, torch
from transformers import GPT2Config, GPT2LMHeadModel
torch.manual_seed(0)
config = GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=64, n_positions=16)
# inference code that casts its model to fp16 itself, then keeps an fp16 autocast around it
model = GPT2LMHeadModel(config).cuda().half().eval()
ids = torch.randint(0, 64, (2, 8), device="cuda")
with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16):
    logits = model(ids).logits
print("half_dtype=" + str(logits.dtype))
print("half_digest=" + hashlib.sha256(logits.float().cpu().numpy().tobytes()).hexdigest()[:16])
# the same program's float32 model under the same autocast: the policy's precision
head = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8)).cuda()
with torch.no_grad(), torch.cuda.amp.autocast():
    first = head[0](torch.randn(2, 8, device="cuda"))
print("float_dtype=" + str(first.dtype))
"""


def test_an_fp16_autocast_around_a_model_cast_to_fp16_stays_fp16_under_auto(program, tmp_path):
    # under --precision auto the emulated Neuron's bf16 replaces CUDA's fp16 autocast; a model the
    # application holds in fp16 itself has nothing to lower, and bf16 activations meeting its fp16
    # LayerNorm weights crashed ("mixed dtype"): the region follows the model, and computes exactly
    # what the program computes as written (--precision keep)
    auto = program(HALF_MODEL_INFERENCE, "--device", "neuron-emulated", "--precision", "auto", "--report", "r.json")
    assert auto.returncode == 0, auto.stderr[-3000:]
    keep = program(HALF_MODEL_INFERENCE, "--device", "neuron-emulated", "--precision", "keep")
    assert keep.returncode == 0, keep.stderr[-3000:]
    assert auto.values()["half_dtype"] == "torch.float16"
    assert auto.values()["half_digest"] == keep.values()["half_digest"]
    assert auto.values()["float_dtype"] == "torch.bfloat16" and keep.values()["float_dtype"] == "torch.float16"
    decisions = {entry["topic"]: entry["decision"] for entry in json.loads((tmp_path / "r.json").read_text())["decisions"]}
    decision = decisions["cuda autocast float16 around a float16 model"]
    assert "its Embedding has float16 parameters" in decision
    assert "a compiled call of such a model before this, if any, ran in bfloat16" in decision  # it cannot ask


FULLGRAPH = """
import json, torch, torch.nn as nn, torch.nn.functional as F
torch._dynamo.config.error_on_recompile = True  # one graph, kept: every call below reuses it
# the program's first tensor made on "cuda", in compiled code
first = torch.compile(lambda n: torch.ones(n, device="cuda") * 2, fullgraph=True)(3)

class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv, self.proj = nn.Linear(16, 48), nn.Linear(16, 16)
        # the kernel choice of attention code written for CUDA (flash on Ampere and later)
        self.flash = torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 0)

    def forward(self, x):
        if not x.is_cuda:
            x = x.cuda()
        x = x.to(torch.device("cuda"), non_blocking=True)
        q, k, v = self.qkv(x).split(16, dim=-1)
        if torch.cuda.is_available() and torch.cuda.is_bf16_supported():
            bias = torch.zeros(x.shape[1], x.shape[1], device="cuda")
        else:
            bias = torch.zeros(x.shape[1], x.shape[1], device=x.device)
        if torch.cuda.get_device_properties(0).total_memory > 0:
            bias = bias + torch.zeros(x.shape[1], device=f"cuda:{torch.cuda.current_device()}")
        with torch.autocast(device_type="cuda", enabled=False):  # the fp32 island of mixed-precision code
            scores = (q.float() @ k.float().transpose(-1, -2)) / 4 + bias
        return self.proj(scores.softmax(-1).to(v.dtype) @ v)

torch.manual_seed(0)
model = Attention().cuda()
x = torch.randn(2, 8, 16, device="cuda")

def step(x):
    with torch.autocast("cuda", dtype=torch.float16):
        y = model(x)
    with torch.cuda.amp.autocast():
        z = model.proj(y)
        inside = torch.is_autocast_enabled()
    return y, z, inside

compiled = torch.compile(step, fullgraph=True)
(cy, cz, cinside), (y, z, inside) = compiled(x), step(x)  # compiled first: nothing asked before tracing
for _ in range(3):
    compiled(x)
compiled_model = torch.compile(model, fullgraph=True)
for _ in range(2):
    with torch.autocast("cuda", dtype=torch.float16):  # nanoGPT's compiled model in its autocast context
        compiled_model(x)
print(json.dumps({"dtypes": [str(y.dtype), str(z.dtype)], "compiled_dtypes": [str(cy.dtype), str(cz.dtype)],
                  "equal": torch.allclose(y.float(), cy.float(), atol=1e-2) and torch.allclose(z.float(), cz.float(), atol=1e-2),
                  "autocast_seen": [inside, cinside], "device": cy.device.__str__().split(":")[0], "flash": model.flash,
                  "first": first.tolist()}))
"""


@pytest.mark.parametrize("device, device_type", [("neuron-emulated", "emulated"), ("cpu", "cpu")])
def test_compiled_application_code_with_autocast_and_cuda_queries_is_one_graph(program, tmp_path, device, device_type):
    # torch.compile(fullgraph=True) of code entering CUDA autocast regions and asking torch.cuda
    # (is_available, get_device_capability, is_bf16_supported, get_device_properties, current_device),
    # creating tensors and devices on "cuda" and "cuda:N", reading is_cuda: one graph as on a GPU
    # machine, kept across calls (it stopped at torchport's stand-ins and torch.device, on the
    # emulated device at every factory, and recompiled at every call on torchport's use counter)
    from torchport import backends

    result = program(FULLGRAPH, "--device", device, "--precision", "auto", "--report", "report.json")
    assert result.returncode == 0, result.stderr[-3000:]
    values = json.loads(result.stdout.strip().splitlines()[-1])
    bf16 = backends.resolve(device).preferred_precision == "bfloat16"
    expected = "torch.bfloat16" if bf16 else "torch.float32"
    assert values["dtypes"] == values["compiled_dtypes"] == [expected, expected]
    assert values["equal"] is True and values["device"] == device_type and values["flash"] is bf16
    assert values["autocast_seen"] == [bf16, bf16] and values["first"] == [2.0, 2.0, 2.0]
    decisions = {entry["topic"]: entry["decision"] for entry in json.loads((tmp_path / "report.json").read_text())["decisions"]}
    assert decisions["cuda autocast float16"].startswith("autocast bfloat16" if bf16 else "autocast off")
    assert "global hooks" not in result.stderr  # torch's warning about torchport's watch (see amp._FollowModel)


def test_the_current_accelerator_names_a_device_type_as_torch_does(program):
    # torch's current_accelerator() is device(type='cuda') on a GPU machine: DDP scripts written with
    # PyTorch's device-generic API append the local rank to it ("emulated:0:0" was refused)
    source = """
    import os, torch
    rank = int(os.environ.get("LOCAL_RANK", 0))
    accelerator = torch.accelerator.current_accelerator()
    device = torch.device(f"{accelerator}:{rank}")
    x = torch.ones(2, device=device)
    print("index=" + str(accelerator.index))
    print("type=" + accelerator.type)
    print("lands=" + x.device.__str__().split(":")[0])
    """
    result = program(source, "--device", "neuron-emulated")
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.values() == {"index": "None", "type": "cuda", "lands": "emulated"}


def test_a_cuda_generator_reads_the_target_as_its_device(program):
    # diffusers-style samplers draw "on the generator's device"; the emulated device's random numbers
    # come from host generators, and the generator's .device read the host's (the draw left the device)
    source = """
    import pickle, torch
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(3, generator=g, device=g.device)
    print("lands=" + x.device.__str__().split(":")[0])
    print("same_draw=" + str(x.cpu().tolist() == torch.randn(3, generator=torch.Generator().manual_seed(0)).tolist()))
    print("generator=" + str(isinstance(g, torch.Generator)) + "," + type(pickle.loads(pickle.dumps(g))).__name__)
    """
    result = program(source, "--device", "neuron-emulated")
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.values() == {"lands": "emulated", "same_draw": "True", "generator": "True,Generator"}


FP16_TEACHER = """
import threading, torch, torch.nn as nn
torch.manual_seed(0)
# distillation from a teacher held in fp16, behind an fp32 projector that runs first in the region
teacher = nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.Linear(16, 4)).cuda().half().eval()
projector, student = nn.Linear(8, 8).cuda(), nn.Linear(8, 4).cuda()
optimizer = torch.optim.SGD(list(projector.parameters()) + list(student.parameters()), lr=0.1)
scaler = torch.cuda.amp.GradScaler()
x = torch.randn(16, 8, device="cuda")
for step in range(2):
    with torch.autocast("cuda", dtype=torch.float16):
        h = projector(x)
        with torch.no_grad():
            target = teacher(h.half())
        logits = student(h)
        loss = ((logits.float() - target.float()) ** 2).mean() * 1e-6  # fp16 gradients underflow unscaled
    optimizer.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
print("student=" + str(logits.dtype))
print("trained=" + str(int((student.weight.grad != 0).sum())))
print("scaler=" + str(scaler.is_enabled()))

# one autocast used as a decorator by the threads of a server
@torch.autocast("cuda", dtype=torch.float16)
def infer(inputs):
    return teacher(inputs)

errors, dtypes = [], set()
def serve():
    for _ in range(10):
        try:
            dtypes.add(str(infer(torch.randn(2, 8, device="cuda").half()).dtype))
        except RuntimeError as error:
            errors.append(error)
threads = [threading.Thread(target=serve) for _ in range(4)]
[thread.start() for thread in threads]
[thread.join() for thread in threads]
print("served=" + str(len(errors)) + "," + ",".join(sorted(dtypes)))
"""


def test_an_fp16_model_met_later_in_a_region_keeps_it_fp16_and_its_gradients_scaled(program):
    # the region follows the first module holding fp16 parameters, not just the first module (an fp32
    # projector ran first, and the fp16 teacher's LayerNorm then refused bf16 activations); once fp16
    # is kept, the GradScaler scales its gradients (the student trained on zeros without it);
    # an autocast decorator shared by threads watches each thread's region (most calls crashed)
    auto = program(FP16_TEACHER, "--device", "neuron-emulated", "--precision", "auto")
    assert auto.returncode == 0, auto.stderr[-3000:]
    keep = program(FP16_TEACHER, "--device", "neuron-emulated", "--precision", "keep")
    assert keep.returncode == 0, keep.stderr[-3000:]
    assert auto.values() == keep.values() == {"student": "torch.float16", "trained": "32", "scaler": "True",
                                              "served": "0,torch.float16"}


@pytest.mark.parametrize("device", ["xla-emulated", "neuron-emulated"])
def test_dict_and_function_map_locations_load_where_a_gpu_machine_loads(program, tmp_path, device):
    # the DDP tutorial's resume: `map_location={"cuda:0": f"cuda:{rank}"}` or a function moving each
    # storage; on a target that cannot restore storages (XLA) both left the tensors on the host, and
    # an EMA update mixing them with the model's parameters crashed
    source = f"""
    import torch
    model = torch.nn.Linear(4, 2).cuda()
    path = {str(tmp_path / "ckpt.pt")!r}
    torch.save({{"ema": [p.detach().clone() for p in model.parameters()]}}, path)
    for name, where in [("dict", {{"cuda:0": "cuda:0"}}), ("function", lambda storage, loc: storage.cuda(0)),
                        ("default", lambda storage, loc: None),
                        ("host", {{"cuda:0": "cpu"}}), ("host_function", lambda storage, loc: storage)]:
        ema = torch.load(path, map_location=where)["ema"]
        print(name + "=" + ema[0].device.type + "," + str(ema[0].is_cuda))
    ema = torch.load(path, map_location={{"cuda:0": "cuda:0"}})["ema"]
    with torch.no_grad():
        torch._foreach_lerp_(ema, [p.detach() for p in model.parameters()], 0.1)
    print("updated=" + str(torch.allclose(ema[0].cpu(), model.weight.detach().cpu())))
    scaler = torch.cuda.amp.GradScaler()
    """
    report = tmp_path / "report.json"
    result = program(source, "--device", device, "--report", str(report))
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.values() == {"dict": "cuda,True", "function": "cuda,True", "default": "cuda,True",
                               "host": "cpu,False", "host_function": "cpu,False", "updated": "True"}
    (scaler,) = [entry["decision"] for entry in json.loads(report.read_text())["decisions"]
                 if entry["topic"] == "GradScaler"]
    assert device in scaler, scaler  # the target's name ('kept on emulated' on xla-emulated)



def test_a_dict_map_location_matches_a_checkpoint_a_library_wrote_on_the_target(program, tmp_path):
    # a checkpoint written by a library (Lightning's ModelCheckpoint, Accelerate) during the run is tagged
    # with the target's device, where a GPU machine writes 'cuda:0': the application's
    # `map_location={"cuda:0": "cpu"}` and a function reading the location see CUDA's
    source = f"""
    import torch
    from accelerate.utils import save
    path = {str(tmp_path / "library.pt")!r}
    save({{"w": torch.ones(3, device="cuda")}}, path)
    w = torch.load(path, map_location={{"cuda:0": "cpu"}})["w"]
    print("dict=" + w.device.type + "," + str((torch.ones(3) + w).sum().item()))
    seen = []
    w = torch.load(path, map_location=lambda storage, loc: seen.append(loc) or storage)["w"]
    print("function=" + w.device.type + "," + ",".join(seen))
    """
    result = program(source, "--device", "neuron-emulated")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.values() == {"dict": "cpu,6.0", "function": "cpu,cuda:0"}


def test_max_memory_of_a_gpu_is_the_hosts_on_the_cpu_target(program, tmp_path):
    # QLoRA-style loading: a budget per GPU ordinal beside the host's; on the CPU target transformers
    # found no device 0 and crashed ("Cannot access accelerator device when none is available")
    source = f"""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    path = {str(tmp_path / "gpt")!r}
    GPT2LMHeadModel(GPT2Config(vocab_size=97, n_positions=32, n_embd=32, n_layer=2, n_head=2)).save_pretrained(path)
    max_memory = {{i: "1GiB" for i in range(torch.cuda.device_count())}}
    max_memory["cpu"] = "2GiB"
    model = GPT2LMHeadModel.from_pretrained(path, device_map="auto", max_memory=max_memory)
    print("placed=" + ",".join(sorted({{str(p.device) for p in model.parameters()}})))
    """
    result = program(source, "--device", "cpu")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.values()["placed"] == "cpu"


def test_a_stream_context_object_works_on_a_target_with_streams_of_its_own(program):
    # `torch.cuda.StreamContext(s)` was torch's own class: "Torch not compiled with CUDA enabled"
    source = """
    import torch
    side = torch.cuda.Stream()
    with torch.cuda.StreamContext(side) as entered:
        y = torch.ones(3, device="cuda") * 2
    torch.cuda.current_stream().wait_stream(side)
    print("sum=" + str(y.sum().item()) + "," + str(entered))
    """
    result = program(source, "--device", "neuron-emulated")
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.values() == {"sum": "6.0,None"}


def test_queries_about_a_device_past_the_targets_say_it_shares_one(program, tmp_path):
    # a one-GPU machine raises "invalid device ordinal"; here the answer is device 0's, and the report
    # says so, as it does for a tensor placed on cuda:1
    report = tmp_path / "report.json"
    source = """
    import torch
    names = {torch.cuda.get_device_name(3), torch.cuda.get_device_properties(1).name}
    print("same=" + str(names == {torch.cuda.get_device_name(0)}))
    torch.cuda.get_device_capability(2)
    """
    result = program(source, "--device", "neuron-emulated", "--report", str(report))
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.values() == {"same": "True"}
    decisions = {entry["topic"]: entry["decision"] for entry in json.loads(report.read_text())["decisions"]}
    assert all("shares cuda:0" in decisions.get(f"cuda:{index}", "") for index in (1, 2, 3)), decisions


def test_an_optimizer_whose_fused_step_the_target_lacks_saves_what_the_application_asked(program, tmp_path):
    # the checkpoint held fused=False: the original code on a GPU (fused AdamW, GradScaler) resumed it
    # with torch switching the fused step off, and scaler.step failed ("Expected grad_scale and
    # found_inf to be None"); here the CPU target, which keeps fused kernels, stands for the GPU
    source = f"""
    import sys, torch
    model = torch.nn.Linear(4, 1).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    scaler = torch.amp.GradScaler("cuda")
    path = {str(tmp_path / "ckpt.pt")!r}
    if sys.argv[1] == "resume":
        checkpoint = torch.load(path)
        model.load_state_dict(checkpoint["model"]); opt.load_state_dict(checkpoint["opt"])
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(torch.randn(8, 4, device="cuda")).float().pow(2).mean()
    scaler.scale(loss).backward(); scaler.step(opt); scaler.update()
    if sys.argv[1] == "save":
        torch.save({{"model": model.state_dict(), "opt": opt.state_dict()}}, path)
    print("stepped=True")
    print("fused=" + str(opt.param_groups[0]["fused"]))
    """
    for device, step, fused in [("neuron-emulated", "save", False), ("cpu", "resume", True),
                                ("neuron-emulated", "resume", False)]:
        result = program(source, "--device", device, args=[step])
        assert result.returncode == 0, (device, step, result.stderr[-2000:])
        # resumed here, the fused step the target lacks stays off
        assert result.values() == {"stepped": "True", "fused": str(fused)}
        if step == "save":
            import torch

            saved = torch.load(tmp_path / "ckpt.pt", map_location="cpu")
            assert saved["opt"]["param_groups"][0]["fused"] is True
