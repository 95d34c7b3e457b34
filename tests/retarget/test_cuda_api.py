"""The torch.cuda API, amp, distributed and flag facades, as a CUDA program uses them, on the CPU."""

import json

import pytest

API_SCRIPT = """
import time, torch
from torch.cuda import amp
from torch import cuda as tc
import torch.backends.cudnn as cudnn
print("count=" + str(torch.cuda.device_count()))
print("current=" + str(torch.cuda.current_device()))
print("capability=" + str(torch.cuda.get_device_capability()))
properties = torch.cuda.get_device_properties(0)
print("total_memory_positive=" + str(properties.total_memory > 0))
print("bf16=" + str(torch.cuda.is_bf16_supported()))
start, end = tc.Event(enable_timing=True), tc.Event(enable_timing=True)
start.record(); time.sleep(0.05); end.record(); torch.cuda.synchronize()
print("elapsed_ok=" + str(45.0 <= start.elapsed_time(end) < 1000.0))
untimed, unrecorded = tc.Event(), tc.Event(enable_timing=True)
untimed.record(); end.record()
for name, first, second in (("untimed", untimed, end), ("unrecorded", start, unrecorded)):
    try:  # CUDA's ValueErrors, whatever the target's events allow
        first.elapsed_time(second)
    except ValueError as error:
        print(name + "=" + str(error))
stream = torch.cuda.Stream()
with torch.cuda.stream(stream):
    y = torch.ones(3, device="cuda") * 2
torch.cuda.current_stream().wait_stream(stream)
y.record_stream(torch.cuda.current_stream())
print("stream_sum=" + str(y.sum().item()))
torch.cuda.nvtx.range_push("step"); torch.cuda.nvtx.range_pop()
with torch.cuda.nvtx.range("block"):
    pass
print("memory=" + str(torch.cuda.memory_allocated()) + "," + str(torch.cuda.max_memory_allocated()))
cudnn.deterministic = True
print("deterministic=" + str(torch.are_deterministic_algorithms_enabled()))
cudnn.benchmark = True
torch.manual_seed(0); torch.cuda.manual_seed_all(123)
print("rand_after_cuda_seed=" + repr(torch.rand(1).item()))
x = torch.cuda.FloatTensor(2, 3)
print("float_tensor=" + str(tuple(x.shape)) + str(x.device))
with amp.autocast():
    z = torch.randn(4, 4, device="cuda") @ torch.randn(4, 4, device="cuda")
print("amp_dtype=" + str(z.dtype))
with torch.autocast("cuda", dtype=torch.bfloat16):
    w = torch.randn(4, 4).cuda() @ torch.randn(4, 4).cuda()
print("bf16_dtype=" + str(w.dtype))
print("scaler=" + str(torch.amp.GradScaler("cuda").is_enabled()))
"""


def test_cuda_api_on_cpu(program, tmp_path):
    report = tmp_path / "report.json"
    result = program(API_SCRIPT, "--device", "cpu", "--precision", "keep", "--report", str(report))
    assert result.returncode == 0, result.stderr
    values = result.values()
    assert values["count"] == "1" and values["current"] == "0"
    from torchport.backends.cpu import has_native_bf16

    assert values["capability"] == ("(8, 0)" if has_native_bf16() else "(7, 0)")
    assert values["total_memory_positive"] == "True" and values["bf16"] == "True"
    assert values["elapsed_ok"] == "True"
    assert values["untimed"] == "Both events must be created with argument 'enable_timing=True'."
    assert values["unrecorded"] == "Both events must be recorded before calculating elapsed time."
    assert values["stream_sum"] == "6.0"
    assert values["memory"] == "0,0"
    assert values["deterministic"] == "True"
    # on the CPU the device's draws come from the host generator: seeding "the GPU" seeds it, so that
    # draws after torch.cuda.manual_seed(s) repeat as they do on CUDA (host draws restart with them)
    import torch

    torch.manual_seed(123)
    assert values["rand_after_cuda_seed"] == repr(torch.rand(1).item())
    assert values["float_tensor"] == "(2, 3)cpu"
    assert values["amp_dtype"] == "torch.float16"  # keep: what the code asked for
    assert values["bf16_dtype"] == "torch.bfloat16"
    assert values["scaler"] == "True"  # fp16 kept, so the scaler still guards underflow
    data = json.loads(report.read_text())
    assert data["target"] == "cpu" and data["precision_policy"] == "keep"
    apis = data["redirected_by_api"]
    for api in ("torch.cuda.Event", "torch.cuda.synchronize", "autocast('cuda')", "GradScaler('cuda')"):
        assert apis.get(api, 0) >= 1, api
    noop_apis = {entry["api"] for entry in data["noops"]}
    assert "torch.backends.cudnn.benchmark" in noop_apis
    script = str(tmp_path / "app.py")
    assert data["redirected"] and all(entry["site"].startswith(script + ":") for entry in data["redirected"])
    sites = {entry["site"] for entry in data["redirected"]}
    assert f"{script}:12" in sites  # the line creating the Events


