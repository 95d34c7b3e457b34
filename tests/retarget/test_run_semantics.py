"""The retargeted program sees what it would see without torchport: argv, __name__, exit status,
tracebacks; and bad input to `torchport run` is one clear line with exit code 2."""

import json
import os
import subprocess
import sys

SCRIPT = """
import sys, torch
print("argv=" + repr(sys.argv[1:]))
print("name=" + __name__)
x = torch.ones(2).cuda()
def fail():
    raise ValueError("boom " + str(x.device.__str__().split(":")[0]))
if "--fail" in sys.argv:
    fail()
sys.exit(int(sys.argv[-1]) if sys.argv[-1].isdigit() else 0)
"""


def test_argv_name_and_exit_status_are_the_programs_own(program):
    result = program(SCRIPT, "--device", "cpu", args=["--lr", "0.1", "7"])
    assert result.returncode == 7, result.stderr
    assert result.values()["argv"] == "['--lr', '0.1', '7']"
    assert result.values()["name"] == "__main__"


def test_traceback_is_exactly_the_one_python_prints(program, tmp_path):
    retargeted = program(SCRIPT, "--device", "cpu", args=["--fail"])
    # The same program, hand-ported, run by plain Python from the same path.
    plain = program(SCRIPT.replace(".cuda()", ".to('cpu')"), form="plain", args=["--fail"])
    assert retargeted.returncode == plain.returncode == 1
    assert "torchport" not in retargeted.stderr
    assert retargeted.stderr.splitlines()[-1] == "ValueError: boom cpu"
    retargeted_frames = [line for line in retargeted.stderr.splitlines() if line.startswith("  File")]
    plain_frames = [line for line in plain.stderr.splitlines() if line.startswith("  File")]
    assert retargeted_frames == plain_frames


def test_use_form_reruns_the_script_retargeted_and_keeps_its_exit_status(program):
    result = program(SCRIPT, form="use", args=["5"])
    assert result.returncode == 5, result.stderr
    assert result.values()["name"] == "__main__"


def test_use_in_a_function_or_after_other_code_runs_the_script_retargeted_and_says_what_ran_twice(tmp_path):
    # `import helpers` (the application's module) and a side effect above the call; the call in main()
    (tmp_path / "helpers.py").write_text("import torch\ndef make():\n    return torch.ones(2, device='cuda')\n")
    (tmp_path / "app.py").write_text(
        "import sys, torch, helpers\nimport torchport\nprint('argv=' + sys.argv[0])\n"
        "def main():\n    torchport.use('cpu')\n    x = torch.zeros(1, device='cuda')\n"
        "    print('devices=' + str((x.is_cuda, helpers.make().is_cuda)))\n"
        "if __name__ == '__main__':\n    main()\n")
    environment = {key: value for key, value in os.environ.items() if key not in ("TORCHPORT_QUIET", "CUDA_VISIBLE_DEVICES")}
    completed = subprocess.run([sys.executable, "app.py"], capture_output=True, text=True, cwd=tmp_path,
                               env=environment, timeout=300)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.splitlines() == ["argv=app.py", "argv=app.py", "devices=(True, True)"]
    assert "the statements above the call (line 3) have run once already and run again" in completed.stderr
    assert "module helpers imported above it naming CUDA, imported again retargeted" in completed.stderr
    # from a thread, running the script again would run the program twice: it is not, and it says so
    (tmp_path / "threaded.py").write_text(
        "import threading, torchport\nprint('start')\n"
        "worker = threading.Thread(target=lambda: torchport.use('cpu'))\nworker.start()\nworker.join()\n")
    completed = subprocess.run([sys.executable, "threaded.py"], capture_output=True, text=True, cwd=tmp_path,
                               env=environment, timeout=300)
    assert completed.returncode == 0 and completed.stdout.splitlines() == ["start"], completed.stderr
    assert "use() was called by the entry script on a thread" in completed.stderr


