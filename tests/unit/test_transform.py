"""The import-time rewriter: which call sites it touches, and that line numbers survive."""

import ast

import torch

from torchport import backends
from torchport.retarget import runtime, state, transform
from torchport.retarget.state import Retarget

SOURCE = """\
import torch
model = build().cuda()
x = torch.zeros(3, device=args.device)
y = x.to(rank, non_blocking=True)
state = torch.load(path, map_location="cuda:0")
ddp = DDP(model, device_ids=[rank], output_device=rank)
on_gpu = x.is_cuda
loader = DataLoader(data, pin_memory=True, batch_size=4)
z = x.to(torch.float16)
w = f(dtype=torch.float32, devices=3)
"""


def _rewritten_helpers(source: str) -> dict[int, set[str]]:
    tree, _ = transform.rewrite(ast.parse(source), "app.py")
    found: dict[int, set[str]] = {}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == transform.HELPER
        ):
            found.setdefault(node.lineno, set()).add(node.func.attr)
    return found


def test_each_device_carrying_site_is_rewritten_on_its_own_line():
    found = _rewritten_helpers(SOURCE)
    assert found[1] == {"facade"}  # `import torch` runs, then binds the facade
    assert found[2] == {"cuda"}
    assert found[3] == {"call"}  # a device keyword: the callee decides whether it is mapped
    assert found[4] == {"to"}  # .to() with more than one argument: the helper takes the call whole
    assert found[5] == {"call"}
    assert found[6] == {"call"}
    assert found[7] == {"is_cuda"}
    assert found[8] == {"call"}
    assert found[9] == {"to1"}  # `.to(x)`, the common form: a dtype passes through untouched
    assert 10 not in found


def test_import_sites_bind_facades_and_keep_builtins():
    source = (
        "import torch.cuda as tc\nfrom torch.cuda.amp import GradScaler\nimport importlib\n"
        "m = importlib.import_module('torch.cuda')\nimport os\n"
    )
    tree, _ = transform.rewrite(ast.parse(source), "app.py")
    text = ast.unparse(tree)
    assert "tc = __tp__.facade(tc)" in text
    assert "GradScaler = __tp__.from_import('torch.cuda.amp', 'GradScaler', GradScaler)" in text
    assert "m = __tp__.facade(importlib.import_module('torch.cuda'))" in text
    assert "os = " not in text and "__builtins__" not in text


def _application_function(device):
    return f"cuda:{device}"


def test_a_device_keyword_is_mapped_only_where_it_reaches_torch():
    runtime.bind(Retarget(backend=backends.get("cpu"), precision="keep"))
    try:
        site = runtime.register_site("app.py", 1, "device=")
        assert runtime.call(torch.ones, site, 2, device=0).device.type == "cpu"
        assert runtime.call(torch.ones(1).new_zeros, site, 2, device="cuda").device.type == "cpu"
        assert runtime.call(_application_function, site, device=0) == "cuda:0"  # stays an integer
        assert runtime.call(dict, site, device=2) == {"device": 2}  # not torch: untouched
    finally:
        runtime.bind(state.current())  # the process's own retargeting, if a test activated one


def test_runtime_maps_only_what_means_cuda():
    runtime.bind(Retarget(backend=backends.get("cpu"), precision="keep"))
    try:
        site = runtime.register_site("app.py", 1, "test")
        assert runtime.map_device("cuda", site) == "cpu"
        assert runtime.map_device("cuda:1", site) == "cpu"
        assert runtime.map_device("meta", site) == "meta"
        assert runtime.map_device(torch.device("cuda", 3), site) == torch.device("cpu")
        assert runtime.map_device(0, site) == torch.device("cpu")
        assert runtime.map_device(torch.float16, site) is torch.float16
        assert runtime.device_ids(site, [0, 1]) is None  # DDP on the CPU wants None
        assert runtime.to(site, torch.ones(2), "cuda").device.type == "cpu"
        assert runtime.to(site, torch.ones(2), torch.float16).dtype == torch.float16
        assert runtime.map_device(torch.ones(2), site).shape == (2,)  # `x.to(other)` passes through
        mapped = runtime.map_location(site, {"cuda:0": "cuda:1"})
        for saved_on in ("cuda:0", "cuda:3", "cpu"):  # listed, unlisted (restored where saved), host
            assert mapped(torch.UntypedStorage(4), saved_on).device.type == "cpu"
    finally:
        runtime.bind(state.current())  # the process's own retargeting, if a test activated one


def test_rewritten_code_compiles_with_the_original_line_numbers():
    code = transform.compile_source("a = 1\n\nb = x.cuda()\n", "app.py")
    lines = {instruction.positions.lineno for instruction in __import__("dis").get_instructions(code)
             if instruction.positions and instruction.positions.lineno}
    assert 3 in lines and max(lines) == 3


def test_the_callee_decides_by_its_distribution():
    import importlib.util

    import numpy

    from torchport.retarget import destination

    assert destination.leaves_application(torch.nn.Linear)
    assert destination.leaves_application(torch.ones(1).to)  # a builtin method: its receiver's type
    assert not destination.leaves_application(numpy.asarray)  # numpy does not depend on torch
    assert not destination.leaves_application(print)
    if importlib.util.find_spec("transformers") is not None:
        assert destination.depends_on_torch("transformers")  # through its `torch` extra


def test_torch_functions_the_emulated_device_wraps_still_leave_the_application():
    from torchport.retarget import destination

    backends.get("neuron-emulated").device()  # installs the emulated device (and its pinned-memory factories)
    destination.forget()
    assert destination.module_of(torch.ones(1).new_zeros) == "torch"
    assert destination.leaves_application(torch.ones(1).new_zeros)
    assert destination.leaves_application(torch.zeros)