PRECISION_SCRIPT = """
import torch
with torch.cuda.amp.autocast():
    out = torch.randn(4, 4).cuda() @ torch.randn(4, 4).cuda()
print("dtype=" + str(out.dtype))
scaler = torch.cuda.amp.GradScaler()
print("scaler=" + str(scaler.is_enabled()))
# the gradient-penalty recipe unscales by hand with 1 / get_scale(): it must be what scale() multiplied by
print("agree=" + str(scaler.scale(torch.ones((), device="cuda")).item() == scaler.get_scale() == 65536.0))
plain = torch.randn(4, 4).cuda() @ torch.randn(4, 4).cuda()
print("outside=" + str(plain.dtype))
"""


def test_precision_policies(program):
    from torchport.backends.cpu import has_native_bf16

    # the application's GradScaler stays enabled whatever the policy makes of fp16, as on a GPU
    expected = {
        "keep": ("torch.float16", "True"),
        # auto: bf16 where the CPU runs it natively, otherwise autocast off
        "auto": ("torch.bfloat16" if has_native_bf16() else "torch.float32", "True"),
        "bf16": ("torch.bfloat16", "True"),
        "fp32": ("torch.float32", "True"),
    }
    for policy, (dtype, scaler) in expected.items():
        result = program(PRECISION_SCRIPT, "--device", "cpu", "--precision", policy)
        assert result.returncode == 0, result.stderr
        values = result.values()
        assert (values["dtype"], values["scaler"]) == (dtype, scaler), policy
        assert values["outside"] == "torch.float32", policy  # never cast code that did not ask
        assert values["agree"] == "True", policy


NUMPY_METRICS = """
import numpy as np, torch
from torch.cuda.amp import autocast
torch.manual_seed(0)
model = torch.nn.Linear(8, 3).cuda().eval()
x = torch.randn(4, 8).cuda()
with torch.no_grad(), autocast():
    logits = model(x)
array = logits.cpu().numpy()  # an evaluate() gathering logits for numpy metrics
print("array=" + str(array.dtype) + "," + str(array.shape))
print("matches=" + str(np.allclose(array.astype(np.float32), logits.float().cpu().numpy(), atol=1e-2)))
own = torch.ones(2, dtype=torch.bfloat16)
try:  # a bfloat16 tensor the application made itself: NumPy refuses it, as on a GPU machine
    own.numpy()
    print("own=converted")
except TypeError:
    print("own=TypeError")
"""


def test_numpy_of_an_fp16_autocast_result_the_policy_ran_in_bf16_is_the_gpus_float16(program, tmp_path):
    from torchport.backends.cpu import has_native_bf16

    if not has_native_bf16():
        pytest.skip("the auto policy runs fp16 autocast in bf16 only where the CPU has native bf16")
    result = program(NUMPY_METRICS, "--device", "cpu", "--precision", "auto", "--report", "report.json")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.values() == {"array": "float16,(4, 3)", "matches": "True", "own": "converted"}
    decisions = {entry["topic"]: entry["kind"] for entry in json.loads((tmp_path / "report.json").read_text())["decisions"]}
    assert decisions.get("x.numpy() of bfloat16 results") == "adapted"
    keep = program(NUMPY_METRICS, "--device", "cpu", "--precision", "keep")  # fp16 kept: nothing to adapt
    assert keep.returncode == 0, keep.stderr[-3000:]
    assert keep.values() == {"array": "float16,(4, 3)", "matches": "True", "own": "TypeError"}