def _torchport(*arguments, env=None):
    import os

    environment = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "torchport", *arguments], capture_output=True, text=True,
                          env=environment, timeout=120)


def test_missing_script_is_one_line_and_exit_2(tmp_path):
    result = _torchport("run", str(tmp_path / "nope.py"))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "not found" in result.stderr and "Traceback" not in result.stderr


def test_missing_module_is_one_line_and_exit_2():
    result = _torchport("run", "-m", "no_such_module_here")
    assert result.returncode == 2 and "No module named 'no_such_module_here'" in result.stderr
    assert "Traceback" not in result.stderr


def test_unknown_device_lists_valid_names(tmp_path):
    script = tmp_path / "a.py"
    script.write_text("print(1)\n")
    result = _torchport("run", "--device", "tpuu", str(script))
    assert result.returncode == 2 and "Valid names:" in result.stderr and "neuron" in result.stderr


def test_unusable_device_says_why_and_how(tmp_path):
    script = tmp_path / "a.py"
    script.write_text("print(1)\n")
    result = _torchport("run", "--device", "trainium", str(script))
    assert result.returncode == 2 and "torch_neuronx is not installed" in result.stderr
    assert "neuron-emulated" in result.stderr or "Install" in result.stderr


def test_flag_and_environment_conflict_names_both(tmp_path):
    script = tmp_path / "a.py"
    script.write_text("print(1)\n")
    result = _torchport("run", "--device", "cpu", str(script), env={"TORCHPORT_DEVICE": "gpu"})
    assert result.returncode == 2 and "--device" in result.stderr and "TORCHPORT_DEVICE" in result.stderr


