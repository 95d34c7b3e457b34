"""Only the application's own code is retargeted: torch internals and installed libraries see the
real machine, and code outside the scope keeps the real torch."""

SCOPE_SCRIPT = """
import sys, torch, transformers
import transformers.utils
import helper
print("app_cuda=" + str(torch.cuda.is_available()))
print("real_torch_cuda=" + str(sys.modules["torch"].cuda.is_available()))
print("library_cuda=" + str(transformers.utils.is_torch_cuda_available()))
print("helper_device=" + str(helper.make().device))
print("app_torch_is_real=" + str(torch is sys.modules["torch"]))
print("isinstance_device=" + str(isinstance(torch.device("cuda"), torch.device)))
"""


def test_application_sees_the_target_while_torch_and_libraries_see_the_truth(program, tmp_path):
    (tmp_path / "helper.py").write_text("import torch\ndef make():\n    return torch.zeros(2, device='cuda')\n")
    result = program(SCOPE_SCRIPT, "--device", "cpu")
    assert result.returncode == 0, result.stderr
    values = result.values()
    assert values["app_cuda"] == "True"
    assert values["real_torch_cuda"] == "False"
    assert values["library_cuda"] == "False"
    assert values["helper_device"] == "cpu"  # a sibling module is in scope
    assert values["app_torch_is_real"] == "False"
    assert values["isinstance_device"] == "True"


def test_code_outside_scope_is_untouched_until_scope_is_widened(program, tmp_path):
    library = tmp_path / "vendored"
    library.mkdir()
    (library / "outside.py").write_text("import torch\ndef make():\n    return torch.zeros(2).cuda()\n")
    app = tmp_path / "app"
    app.mkdir()
    source = (
        "import sys\nsys.path.insert(0, %r)\nimport outside\n"
        "try:\n    print('device=' + str(outside.make().device))\n"
        "except (AssertionError, RuntimeError) as error:\n    print('error=' + type(error).__name__)\n"
    ) % str(library)
    narrow = program(source, "--device", "cpu", name="app/main.py")
    assert narrow.values().get("error") in {"AssertionError", "RuntimeError"}, narrow.stdout + narrow.stderr
    wide = program(source, "--device", "cpu", "--scope", str(library), name="app/main.py")
    assert wide.values().get("device") == "cpu", wide.stderr
    via_env = program(source, "--device", "cpu", name="app/main.py", env={"TORCHPORT_SCOPE": str(library)})
    assert via_env.values().get("device") == "cpu", via_env.stderr


def test_torch_compile_data_parallel_and_transformers_work_inside_a_retargeted_script(program):
    source = """
    import torch, torch.nn as nn
    from transformers import BertConfig, BertModel
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(8, 8)
        def forward(self, x):
            return self.linear(x) + torch.ones(8, device=x.device)
    torch.manual_seed(0)
    net = Net().cuda()
    x = torch.randn(4, 8, device="cuda")
    compiled = torch.compile(net, backend="aot_eager")
    print("compiled_matches=" + str(torch.equal(compiled(x), net(x))))
    parallel = nn.DataParallel(Net()).cuda()
    print("dp_shape=" + str(tuple(parallel(x).shape)))
    config = BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                        vocab_size=100)
    bert = BertModel(config).to("cuda").eval()
    ids = torch.randint(0, 100, (2, 7)).cuda()
    print("bert_device=" + str(bert(ids).last_hidden_state.device))
    """
    result = program(source, "--device", "cpu")
    assert result.returncode == 0, result.stderr
    values = result.values()
    assert values["compiled_matches"] == "True"
    assert values["dp_shape"] == "(4, 8)"
    assert values["bert_device"] == "cpu"


def test_a_venv_inside_the_project_stays_out_of_scope():
    import os
    import sys

    from torchport.retarget.scope import in_scope

    project = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    torch_file = sys.modules["torch"].__file__
    assert torch_file.startswith(project)  # .venv lives inside the project here
    assert not in_scope(torch_file, [project])
    assert in_scope(os.path.join(project, "examples", "gpt.py"), [project])


