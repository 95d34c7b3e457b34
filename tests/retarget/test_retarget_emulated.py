"""Retargeting to a device that is not the CPU: the emulated Neuron device (PrivateUse1)."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_cuda_program_lands_on_the_emulated_device_and_mixing_with_cpu_fails(program):
    source = """
    import torch
    x = torch.randn(4, 4).cuda()
    model = torch.nn.Linear(4, 2).to("cuda:0")
    print("type=" + x.device.type)
    print("param_type=" + next(model.parameters()).device.type)
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