def test_module_form_runs_package_main_with_its_args(tmp_path):
    package = tmp_path / "trainer"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "__main__.py").write_text(
        "import sys, torch\nfrom . import model\n"
        "print('argv=' + repr(sys.argv[1:]))\nprint('device=' + str(model.build().weight.device))\n"
    )
    (package / "model.py").write_text("import torch\ndef build():\n    return torch.nn.Linear(2, 2).cuda()\n")
    result = subprocess.run([sys.executable, "-m", "torchport", "run", "--device", "cpu", "-m", "trainer", "--x", "1"],
                            capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "argv=['--x', '1']" in result.stdout and "device=cpu" in result.stdout


LAUNCHER = """
import subprocess, sys
from subprocess import check_output as output
import subprocess as sp
done = subprocess.run([sys.executable, "child.py", "a"], capture_output=True, text=True)
print("run=" + done.stdout.strip() + "," + str(done.returncode))
print("child_stderr=" + repr(done.stderr))  # the child's streams carry what it printed, nothing else
print("flags=" + output([sys.executable, "-u", "child.py", "b"], text=True).strip())
print("module=" + sp.Popen([sys.executable, "-m", "childmodule"], stdout=sp.PIPE, text=True).communicate()[0].strip())
print("code=" + subprocess.run([sys.executable, "-c", "print('plain')"], capture_output=True, text=True).stdout.strip())
"""


def test_python_children_the_application_starts_run_retargeted(program, tmp_path):
    # on a GPU machine `python child.py` started by the program runs on the GPU too
    (tmp_path / "child.py").write_text("import sys, torch\nx = torch.ones(2).cuda()\n"
                                       "print(sys.argv[1] + ':' + x.device.__str__().split(':')[0] + ':' + str(torch.cuda.is_available()))\n")
    (tmp_path / "childmodule.py").write_text("import torch\nprint('m:' + torch.zeros(1, device='cuda').device.__str__().split(':')[0])\n")
    report = tmp_path / "report.json"
    for form, options in (("run", ("--device", "neuron-emulated", "--report", str(report))), ("use", ())):
        result = program(LAUNCHER, *options, form=form, env={"TORCHPORT_QUIET": ""})  # summaries printed
        assert result.returncode == 0, result.stderr[-2000:]
        device = "emulated" if form == "run" else "cpu"
        assert result.values() == {"run": f"a:{device}:True,0", "child_stderr": "''", "flags": f"b:{device}:True",
                                   "module": f"m:{device}", "code": "plain"}, form
    import json

    decisions = [d["decision"] for d in json.loads(report.read_text())["decisions"]
                 if d["topic"].startswith("Python child processes")]
    assert any("run under torchport run --device neuron-emulated" in text for text in decisions)
    assert any("python -c" in text and "not retargeted" in text for text in decisions)


def test_under_torchrun_each_local_rank_has_a_cuda_device_of_its_own(tmp_path):
    # the ImageNet example: ngpus_per_node = device_count() splits the batch and picks the rank that
    # saves checkpoints (args.rank % ngpus_per_node == 0); with 2 processes on a 1-device target
    script = tmp_path / "ranks.py"
    script.write_text("import os, torch\n"
                      "local_rank = int(os.environ['LOCAL_RANK'])\n"
                      "torch.cuda.set_device(local_rank)\n"
                      "ngpus = torch.cuda.device_count()\n"
                      "x = torch.ones(1).cuda()\n"
                      # a GPU machine reports the tensor on the rank's own device (checkpoint code
                      # builds map_location=f'cuda:{x.get_device()}' from it)
                      "ordinals = (x.get_device(), torch.ones(1, device=f'cuda:{local_rank}').get_device(),\n"
                      "            torch.ones(1).to(local_rank).device.index)\n"
                      # one file per rank: the two ranks' prints can interleave on the shared stdout
                      "with open(f'rank{local_rank}.txt', 'w') as out:\n"
                      "    out.write(str((ngpus, torch.cuda.current_device(), 64 // ngpus, "
                      "local_rank % ngpus == 0, x.device.__str__().split(':')[0], ordinals)))\n")
    env = {**os.environ, "TORCHPORT_QUIET": "1", "OMP_NUM_THREADS": "1"}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    for device, device_type in (("cpu", "cpu"), ("neuron-emulated", "emulated")):
        completed = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                                    "-m", "torchport", "run", "--device", device, str(script)],
                                   capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
        assert completed.returncode == 0, completed.stderr[-2000:]
        seen = {rank: (tmp_path / f"{rank}.txt").read_text() for rank in ("rank0", "rank1")}
        # on the CPU target a tensor's device reads as the host's ('cpu', index None: README table)
        index = (0, 1) if device_type != "cpu" else (None, None)
        assert seen == {"rank0": f"(2, 0, 32, True, '{device_type}', (0, 0, {index[0]}))",
                        "rank1": f"(2, 1, 32, False, '{device_type}', (1, 1, {index[1]}))"}


def test_under_torchrun_rank_0s_summary_says_the_other_ranks_records_are_in_their_reports(tmp_path):
    # only rank 0 prints a summary; what another rank alone reached (its own data, its own branch)
    # must not look like nothing
    script = tmp_path / "ranks.py"
    script.write_text("import os, torch\n"
                      "if os.environ['RANK'] == '1':\n"
                      "    torch.optim.AdamW(torch.nn.Linear(2, 2).cuda().parameters(), fused=True)\n")
    env = {key: value for key, value in os.environ.items() if key not in ("CUDA_VISIBLE_DEVICES", "TORCHPORT_QUIET")}
    completed = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                                "-m", "torchport", "run", "--device", "neuron-emulated", "--report", "report.json",
                                str(script)], capture_output=True, text=True, env={**env, "OMP_NUM_THREADS": "1"},
                               cwd=tmp_path, timeout=300)
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert completed.stderr.count("torchport: cuda -> neuron-emulated") == 1  # rank 0's
    assert "rank 0 of 2: the other ranks print no summary" in completed.stderr
    rank1 = json.loads((tmp_path / "report.rank1.json").read_text())
    assert any(entry["topic"] == "fused optimizers" for entry in rank1["decisions"])