def test_distributions_installed_into_a_pythonpath_folder_stay_out_of_scope(tmp_path):
    # `pip install --target DIR` on PYTHONPATH: DIR holds libraries (with their dist-info) beside the
    # user's own modules
    from torchport.retarget.scope import in_scope

    folder = tmp_path / "site"
    (folder / "gymlike").mkdir(parents=True)
    (folder / "gymlike" / "__init__.py").write_text("")
    (folder / "gymlike-1.0.dist-info").mkdir()
    (folder / "gymlike-1.0.dist-info" / "RECORD").write_text("gymlike/__init__.py,sha256=x,0\nsixlike.py,,\n")
    (folder / "sixlike.py").write_text("")
    (folder / "mine.py").write_text("")
    assert not in_scope(str(folder / "gymlike" / "__init__.py"), [str(folder)])
    assert not in_scope(str(folder / "sixlike.py"), [str(folder)])
    assert in_scope(str(folder / "mine.py"), [str(folder)])


def test_the_projects_own_packages_are_retargeted_and_the_scope_is_explained(tmp_path):
    """The minGPT layout: projects/adder/adder.py imports the repository's mingpt/ on PYTHONPATH=."""
    import json
    import os
    import subprocess
    import sys

    (tmp_path / "mingpt").mkdir()
    (tmp_path / "mingpt" / "__init__.py").write_text("")
    (tmp_path / "mingpt" / "trainer.py").write_text(
        "import torch\n"
        "def device():\n"
        "    return torch.zeros(1).to('cuda').device.type\n"
    )
    (tmp_path / "projects" / "adder").mkdir(parents=True)
    (tmp_path / "projects" / "adder" / "adder.py").write_text(
        "from mingpt.trainer import device\nprint('device=' + device())\n"
    )
    environment = {**os.environ, "PYTHONPATH": ".", "TORCHPORT_QUIET": "1"}
    command = [sys.executable, "-m", "torchport", "run", "--device", "cpu", "--verbose"]
    report = tmp_path / "report.json"
    done = subprocess.run([*command, "--report", str(report), "projects/adder/adder.py"], capture_output=True,
                          text=True, cwd=tmp_path, env=environment, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "device=cpu" in done.stdout
    assert f"retargeting code under {tmp_path} (PYTHONPATH entry)" in done.stderr
    roots = {entry["root"]: entry["why"] for entry in json.loads(report.read_text())["scope"]}
    assert roots[str(tmp_path)] == "PYTHONPATH entry"

    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'adder'\n")  # a marker: no PYTHONPATH needed
    environment.pop("PYTHONPATH")
    marked = subprocess.run([*command, "projects/adder/adder.py"], capture_output=True, text=True,
                            cwd=tmp_path, env={**environment, "PYTHONPATH": "."}, timeout=300)
    assert "device=cpu" in marked.stdout, marked.stderr
    assert "holds pyproject.toml" in marked.stderr

    narrowed = subprocess.run([*command, "--no-scope", str(tmp_path / "mingpt"), "projects/adder/adder.py"],
                              capture_output=True, text=True, cwd=tmp_path, env={**environment, "PYTHONPATH": "."},
                              timeout=300)
    assert narrowed.returncode == 1 and "Torch not compiled with CUDA enabled" in narrowed.stderr


def test_project_root_is_the_nearest_marked_folder(tmp_path, monkeypatch):
    from torchport.retarget import scope

    (tmp_path / "setup.cfg").write_text("")
    (tmp_path / "a" / "b").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "a")
    monkeypatch.setenv("PYTHONPATH", "")
    roots = dict(scope.application_roots(str(tmp_path / "a" / "b")))
    assert roots[str(tmp_path)] == "project of the program: holds setup.cfg"
    assert scope.in_scope(str(tmp_path / "a" / "b" / "m.py"), list(roots))
    assert not scope.in_scope(str(tmp_path / "a" / "b" / "m.py"), list(roots), [str(tmp_path / "a")])
