"""The xla backend on torch_xla's CPU runtime (PJRT_DEVICE=CPU), in the environment made by
scripts/setup-xla-env.sh (torch_xla 2.9 needs torch 2.9, so it cannot share .venv)."""

import json
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
XLA_PYTHON = os.path.join(ROOT, ".venv-xla", "bin", "python")

pytestmark = pytest.mark.skipif(
    not os.path.exists(XLA_PYTHON), reason="no .venv-xla: run scripts/setup-xla-env.sh to test the xla backend"
)


def _train(command, tmp_path, name):
    result_file = tmp_path / f"{name}.json"
    environment = {**os.environ, "PJRT_DEVICE": "CPU", "TORCHPORT_QUIET": "1"}
    completed = subprocess.run(
        [*command, "--steps", "6", "--no-amp", "--result", str(result_file),
         "--checkpoint", str(tmp_path / f"{name}.pt")],
        cwd=os.path.join(ROOT, "examples"), env=environment, capture_output=True, text=True, timeout=900,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads(result_file.read_text()), completed


def test_cuda_written_training_runs_on_xla_and_tracks_the_cpu_run(tmp_path):
    report = tmp_path / "report.json"
    on_xla, completed = _train(
        [XLA_PYTHON, "-m", "torchport", "run", "--device", "xla", "--precision", "keep",
         "--report", str(report), "train_gpt_cuda.py"], tmp_path, "xla",
    )
    on_cpu, _ = _train(
        [XLA_PYTHON, "-m", "torchport", "run", "--device", "cpu", "--precision", "keep", "train_gpt_cuda.py"],
        tmp_path, "cpu",
    )
    data = json.loads(report.read_text())
    assert data["target"] == "xla"
    assert "device: XLA:CPU" in completed.stdout  # the program's own get_device_name() call
    # Two different backends (XLA's compiled CPU kernels vs eager ATen): close, not identical.
    assert len(on_xla["losses"]) == len(on_cpu["losses"]) == 6
    for xla_loss, cpu_loss in zip(on_xla["losses"], on_cpu["losses"]):
        assert abs(xla_loss - cpu_loss) <= 2e-3 * max(1.0, abs(cpu_loss)), (on_xla["losses"], on_cpu["losses"])


def _run_on_xla(program, *options) -> subprocess.CompletedProcess:
    """`torchport run --device xla [options] program` in the xla environment; it must succeed."""
    completed = subprocess.run(
        [XLA_PYTHON, "-m", "torchport", "run", "--device", "xla", *options, str(program)],
        env={**os.environ, "PJRT_DEVICE": "CPU", "TORCHPORT_QUIET": "1"}, capture_output=True, text=True, timeout=900,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return completed


def _decisions(report) -> dict:
    """The run report's decisions, by topic."""
    return {entry["topic"]: entry["decision"] for entry in json.loads(report.read_text())["decisions"]}


def test_torch_compile_in_the_application_compiles_with_openxla(tmp_path):
    # inductor cannot compile XLA tensors ("KeyError: 'xla'"): the application's torch.compile, in
    # every form, compiles with the profile's compiler (openxla), inductor's mode= dropped, reported
    report = tmp_path / "report.json"
    completed = _run_on_xla(os.path.join(ROOT, "tests", "retarget", "compiled_training.py"),
                            "--precision", "keep", "--report", str(report))
    values = json.loads(completed.stdout.strip().splitlines()[-1])
    assert values["device"] == values["head"] == "xla" and values["scale"] is True
    assert abs(values["losses"]["compiled"] - values["losses"]["eager"]) <= 1e-4, values
    decisions = _decisions(report)
    assert "'openxla'" in decisions["torch.compile"]


def test_torch_manual_seed_and_rng_states_repeat_the_devices_draws_on_xla(tmp_path):
    # torch.manual_seed does not reach torch_xla's generator; on a GPU machine it seeds the device too
    program = tmp_path / "seeded.py"
    program.write_text(
        "import torch\n"
        "torch.manual_seed(1); a = torch.randn(3, device='cuda')\n"
        "torch.manual_seed(1); b = torch.randn(3, device='cuda')\n"
        "torch.random.manual_seed(2); c = torch.randn(3, device='cuda')\n"
        "torch.random.manual_seed(2); d = torch.randn(3, device='cuda')\n"
        "print(torch.equal(a.cpu(), b.cpu()), torch.equal(c.cpu(), d.cpu()), a.device.__str__().split(':')[0])\n"
        # Megatron's RNG tracker: a state restored through default_generators[current_device()]
        "state = torch.cuda.get_rng_state(); e = torch.randn(3, device='cuda')\n"
        "torch.cuda.default_generators[torch.cuda.current_device()].set_state(state)\n"
        "assert torch.cuda.default_generators[0] is torch.cuda.default_generators[0]\n"
        "print(torch.equal(e.cpu(), torch.randn(3, device='cuda').cpu()))\n"
        # a generator for the device (torch_xla has none: its ops draw from a host generator)
        "device = torch.device('cuda')\n"
        "f = torch.randn(3, device=device, generator=torch.Generator(device.type).manual_seed(5))\n"
        "g = torch.randn(3, device=device, generator=torch.Generator(device=device).manual_seed(5))\n"
        "print(torch.equal(f.cpu(), g.cpu()), device.type)\n"
    )
    assert _run_on_xla(program).stdout.split() == ["True", "True", "xla", "True", "True", "cuda"]


def test_local_rank_device_streams_and_device_contexts_run_on_xla(tmp_path):
    # set_device(local_rank), streams and device contexts reached CUDA's lazy init in torch_xla's
    # CUDA build of torch ("Found no NVIDIA driver", "CUDA driver version is insufficient")
    program = tmp_path / "local_rank.py"
    program.write_text(
        "import torch\n"
        "torch.cuda.set_device(0)\n"
        "s = torch.cuda.Stream()\n"
        "with torch.cuda.stream(s):\n    y = torch.ones(3, device='cuda') * 2\n"
        "torch.cuda.current_stream().wait_stream(s)\n"
        "with torch.cuda.device(0):\n    z = torch.zeros(2).cuda()\n"
        "print(isinstance(s, torch.cuda.Stream), y.sum().item(), z.device.__str__().split(':')[0], torch.cuda.current_device())\n"
    )
    assert _run_on_xla(program).stdout.split() == ["True", "6.0", "xla", "0"]


def test_memory_sized_batches_and_forked_host_rng_work_on_xla(tmp_path):
    # batch sizing from total_memory / mem_get_info() read 0 bytes on XLA's CPU runtime (which reports
    # no memory), so the program chose no batch; it reads the profile's TPU memory now, reported.
    # torch.random.fork_rng(devices=[]) (dropout-free eval, data augmentation) raised "torch has no
    # module of `xla`": the host generator is forked as torch forks it, the device's through torch_xla
    program = tmp_path / "memory_rng.py"
    program.write_text(
        "import torch\n"
        "total = torch.cuda.get_device_properties(0).total_memory\n"
        "free, whole = torch.cuda.mem_get_info()\n"
        "batch = max(1, int(free * 0.5) // (4 * 1024 * 1024 * 64))\n"
        "torch.manual_seed(0)\n"
        "expected = torch.rand(2)\n"
        "torch.manual_seed(0)\n"
        "with torch.random.fork_rng(devices=[]):\n"
        "    torch.manual_seed(7)\n"
        "    torch.rand(5)\n"
        "with torch.random.fork_rng(devices=[torch.cuda.current_device()]):\n"
        "    torch.rand(4, device='cuda').sum().item()\n"
        "print(total == whole, whole // 2**30, batch > 0, torch.equal(torch.rand(2), expected))\n"
    )
    report = tmp_path / "report.json"
    completed = _run_on_xla(program, "--report", str(report))
    assert completed.stdout.split() == ["True", "16", "True", "True"]
    decisions = _decisions(report)
    assert "read the profile's 16 GiB" in decisions["device memory size"]


def test_a_torchrun_launch_that_xla_cannot_join_stops_rather_than_train_each_process_alone(tmp_path):
    # torch_xla's process group needs init_method='xla://' (torch's env:// default left DDP seeing no
    # parameters on the other rank); on XLA's CPU runtime each torchrun process is then a world of one,
    # where all_reduce would reduce a process with itself: the program stops with the reason
    program = tmp_path / "ddp.py"
    program.write_text(
        "import os, torch, torch.distributed as dist\n"
        "dist.init_process_group('nccl')\n"
        "local_rank = int(os.environ['LOCAL_RANK'])\n"
        "torch.cuda.set_device(local_rank)\n"
        "model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2).cuda(), device_ids=[local_rank])\n"
    )
    completed = subprocess.run(
        [XLA_PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
         "-m", "torchport", "run", "--device", "xla", str(program)],
        env={**os.environ, "PJRT_DEVICE": "CPU", "TORCHPORT_QUIET": "1"}, capture_output=True, text=True, timeout=600,
    )
    assert completed.returncode != 0
    assert "formed a group of 1 process(es) where 2 were started" in completed.stderr
    assert "Rehearse the distributed run with --device cpu" in completed.stderr


def test_checkpoints_with_device_tensors_load_on_xla_as_on_a_gpu_machine(tmp_path):
    # a checkpoint written on a GPU (storages at 'cuda:0'; here by the emulated target, which writes
    # that format) and one this program writes on XLA (its tensors saved as arrays at 'cuda:0'):
    # torch.load without map_location stopped on the second ("Callable map_location not supported"),
    # and map_location='cuda' left both on the host; the CPU-saved tensor stays on the CPU
    import sys

    gpu_made = tmp_path / "gpu.pt"
    saver = tmp_path / "save.py"
    saver.write_text(f"import torch\ntorch.save({{'w': torch.ones(2, device='cuda'), 'h': torch.zeros(1)}}, {str(gpu_made)!r})\n")
    saved = subprocess.run([sys.executable, "-m", "torchport", "run", "--device", "neuron-emulated", str(saver)],
                           env={**os.environ, "TORCHPORT_QUIET": "1"}, capture_output=True, text=True, timeout=300)
    assert saved.returncode == 0, saved.stderr[-2000:]
    program = tmp_path / "load.py"
    program.write_text(
        "import os, sys, torch\n"
        "own = os.path.join(os.path.dirname(sys.argv[1]), 'own.pt')\n"
        "torch.save({'w': torch.ones(2, device='cuda'), 'h': torch.zeros(1), 'p': [torch.ones(1).cuda()]}, own)\n"
        "for path in (sys.argv[1], own):\n"
        "    for where in (None, 'cuda', 'cpu'):\n"
        "        loaded = torch.load(path, map_location=where)\n"
        "        print(loaded['w'].is_cuda, loaded['h'].is_cuda, loaded['w'].sum().item())\n"
        "print(torch.load(own)['p'][0].is_cuda)\n"
    )
    completed = subprocess.run([XLA_PYTHON, "-m", "torchport", "run", "--device", "xla", str(program), str(gpu_made)],
                               env={**os.environ, "PJRT_DEVICE": "CPU", "TORCHPORT_QUIET": "1"},
                               capture_output=True, text=True, timeout=900)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert completed.stdout.split("\n")[:7] == ["True False 2.0", "True True 2.0", "False False 2.0"] * 2 + ["True"]