def test_a_warning_shown_once_per_line_stays_shown_once(program):
    # Python shows a warning once per line under its default filter; a filter torchport added at
    # the program's first autocast region made it forget, so the program's own warnings showed again
    source = """
    import warnings, torch
    model = torch.nn.Linear(4, 4).cuda()
    for step in range(3):
        warnings.warn("checkpoint directory exists")
        with torch.autocast("cuda", dtype=torch.float16):
            model(torch.randn(2, 4, device="cuda"))
    """
    retargeted = program(source, "--device", "neuron-emulated", "--precision", "auto")
    assert retargeted.returncode == 0, retargeted.stderr[-2000:]
    assert retargeted.stderr.count("UserWarning: checkpoint directory exists") == 1, retargeted.stderr[-2000:]
    # on the CPU target, CUDA's autocast lists are installed at the first region: torch's deprecation
    # warning for the line inside the loop still shows once
    deprecated = """
    import torch
    x = torch.ones(2, 2).cuda()
    for step in range(3):
        with torch.cuda.amp.autocast():
            y = x @ x
    """
    for device in ("cpu", "neuron-emulated"):
        retargeted = program(deprecated, "--device", device)
        assert retargeted.returncode == 0, retargeted.stderr[-2000:]
        assert retargeted.stderr.count("FutureWarning") == 1, (device, retargeted.stderr[-2000:])


def test_a_short_program_does_not_pay_for_the_compiler_stack(program):
    # Dynamo costs about a second to import; torchport's functions that compiled code holds as
    # constants are marked without it, so a program that never compiles never loads it
    source = ("import sys, torch\nx = torch.ones(2, device='cuda')\n"
              "print('loaded=' + str('torch._dynamo' in sys.modules))\n")
    for form in ("run", "use"):
        result = program(source, "--device", "cpu", form=form)
        assert result.returncode == 0, result.stderr[-2000:]
        assert result.values()["loaded"] == "False", form


def test_the_grad_scaler_decision_says_how_fp16_autocast_runs_under_each_precision(program, tmp_path):
    # --precision fp32 turns CUDA's fp16 autocast off: the report says so in words, not Python's None
    source = """
    import torch
    scaler = torch.cuda.amp.GradScaler()
    print("enabled=" + str(scaler.is_enabled()))
    """
    for precision, expected in (("fp32", "fp16 autocast runs off (fp32)"), ("bf16", "fp16 autocast runs as bfloat16")):
        result = program(source, "--device", "cpu", "--precision", precision, "--report", "report.json")
        assert result.returncode == 0, result.stderr[-2000:]
        assert result.values()["enabled"] == "True"
        decisions = {entry["topic"]: entry["decision"]
                     for entry in json.loads((tmp_path / "report.json").read_text())["decisions"]}
        assert expected in decisions["GradScaler"] and "None" not in decisions["GradScaler"], decisions


def test_a_branch_on_a_tensors_device_type_is_named_on_the_cpu_target(program, tmp_path):
    # YOLOv5's AMP check reads the model's parameter device: 'cpu' on the CPU target, 'cuda' on a GPU
    source = """
    import torch
    batch = torch.ones(2, 4)
    on_host = batch.device.type == "cpu"  # a loader's batch: 'cpu' on a GPU machine too
    model = torch.nn.Linear(4, 4).cuda()
    amp = next(model.parameters()).device.type != "cpu"
    print("amp=" + str(amp))
    """
    for device, amp, noted in (("cpu", "False", True), ("cuda-emulated", "True", False)):
        result = program(source, "--device", device, "--report", "report.json")
        assert result.returncode == 0, result.stderr[-2000:]
        assert result.values()["amp"] == amp
        decisions = {entry["topic"]: entry["decision"]
                     for entry in json.loads((tmp_path / "report.json").read_text())["decisions"]}
        note = decisions.get("device.type on the CPU target", "")
        assert ("read 'cpu' at" in note and "app.py:4, " in note and "app.py:6" in note) == noted, decisions