def test_distributed_and_checkpoint_forms(program, tmp_path):
    source = """
    import os, torch, torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29611", RANK="0", WORLD_SIZE="1")
    dist.init_process_group("nccl" if dist.is_nccl_available() else "gloo")
    # what a GPU machine answers (the group is served by the target's backend, gloo on the CPU)
    print("backend=" + dist.get_backend() + "," + str(torch.distributed.distributed_c10d.get_backend()))
    group = dist.new_group([0], backend="nccl")
    print("group_backend=" + dist.get_backend(group))
    print("gloo_group=" + dist.get_backend(dist.new_group([0], backend="gloo")))
    # a per-device backend string (torchtitan, DCP scripts): read back as written, NCCL for CUDA in it
    print("per_device=" + dist.get_backend(dist.new_group([0], backend="cpu:gloo,cuda:nccl")))
    model = torch.nn.Linear(3, 3).to(0)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[0], output_device=0)
    torch.save(model.state_dict(), "ck.pt")
    for location in ("cuda", "cuda:0", torch.device("cuda", 0), {"cuda:0": "cuda:0"},
                     lambda storage, loc: storage.cuda(0)):
        state = torch.load("ck.pt", map_location=location)
        assert state["weight"].device.type == "cpu", location
    print("loaded=ok")
    dist.destroy_process_group()
    """
    result = program(source, "--device", "cpu")
    assert result.returncode == 0, result.stderr
    values = result.values()
    assert values["backend"] == "nccl,nccl" and values["group_backend"] == "nccl" and values["gloo_group"] == "gloo"
    assert values["per_device"] == "cpu:gloo,cuda:nccl"
    assert values["loaded"] == "ok"


def test_cuda_only_features_name_the_call_site_and_the_alternative(program):
    graph = program("import torch\ng = torch.cuda.CUDAGraph()\n", "--device", "cpu")
    assert graph.returncode == 1
    last = graph.stderr.strip().splitlines()[-1]
    assert "torch.cuda.CUDAGraph" in last and "app.py:2" in last and "torch.compile" in last
    pool = program("import torch\npool = torch.cuda.graph_pool_handle()\n", "--device", "cpu")
    last = pool.stderr.strip().splitlines()[-1]
    assert pool.returncode == 1 and "torch.cuda.graph_pool_handle" in last and "app.py:2" in last
    # the modules such code imports from are modules, their CUDA-only entry points named the same way
    jit = program("import torch\nfrom torch.cuda.jiterator import _create_jit_fn\n"
                  "fn = _create_jit_fn('template <typename T> T f(T x) { return x; }')\n", "--device", "cpu")
    last = jit.stderr.strip().splitlines()[-1]
    assert jit.returncode == 1 and "torch.cuda.jiterator._create_jit_fn" in last and "app.py:3" in last, last
    assert "torch.compile" in last
    graphs = program("import torch\nprint('capturing=' + str(torch.cuda.graphs.is_current_stream_capturing()))\n"
                     "torch.cuda.graphs.CUDAGraph()\n", "--device", "cpu")
    last = graphs.stderr.strip().splitlines()[-1]
    assert graphs.values() == {"capturing": "False"}
    assert graphs.returncode == 1 and "torch.cuda.CUDAGraph" in last and "app.py:3" in last, last
    fallback = program(
        "try:\n    import flash_attn\n    print('path=flash')\nexcept ImportError as error:\n"
        "    print('path=sdpa')\n    print('message=' + str(error))\n",
        "--device", "cpu",
    )
    assert fallback.returncode == 0, fallback.stderr
    assert fallback.values()["path"] == "sdpa"
    assert "scaled_dot_product_attention" in fallback.values()["message"]
    # NCCL's single-process collectives: code checking is_available() takes its other path; a call
    # stops at the call site with the alternative (a raw "torch._C has no attribute '_nccl_version'")
    nccl = program("import torch.cuda.nccl as nccl, torch\nx = torch.ones(2, device='cuda')\n"
                   "print('available=' + str(nccl.is_available([x])))\nnccl.version()\n", "--device", "cpu")
    assert nccl.returncode == 1 and nccl.values()["available"] == "False"
    last = nccl.stderr.strip().splitlines()[-1]
    assert "torch.cuda.nccl.version" in last and "app.py:4" in last and "torch.distributed" in last
    # NVML's readings (torch's own call stops on a missing pynvml): the call site and the alternative;
    # nvidia-smi's used memory is the device's, as mem_get_info reads it
    nvml = program("import torch\nprint('used=' + str(torch.cuda.device_memory_used() == "
                   "torch.cuda.mem_get_info()[1] - torch.cuda.mem_get_info()[0]))\ntorch.cuda.utilization()\n",
                   "--device", "neuron-emulated")
    assert nvml.returncode == 1 and nvml.values()["used"] == "True"
    last = nvml.stderr.strip().splitlines()[-1]
    assert "torch.cuda.utilization" in last and "app.py:3" in last and "monitoring" in last
    # a torch.cuda function torchport does not map, failing for want of CUDA: the call site and the
    # alternative, not torch's "Torch not compiled with CUDA enabled" after is_available() said True
    unmapped = program("import torch\nassert torch.cuda.is_available()\ntorch.cuda.caching_allocator_alloc(1024)\n",
                       "--device", "cpu")
    last = unmapped.stderr.strip().splitlines()[-1]
    assert unmapped.returncode == 1 and "UnsupportedCudaFeature" in last and "caching_allocator_alloc" in last
    assert "app.py:3" in last and "compiled with CUDA" not in last
    # a call of the CUDA runtime itself beyond the profiler window and host registration: likewise
    runtime = program("import torch\nhandle = torch.cuda.cudart()\nhandle.cudaDeviceSetLimit(0, 1024)\n", "--device", "cpu")
    last = runtime.stderr.strip().splitlines()[-1]
    assert runtime.returncode == 1 and "UnsupportedCudaFeature" in last and "cudart().cudaDeviceSetLimit" in last
    assert "app.py:3" in last


def test_strict_turns_silent_noops_into_errors(program):
    source = "import torch\ntorch.cuda.set_device(0)\nprint('reached=yes')\n"
    relaxed = program(source, "--device", "cpu")
    assert relaxed.returncode == 0 and relaxed.values()["reached"] == "yes"
    strict = program(source, "--device", "cpu", "--strict")
    assert strict.returncode == 1 and "reached" not in strict.stdout
    assert "torch.cuda.set_device" in strict.stderr and "--strict" in strict.stderr


HIDDEN_SCRIPT = """
import os, warnings
os.environ["CUDA_VISIBLE_DEVICES"] = ""  # set before CUDA is first asked anything, as scripts do
import torch
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    with torch.autocast("cuda"):
        y = torch.ones(2, 2) @ torch.ones(2, 2)
    scaler = torch.amp.GradScaler("cuda")
print("available=" + str(torch.cuda.is_available()))
print("count=" + str(torch.cuda.device_count()))
device = "cuda" if torch.cuda.is_available() else "cpu"
x = torch.zeros(1, device=device)
print("device=" + str(x.device))
# the branches code takes on where its tensors are: the host's, as where CUDA is unavailable
print("is_cuda=" + str((x.is_cuda, x.type(), isinstance(x, torch.cuda.FloatTensor), x.get_device())))
print("autocast_dtype=" + str(y.dtype))
print("scaler=" + str(scaler.is_enabled()))
print("warnings=" + repr(sorted(str(w.message) for w in caught)))
print("device_object=" + str(torch.device("cuda")))  # made as written; placing work on it fails
"""


def test_cuda_visible_devices_hiding_every_gpu_gives_the_cpu_path_of_a_machine_without_cuda(program, tmp_path):
    # the twin: the same program where CUDA really is unavailable (this machine, plain python)
    plain = program(HIDDEN_SCRIPT, form="plain")
    assert plain.returncode == 0, plain.stderr
    assert plain.values()["available"] == "False" and plain.values()["warnings"] != "[]"
    report = tmp_path / "report.json"
    for form, options in (("run", ("--device", "cpu", "--report", str(report))), ("use", ())):
        retargeted = program(HIDDEN_SCRIPT, *options, form=form)
        assert retargeted.returncode == 0, retargeted.stderr
        assert retargeted.values() == plain.values(), form
    decisions = {d["topic"]: d for d in json.loads(report.read_text())["decisions"]}
    assert "hides every device" in decisions["CUDA_VISIBLE_DEVICES"]["decision"]
    # work the application still places on 'cuda' fails as on a GPU machine with every device hidden
    placed = program(HIDDEN_SCRIPT + "torch.zeros(1).cuda()\n", "--device", "cpu")
    assert placed.returncode != 0 and "RuntimeError: No CUDA GPUs are available" in placed.stderr


VISIBLE_SCRIPT = """
import torch
print("available=" + str(torch.cuda.is_available()))
print("count=" + str(torch.cuda.device_count()))
"""


def test_cuda_visible_devices_is_read_as_cuda_reads_it(program):
    # the CPU target is a machine with one device: indices past it end the list, as CUDA ends it
    for setting, available, count in (("0", "True", "1"), ("0,1", "True", "1"), ("1", "False", "0"),
                                      ("-1", "False", "0"), ("0,0", "False", "0"), ("0gpu", "True", "1")):
        result = program(VISIBLE_SCRIPT, "--device", "cpu", env={"CUDA_VISIBLE_DEVICES": setting})
        assert result.returncode == 0, result.stderr
        assert (result.values()["available"], result.values()["count"]) == (available, count), setting
    for device in ("cpu", "neuron-emulated"):
        unset = program(VISIBLE_SCRIPT, "--device", device)
        assert unset.returncode == 0, unset.stderr
        assert unset.values() == {"available": "True", "count": "1"}


def test_capturable_optimizer_steps_are_adapted_where_the_profile_has_none(program, tmp_path):
    source = """
    import torch
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1).cuda()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1, capturable=True)
    for _ in range(3):
        optimizer.zero_grad()
        model(torch.ones(2, 4).cuda()).sum().backward()
        optimizer.step()
    print("weight=" + repr(model.weight.sum().item()))
    """
    report = tmp_path / "report.json"
    result = program(source, "--device", "cpu", "--report", str(report))
    assert result.returncode == 0, result.stderr[-2000:]
    # the hand port on the CPU: the same steps without capturable (which the CPU refuses at step())
    twin = program(source.replace(".cuda()", "").replace(", capturable=True", ""), form="plain")
    assert twin.returncode == 0, twin.stderr
    assert result.values() == twin.values()
    decisions = {d["topic"]: d for d in json.loads(report.read_text())["decisions"]}
    assert decisions["capturable optimizers"]["kind"] == "adapted"


def test_deprecated_cuda_amp_forms_warn_at_the_applications_line_as_torch_does(program):
    # torch warns for each of these on a GPU machine, at the line that uses it
    source = """
    import warnings
    warnings.simplefilter("always")
    import torch
    from torch.cuda.amp import custom_fwd, custom_bwd
    class Double(torch.autograd.Function):
        @staticmethod
        @custom_fwd(cast_inputs=torch.float32)
        def forward(ctx, a):
            return a * 2
        @staticmethod
        @custom_bwd
        def backward(ctx, grad):
            return grad * 2
    @torch.cuda.amp.autocast()
    def forward(x):
        return x
    with torch.cuda.amp.autocast(dtype=torch.float16):
        pass
    scaler = torch.cuda.amp.GradScaler()
    with torch.autocast("cuda"):  # the device-neutral forms do not warn
        pass
    neutral = torch.amp.GradScaler("cuda")
    torch.get_autocast_gpu_dtype()
    """
    def warned(stderr):  # (line, category, message) of each deprecation raised at the application's line
        found = [tuple(part.strip() for part in line.split("app.py:")[1].split(":", 2))
                 for line in stderr.splitlines() if "app.py:" in line]
        return [(line, category, message.split(" (Triggered internally")[0]) for line, category, message in found
                if category in ("FutureWarning", "DeprecationWarning")]

    result = program(source, "--device", "cpu", "--precision", "keep")
    assert result.returncode == 0, result.stderr[-2000:]
    plain = program(source, form="plain")  # torch itself, which warns the same on this CUDA-less build
    assert plain.returncode == 0, plain.stderr[-2000:]
    assert warned(result.stderr) == warned(plain.stderr)
    assert [category for _, category, _ in warned(result.stderr)] == ["FutureWarning"] * 5 + ["DeprecationWarning"]


def test_an_ordinal_past_the_targets_devices_shares_one_and_the_report_says_so(program, tmp_path):
    # written for two GPUs (model parallel over cuda:0 and cuda:1); the target has one device
    source = """
    import torch
    first = torch.nn.Linear(4, 4).to("cuda:0")
    second = torch.nn.Linear(4, 2).to("cuda:1")
    print("out=" + str(tuple(second(first(torch.ones(1, 4, device="cuda:0")).to("cuda:1")).shape)))
    """
    report = tmp_path / "report.json"
    result = program(source, "--device", "cpu", "--report", str(report))
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.values() == {"out": "(1, 2)"}
    decisions = {d["topic"]: d for d in json.loads(report.read_text())["decisions"]}
    assert decisions["cuda:1"]["kind"] == "device"
    assert "shares cuda:0" in decisions["cuda:1"]["decision"]
    assert "cuda:0" not in decisions


def test_a_device_block_selects_the_device_for_its_own_thread_as_cuda_does(program, tmp_path):
    # CUDA's current device belongs to each thread: blocks in two threads that end out of order leave
    # each thread, and the main one, on the device it had
    source = """
    import threading, torch
    barrier = threading.Barrier(2)
    seen = {}
    def work(ordinal, first):
        with torch.cuda.device(ordinal) as entered:
            barrier.wait()
            seen[ordinal] = torch.cuda.current_device()
            if not first:
                barrier.wait()
        if first:
            barrier.wait()
    threads = [threading.Thread(target=work, args=(1, True)), threading.Thread(target=work, args=(0, False))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print("inside=" + str(sorted(seen.items())).replace(" ", ""))
    print("after=" + str(torch.cuda.current_device()) + str(torch.zeros(1, device="cuda").get_device()))
    """
    report = tmp_path / "report.json"
    result = program(source, "--device", "cpu", "--report", str(report))
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.values() == {"inside": "[(0,0),(1,1)]", "after": "00"}
    redirected = {entry["api"] for entry in json.loads(report.read_text())["redirected"]}
    assert "torch.cuda.device" in redirected


def test_free_memory_on_the_cpu_target_is_what_the_host_can_still_give(program):
    source = """
    import torch
    free, total = torch.cuda.mem_get_info()
    held = torch.ones(768 * 2**20, dtype=torch.uint8, device="cuda")  # written: the pages are taken
    after, _ = torch.cuda.mem_get_info()
    print("below_total=" + str(free < total))
    print("dropped_mib_at_least_512=" + str((free - after) / 2**20 >= 512))
    """
    result = program(source, "--device", "cpu")
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.values() == {"below_total": "True", "dropped_mib_at_least_512": "True"}


def test_each_attention_restriction_the_target_lacks_is_reported_with_what_ran(program, tmp_path):
    source = """
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    q = torch.ones(1, 1, 4, 8, device="cuda")
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
        F.scaled_dot_product_attention(q, q, q)
    with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
        F.scaled_dot_product_attention(q, q, q)
    print("done=1")
    """
    report = tmp_path / "report.json"
    result = program(source, "--device", "cpu", "--report", str(report))
    assert result.returncode == 0, result.stderr[-2000:]
    adapted = sorted(d["decision"] for d in json.loads(report.read_text())["decisions"] if d["kind"] == "adapted")
    assert len(adapted) == 2, adapted
    assert adapted[0].endswith("allows FLASH_ATTENTION, MATH (its profile's kernels; MATH is exact)")
    assert adapted[1].endswith("allows MATH (its profile's kernels; MATH is exact)")


def test_device_properties_show_as_cudas_and_say_why_hardware_fields_are_absent(program):
    source = """
    import torch
    properties = torch.cuda.get_device_properties(0)
    print("repr=" + repr(properties).split("(")[0] + "," + str("total_memory=" in repr(properties)))
    try:
        properties.warp_size
    except AttributeError as error:
        print("warp_size=" + str("NVIDIA's hardware" in str(error)))
    """
    result = program(source, "--device", "neuron-emulated")
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.values() == {"repr": "_CudaDeviceProperties,True", "warp_size": "True"}


MMAP_LOAD = """
import os, tempfile, torch
path = os.path.join(tempfile.mkdtemp(), "last.pt")
torch.save({"w": torch.full((256,), 1.0, device="cuda")}, path)
# gpt-fast / litgpt loading: the weights are mapped from the file, then sent to the GPU
loaded = {
    "string": torch.load(path, mmap=True, weights_only=True, map_location="cuda")["w"],
    "ordinal": torch.load(path, mmap=True, weights_only=True, map_location=0)["w"],
    "storage_cuda": torch.load(path, mmap=True, weights_only=True,
                               map_location=lambda storage, loc: storage.cuda(0))["w"],
}
host = torch.load(path, mmap=True, weights_only=True, map_location="cpu")["w"]
# the next checkpoint overwrites the file (a shorter one: a bus error if the pages were still mapped)
torch.save({"w": torch.full((64,), 2.0, device="cuda")}, path)
for name, tensor in loaded.items():
    print(name + "=" + str(tensor.sum().item()) + "," + str(tensor.is_cuda))
print("host_stays_mapped=" + str(not host.untyped_storage().resizable()))
"""


def test_weights_mapped_from_a_file_and_sent_to_cuda_no_longer_read_the_file(program):
    # a GPU copies them into its memory, so the program may overwrite the checkpoint it resumed from
    result = program(MMAP_LOAD, "--device", "cpu")
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.values() == {"string": "256.0,True", "ordinal": "256.0,True", "storage_cuda": "256.0,True",
                               "host_stays_mapped": "True"}


def test_every_placement_through_a_cuda_device_object_is_counted_where_it_is(program, tmp_path):
    # a CleanRL-style buffer: `device = torch.device("cuda")` once, then `device=device` in a loop
    source = """
    import torch
    device = torch.device("cuda")
    for _ in range(4):
        a = torch.zeros(2, device=device)
        b = torch.zeros(2).to(device)
    print("placed=" + str((a.is_cuda, b.is_cuda)))
    """
    for target in ("cpu", "neuron-emulated"):
        report = tmp_path / f"{target}.json"
        result = program(source, "--device", target, "--report", str(report))
        assert result.returncode == 0, result.stderr[-2000:]
        counts = {(entry["api"], int(entry["site"].rsplit(":", 1)[1])): entry["count"]
                  for entry in json.loads(report.read_text())["redirected"]}
        assert counts[("device=", 5)] == 4 and counts[(".to()", 6)] == 4, (target, counts)


def test_a_float32_cuda_autocast_is_off_where_the_target_has_no_float32_autocast_and_said_so(program, tmp_path):
    # nanoGPT's --dtype=float32: `torch.amp.autocast(device_type="cuda", dtype=torch.float32)`
    source = """
    import warnings, torch
    warnings.simplefilter("error", UserWarning)  # torch's "In CPU autocast ... Disabling" would raise
    model = torch.nn.Linear(4, 2).cuda()
    with torch.amp.autocast(device_type="cuda", dtype=torch.float32):
        y = model(torch.ones(3, 4, device="cuda"))
    print("dtype=" + str(y.dtype))
    """
    for target in ("cpu", "cuda-emulated"):
        report = tmp_path / f"{target}.json"
        result = program(source, "--device", target, "--report", str(report))
        assert result.returncode == 0, result.stderr[-2000:]
        assert result.values() == {"dtype": "torch.float32"}
        decisions = {d["topic"]: d["decision"] for d in json.loads(report.read_text())["decisions"]}
        assert "whose autocast has no float32 mode" in decisions["cuda autocast float32"], decisions
