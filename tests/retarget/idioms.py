"""The idiom corpus: CUDA-style snippets written the way real projects write them, each with its
twin ported by hand to the CPU with the CUDA code path kept (what the application would see on a
GPU machine whose GPU is the CPU).

Each entry is (name, cuda_source, ported_source). A snippet sets `result`; the harness prints
`repr(result)`, or the exception type's name when it raises. A twin of None means "the same source"
(the snippet is already neutral, and must behave the same retargeted). Sources are function bodies:
imports inside them go through the same rewriting as module-level ones.
"""

IDIOMS = [
    # -- leaks named in the issue ---------------------------------------------------------------
    ("mock_patch_builtins_print",
     "from unittest import mock\nwith mock.patch('builtins.print') as fake:\n    print('x')\nresult = fake.called",
     None),
    ("assign_builtins_print",
     "import builtins\nseen = []\noriginal = builtins.print\nbuiltins.print = lambda *a, **k: seen.append(a)\n"
     "try:\n    print('silenced')\nfinally:\n    builtins.print = original\nresult = seen",
     None),
    ("isinstance_cuda_amp_grad_scaler",
     "import torch\nresult = isinstance(torch.cuda.amp.GradScaler(enabled=False), torch.cuda.amp.GradScaler)",
     "result = True"),
    ("subclass_cuda_amp_grad_scaler",
     "import torch\nclass MyScaler(torch.cuda.amp.GradScaler):\n    pass\n"
     "result = isinstance(MyScaler(enabled=False), torch.amp.GradScaler)",
     "result = True"),
    ("tensor_type_legacy_cuda",
     "import torch\nx = torch.zeros(2, dtype=torch.int64).type(torch.cuda.FloatTensor)\nresult = (x.dtype, x.type())",
     "import torch\nresult = (torch.float32, 'torch.cuda.FloatTensor')"),
    ("integer_device_stays_integer",
     "def train(device):\n    return f'cuda:{device}'\nresult = train(device=0)",
     None),
    ("non_torch_library_keeps_device_int",
     "import json\nresult = json.dumps({'x': 1}, default=None, sort_keys=True)\n"
     "def play(samples, device=None):\n    return device\nresult = (result, play([1], device=2))",
     None),
    ("import_module_agrees",
     "import importlib, torch\nresult = (importlib.import_module('torch.cuda').is_available(), torch.cuda.is_available())",
     "result = (True, True)"),
    ("getattr_torch_cuda_agrees",
     "import torch\nresult = getattr(torch, 'cuda').is_available()",
     "result = True"),
    ("get_device_module_agrees",
     "import torch\nresult = torch.get_device_module().is_available()",
     "result = True"),
    ("dunder_import_agrees",
     "result = __import__('torch').cuda.is_available()",
     "result = True"),
    # the optional-dependency idiom of test suites: the module pytest hands back is the one imported
    ("pytest_importorskip_agrees",
     "import pytest\ntorch = pytest.importorskip('torch')\ncuda = pytest.importorskip('torch.cuda')\n"
     "result = (torch.cuda.is_available(), torch.cuda.device_count() >= 1, cuda.is_available())",
     "result = (True, True, True)"),
    # PyTorch's device-generic API, as its current examples (and `torchport fix`) write device selection
    ("torch_accelerator_is_the_cuda_view",
     "import torch\ndevice = torch.accelerator.current_accelerator() if torch.accelerator.is_available() "
     "else torch.device('cpu')\nwith torch.accelerator.device_index(0):\n    x = torch.ones(2, device=device)\n"
     "torch.accelerator.synchronize()\n"
     "result = (device.type, torch.accelerator.device_count(), torch.accelerator.current_device_index(), x.is_cuda)",
     "result = ('cuda', 1, 0, True)"),
    # attribute reads not spelled `obj.attr`, and objects that answer is_cuda from their data
    ("getattr_is_cuda_and_device_type",
     "import torch\nx = torch.ones(2, device='cuda')\nd = torch.device('cuda')\n"
     "result = (getattr(x, 'is_cuda', False), getattr(d, 'type'), getattr(object(), 'is_cuda', 'absent'))",
     "result = (True, 'cuda', 'absent')"),
    ("packed_sequence_is_cuda",
     "import torch\nfrom torch.nn.utils.rnn import pack_padded_sequence\n"
     "packed = pack_padded_sequence(torch.ones(3, 2, 4, device='cuda'), [3, 2])\n"
     "h0 = torch.zeros(1, 2, 5)\nif packed.is_cuda:\n    h0 = h0.cuda()\n"
     "output, _ = torch.nn.GRU(4, 5).to('cuda')(packed, h0)\nresult = (packed.is_cuda, output.data.shape)",
     "import torch\nresult = (True, torch.Size([5, 5]))"),
    # a module class of the application that overrides cuda() (to move more than its parameters)
    ("module_cuda_override_runs",
     "import torch\nclass Model(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
     "        self.linear = torch.nn.Linear(2, 2)\n        self.table = torch.zeros(2)\n        self.moved = False\n"
     "    def cuda(self, device=None):\n        self.table = self.table.cuda(device)\n        self.moved = True\n"
     "        return super().cuda(device)\nmodel = Model().cuda()\n"
     "unbound = torch.nn.Module.cuda(torch.nn.Linear(2, 2), 0)\n"
     "result = (model.moved, model.table.is_cuda, next(model.parameters()).is_cuda, next(unbound.parameters()).is_cuda, "
     "torch.Tensor.cuda(torch.ones(1)).is_cuda)",
     "result = (True, True, True, True, True)"),
    ("aliased_import_module_agrees",
     "from importlib import import_module as load\nresult = (load('torch').cuda.is_available(), "
     "load('torch.cuda').device_count() >= 1)",
     "result = (True, True)"),
    # mock.patch with a string target patches the real module (what `import` finds): the application
    # sees the patch, as its tests do on a GPU machine
    ("mock_patch_string_target_cuda_is_available",
     "import torch\nfrom unittest import mock\ndef pick():\n    return 'cuda' if torch.cuda.is_available() else 'cpu'\n"
     "with mock.patch('torch.cuda.is_available', return_value=False):\n    inside = pick()\nresult = (inside, pick())",
     "result = ('cpu', 'cuda')"),
    ("mock_patch_decorator_cuda_device_count",
     "import torch\nfrom unittest import mock\n@mock.patch('torch.cuda.device_count', return_value=4)\n"
     "def count(_):\n    return torch.cuda.device_count()\nresult = (count(), torch.cuda.device_count())",
     "result = (4, 1)"),
    ("mock_patch_string_target_distributed_get_rank",
     "import torch.distributed as dist\nfrom unittest import mock\n"
     "with mock.patch('torch.distributed.get_rank', return_value=3):\n    result = dist.get_rank()",
     None),
    # -- strings, devices, ordinals --------------------------------------------------------------
    ("device_string_literal",
     "import torch\nresult = torch.ones(2, device='cuda').device.type",
     "import torch\nresult = torch.ones(2, device='cpu').device.type"),
    ("device_string_indexed",
     "import torch\nresult = torch.zeros(1, device='cuda:0').device.type",
     "import torch\nresult = torch.zeros(1, device='cpu').device.type"),
    ("device_string_stays_string",
     "device = 'cuda:0'\nresult = (device, device == 'cuda:0', 'cuda' in device)",
     None),
    ("fstring_rank",
     "import torch\nlocal_rank = 0\ndevice = f'cuda:{local_rank}'\nresult = (device, torch.ones(1, device=device).device.type)",
     "import torch\nresult = ('cuda:0', 'cpu')"),
    ("torch_device_cuda_eq",
     "import torch\nresult = torch.device('cuda') == torch.device('cuda')",
     None),
    ("torch_device_isinstance",
     "import torch\nresult = isinstance(torch.device('cuda', 0), torch.device)",
     None),
    ("torch_device_pickle",
     "import pickle, torch\nd = torch.device('cuda')\nresult = pickle.loads(pickle.dumps(d)) == d",
     None),
    ("cuda_available_branch",
     "import torch\ndevice = 'cuda' if torch.cuda.is_available() else 'cpu'\nresult = device",
     "result = 'cuda'"),
    ("to_rank_int",
     "import torch\nresult = torch.ones(2).to(0).device.type",
     "import torch\nresult = torch.ones(2).to('cpu').device.type"),
    ("dot_cuda",
     "import torch\nresult = torch.ones(2).cuda().device.type",
     "import torch\nresult = torch.ones(2).device.type"),
    ("module_cuda",
     "import torch\nresult = next(torch.nn.Linear(2, 2).cuda().parameters()).device.type",
     "import torch\nresult = next(torch.nn.Linear(2, 2).parameters()).device.type"),
    ("is_cuda",
     "import torch\nresult = torch.ones(1, device='cuda').is_cuda",
     "result = True"),
    ("to_keyword_device",
     "import torch\nresult = torch.ones(1).to(device='cuda', dtype=torch.float16).dtype",
     "import torch\nresult = torch.float16"),
    ("to_dtype_only",
     "import torch\nresult = torch.ones(1).to(torch.float64).dtype",
     None),
    ("new_zeros_device",
     "import torch\nresult = torch.ones(1).new_zeros(2, device='cuda').device.type",
     "import torch\nresult = torch.ones(1).new_zeros(2).device.type"),
    ("set_default_device",
     "import torch\ntorch.set_default_device('cuda')\ntry:\n    result = torch.ones(1).device.type\n"
     "finally:\n    torch.set_default_device(None)",
     "result = 'cpu'"),
    ("generator_device",
     "import torch\nresult = torch.Generator(device='cuda').device.type",
     "import torch\nresult = torch.Generator(device='cpu').device.type"),
    # -- torch.cuda API --------------------------------------------------------------------------
    ("device_count", "import torch\nresult = torch.cuda.device_count() >= 1", "result = True"),
    ("current_device", "import torch\nresult = torch.cuda.current_device()", "result = 0"),
    ("synchronize", "import torch\nresult = torch.cuda.synchronize()", "result = None"),
    ("manual_seed_all",
     "import torch\ntorch.cuda.manual_seed_all(0)\ntorch.manual_seed(0)\nresult = torch.rand(1).item() < 1",
     "result = True"),
    ("memory_allocated", "import torch\nresult = torch.cuda.memory_allocated() >= 0", "result = True"),
    ("max_memory_allocated", "import torch\nresult = torch.cuda.max_memory_allocated() >= 0", "result = True"),
    ("empty_cache", "import torch\nresult = torch.cuda.empty_cache()", "result = None"),
    ("is_bf16_supported", "import torch\nresult = isinstance(torch.cuda.is_bf16_supported(), bool)", "result = True"),
    ("event_timing",
     "import torch\nstart = torch.cuda.Event(enable_timing=True)\nend = torch.cuda.Event(enable_timing=True)\n"
     "start.record()\nend.record()\ntorch.cuda.synchronize()\nresult = start.elapsed_time(end) >= 0",
     "result = True"),
    ("event_isinstance",
     "import torch\nresult = isinstance(torch.cuda.Event(), torch.cuda.Event)",
     "result = True"),
    ("stream_context",
     "import torch\ns = torch.cuda.Stream()\nwith torch.cuda.stream(s):\n    x = torch.ones(1, device='cuda') + 1\n"
     "result = (isinstance(s, torch.cuda.Stream), x.item())",
     "result = (True, 2.0)"),
    ("legacy_float_tensor_ctor",
     "import torch\nx = torch.cuda.FloatTensor([1, 2])\nresult = (isinstance(x, torch.cuda.FloatTensor), x.tolist())",
     "result = (True, [1.0, 2.0])"),
    ("from_torch_cuda_import",
     "from torch.cuda import is_available, device_count\nresult = (is_available(), device_count() >= 1)",
     "result = (True, True)"),
    ("import_torch_cuda_as",
     "import torch.cuda as tc\nresult = tc.is_available()",
     "result = True"),
    ("cudnn_flags",
     "import torch\ntorch.backends.cudnn.benchmark = True\ntorch.backends.cudnn.deterministic = True\nresult = True",
     "result = True"),
    ("tf32_flag",
     "import torch\ntorch.backends.cuda.matmul.allow_tf32 = True\nresult = True",
     "result = True"),
    ("cuda_graph_unsupported",
     "import torch\nresult = torch.cuda.CUDAGraph()",
     None),  # raises on the target as on the twin's CPU-only build
    # -- amp ------------------------------------------------------------------------------------
    ("autocast_cuda_context",
     "import torch\nwith torch.autocast('cuda', dtype=torch.bfloat16):\n"
     "    result = (torch.ones(2, 2) @ torch.ones(2, 2)).dtype",
     "import torch\nwith torch.autocast('cpu', dtype=torch.bfloat16):\n"
     "    result = (torch.ones(2, 2) @ torch.ones(2, 2)).dtype"),
    ("cuda_amp_autocast_decorator",
     "import torch\n@torch.cuda.amp.autocast(dtype=torch.bfloat16)\ndef f(a):\n    return a @ a\n"
     "result = f(torch.ones(2, 2)).dtype",
     "import torch\n@torch.autocast('cpu', dtype=torch.bfloat16)\ndef f(a):\n    return a @ a\n"
     "result = f(torch.ones(2, 2)).dtype"),
    ("autocast_isinstance",
     "import torch\nresult = isinstance(torch.autocast('cuda'), torch.autocast)",
     "result = True"),
    ("from_cuda_amp_import",
     "from torch.cuda.amp import GradScaler, autocast\nimport torch\nwith autocast(dtype=torch.bfloat16):\n"
     "    dtype = (torch.ones(2, 2) @ torch.ones(2, 2)).dtype\nresult = (dtype, isinstance(GradScaler(enabled=False), GradScaler))",
     "import torch\nresult = (torch.bfloat16, True)"),
    ("grad_scaler_pickle_genuine",
     "import pickle, torch\ns = torch.amp.GradScaler('cuda', enabled=False)\n"
     "result = type(pickle.loads(pickle.dumps(s))).__module__",
     "result = 'torch.amp.grad_scaler'"),
    ("grad_scaler_step",
     "import torch\nmodel = torch.nn.Linear(2, 1).cuda()\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
     "scaler = torch.cuda.amp.GradScaler()\nloss = model(torch.ones(1, 2, device='cuda')).sum()\n"
     "scaler.scale(loss).backward()\nscaler.step(opt)\nscaler.update()\nresult = True",
     "result = True"),
    # -- loading, distributed, data -------------------------------------------------------------
    ("load_map_location_cuda",
     "import io, torch\nbuffer = io.BytesIO()\ntorch.save({'w': torch.ones(2)}, buffer)\nbuffer.seek(0)\n"
     "result = torch.load(buffer, map_location='cuda:0')['w'].device.type",
     "import io, torch\nbuffer = io.BytesIO()\ntorch.save({'w': torch.ones(2)}, buffer)\nbuffer.seek(0)\n"
     "result = torch.load(buffer, map_location='cpu')['w'].device.type"),
    ("load_map_location_lambda",
     "import io, torch\nbuffer = io.BytesIO()\ntorch.save(torch.ones(2), buffer)\nbuffer.seek(0)\n"
     "result = torch.load(buffer, map_location=lambda storage, loc: storage.cuda()).device.type",
     "import io, torch\nbuffer = io.BytesIO()\ntorch.save(torch.ones(2), buffer)\nbuffer.seek(0)\n"
     "result = torch.load(buffer, map_location='cpu').device.type"),
    ("dataloader_pin_memory",
     "import torch\nfrom torch.utils.data import DataLoader\n"
     "loader = DataLoader(list(range(4)), batch_size=2, pin_memory=True)\nresult = [b.tolist() for b in loader]",
     "import torch\nfrom torch.utils.data import DataLoader\n"
     "loader = DataLoader(list(range(4)), batch_size=2)\nresult = [b.tolist() for b in loader]"),
    ("fused_adamw",
     "import torch\nmodel = torch.nn.Linear(2, 1).cuda()\n"
     "opt = torch.optim.AdamW(model.parameters(), fused=True)\nmodel(torch.ones(1, 2, device='cuda')).sum().backward()\n"
     "opt.step()\nresult = True",
     "result = True"),
    ("dist_backend_nccl_name",
     "import torch.distributed as dist\nresult = dist.is_available()",
     None),
    ("cuda_only_import_fallback",
     "try:\n    import flash_attn\n    result = 'flash'\nexcept ImportError:\n    result = 'fallback'",
     "result = 'fallback'"),
    ("sdpa_on_device",
     "import torch\nimport torch.nn.functional as F\nq = torch.ones(1, 1, 2, 2, device='cuda')\n"
     "result = tuple(F.scaled_dot_product_attention(q, q, q).shape)",
     "import torch\nimport torch.nn.functional as F\nq = torch.ones(1, 1, 2, 2)\n"
     "result = tuple(F.scaled_dot_product_attention(q, q, q).shape)"),
    # -- ordinary Python keeps working -----------------------------------------------------------
    ("inspect_getsource",
     "import inspect\ndef helper():\n    return 1\nresult = 'return 1' in inspect.getsource(helper)",
     None),
    ("threads",
     "import threading, torch\nout = []\nt = threading.Thread(target=lambda: out.append(torch.ones(1, device='cuda').device.type))\n"
     "t.start()\nt.join()\nresult = out",
     "import threading, torch\nout = []\nt = threading.Thread(target=lambda: out.append(torch.ones(1).device.type))\n"
     "t.start()\nt.join()\nresult = out"),
    ("builtins_identity",
     "import builtins\nresult = print is builtins.print and len is builtins.len",
     None),
    ("jit_script_application_function",
     "import torch\ndef double(x: torch.Tensor) -> torch.Tensor:\n    return x * 2\n"
     "result = torch.jit.script(double)(torch.ones(2)).tolist()",
     None),
    # -- more of the torch.cuda API, as projects call it ------------------------------------------
    ("get_device_name", "import torch\nresult = isinstance(torch.cuda.get_device_name(0), str)", "result = True"),
    ("device_properties_memory",
     "import torch\nresult = torch.cuda.get_device_properties(0).total_memory > 0", "result = True"),
    ("device_properties_by_string",
     "import torch\nresult = torch.cuda.get_device_properties('cuda').total_memory > 0", "result = True"),
    ("device_capability", "import torch\nresult = len(torch.cuda.get_device_capability())", "result = 2"),
    # kernels gated on the build's architectures (bitsandbytes/xformers-style checks) decide as the
    # capability does
    ("arch_list_matches_capability",
     "import torch\nmajor, minor = torch.cuda.get_device_capability()\n"
     "result = (f'sm_{major}{minor}' in torch.cuda.get_arch_list(), 'code=sm_' in torch.cuda.get_gencode_flags())",
     "result = (True, True)"),
    ("mem_get_info", "import torch\nresult = len(torch.cuda.mem_get_info())", "result = 2"),
    ("set_device", "import torch\nresult = torch.cuda.set_device(0)", "result = None"),
    ("device_context",
     "import torch\nwith torch.cuda.device(0):\n    result = torch.ones(1, device='cuda').device.type",
     "import torch\nresult = torch.ones(1).device.type"),
    ("nvtx_ranges",
     "import torch\ntorch.cuda.nvtx.range_push('step')\ntorch.cuda.nvtx.range_pop()\nresult = True", "result = True"),
    ("reset_peak_memory_stats", "import torch\nresult = torch.cuda.reset_peak_memory_stats()", "result = None"),
    ("memory_reserved", "import torch\nresult = torch.cuda.memory_reserved() >= 0", "result = True"),
    # training loggers read CUDA's allocator keys by name (fairseq/DeepSpeed-style retries, peaks)
    # the memory-debugging workflow (pytorch.org/memory_viz): record, dump a snapshot, stop
    ("memory_history_snapshot",
     "import os, pickle, tempfile, torch\ntorch.cuda.memory._record_memory_history(max_entries=1000)\n"
     "x = torch.ones(8, device='cuda') * 2\npath = os.path.join(tempfile.mkdtemp(), 'snapshot.pickle')\n"
     "torch.cuda.memory._dump_snapshot(path)\ntorch.cuda.memory._record_memory_history(enabled=None)\n"
     "with open(path, 'rb') as handle:\n    snapshot = pickle.load(handle)\n"
     "result = (sorted(snapshot), isinstance(snapshot['segments'], list), isinstance(torch.cuda.memory_snapshot(), list))",
     "result = (['device_traces', 'segments'], True, True)"),
    ("memory_stats_cuda_keys",
     "import torch\nx = torch.ones(256, device='cuda')\nstats = torch.cuda.memory_stats()\n"
     "result = (stats['num_alloc_retries'], stats['num_ooms'], stats['allocated_bytes.all.peak'] >= 0,\n"
     "          stats['active_bytes.all.allocated'] >= 0, 'segment.large_pool.current' in stats)",
     "result = (0, 0, True, True, True)"),
    # `torch.get_default_device().type == "cuda"` branches after a CUDA default device, as on a GPU
    ("default_device_reads_cuda",
     "import torch\ntorch.set_default_device('cuda')\nd = torch.get_default_device()\n"
     "result = (d.type, d.index, torch.ones(1).is_cuda)\ntorch.set_default_device(None)",
     "result = ('cuda', 0, True)"),
    ("memory_stats_nested",
     "import torch\nnested = torch.cuda.memory_stats_as_nested_dict()\n"
     "result = (nested['allocated_bytes']['all']['peak'] >= 0, nested['num_ooms'])",
     "result = (True, 0)"),
    ("is_initialized", "import torch\nresult = isinstance(torch.cuda.is_initialized(), bool)", "result = True"),
    ("synchronize_positional_device", "import torch\nresult = torch.cuda.synchronize('cuda:0')", "result = None"),
    ("synchronize_keyword_device", "import torch\nresult = torch.cuda.synchronize(device='cuda:0')",
     "result = None"),
    ("multi_gpu_branch",
     "import torch\nresult = torch.cuda.is_available() and torch.cuda.device_count() > 1", "result = False"),
    ("current_stream_synchronize", "import torch\nresult = torch.cuda.current_stream().synchronize()",
     "result = None"),
    ("stream_wait_stream",
     "import torch\nresult = torch.cuda.Stream().wait_stream(torch.cuda.current_stream())", "result = None"),
    ("event_query", "import torch\ne = torch.cuda.Event()\ne.record()\nresult = e.query()", "result = True"),
    # an Nsight capture window around the steps (nsys --capture-range=cudaProfilerApi)
    ("cuda_profiler_window_cudart",
     "import torch\ntorch.cuda.cudart().cudaProfilerStart()\nx = torch.ones(2).cuda() * 2\n"
     "torch.cuda.cudart().cudaProfilerStop()\nresult = x.tolist()",
     "import torch\nresult = (torch.ones(2) * 2).tolist()"),
    # attention restricted to the GPU's memory-efficient kernel (diffusion and LLM code)
    ("sdpa_kernel_efficient_attention",
     "import torch\nimport torch.nn.functional as F\nfrom torch.nn.attention import SDPBackend, sdpa_kernel\n"
     "torch.manual_seed(0)\nq, k, v = (torch.randn(1, 2, 8, 16, device='cuda') for _ in range(3))\n"
     "with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):\n    out = F.scaled_dot_product_attention(q, k, v)\n"
     "reference = ((q @ k.transpose(-2, -1)) / 4).softmax(-1) @ v\n"
     "result = torch.allclose(out, reference, atol=1e-5)",
     "import torch\nimport torch.nn.functional as F\nfrom torch.nn.attention import SDPBackend, sdpa_kernel\n"
     "torch.manual_seed(0)\nq, k, v = (torch.randn(1, 2, 8, 16) for _ in range(3))\n"
     "with sdpa_kernel(SDPBackend.MATH):\n    out = F.scaled_dot_product_attention(q, k, v)\n"
     "reference = ((q @ k.transpose(-2, -1)) / 4).softmax(-1) @ v\n"
     "result = torch.allclose(out, reference, atol=1e-5)"),
    ("sdp_kernel_no_math_no_flash",
     "import torch, warnings\nimport torch.nn.functional as F\nq = torch.ones(1, 1, 4, 8, device='cuda')\n"
     "with warnings.catch_warnings():\n    warnings.simplefilter('ignore', FutureWarning)\n"
     "    with torch.backends.cuda.sdp_kernel(enable_flash=False, enable_math=False, enable_mem_efficient=True):\n"
     "        out = F.scaled_dot_product_attention(q, q, q)\nresult = out.sum().item()",
     "import torch\nimport torch.nn.functional as F\nq = torch.ones(1, 1, 4, 8)\n"
     "result = F.scaled_dot_product_attention(q, q, q).sum().item()"),
    # Megatron-LM's CUDA RNG tracker restores a state through _lazy_call and default_generators
    ("megatron_lazy_call_rng_state",
     "import torch\nfrom torch.cuda import _lazy_call\ndef set_state(new_state):\n"
     "    def cb():\n        torch.cuda.default_generators[torch.cuda.current_device()].set_state(new_state)\n"
     "    _lazy_call(cb)\ntorch.cuda.manual_seed(3)\nstate = torch.cuda.get_rng_state()\n"
     "a = torch.rand(4, device='cuda')\nset_state(state)\nb = torch.rand(4, device='cuda')\n"
     "result = (torch.equal(a, b), len(torch.cuda.default_generators))",
     "import torch\ntorch.manual_seed(3)\nstate = torch.get_rng_state()\na = torch.rand(4)\n"
     "torch.default_generator.set_state(state)\nb = torch.rand(4)\nresult = (torch.equal(a, b), 1)"),
    ("cudnn_deterministic_reads_back",
     "import torch\ntorch.backends.cudnn.deterministic = True\ntorch.backends.cudnn.benchmark = False\n"
     "result = (torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark)\n"
     "torch.backends.cudnn.deterministic = False\ntorch.use_deterministic_algorithms(False)",
     "result = (True, False)"),
    # resuming on another rank's device: a dict map_location that does not list every saved device
    ("load_map_location_dict_partial",
     "import io, torch\nbuffer = io.BytesIO()\ntorch.save({'w': torch.ones(2, device='cuda')}, buffer)\n"
     "buffer.seek(0)\nw = torch.load(buffer, map_location={'cuda:1': 'cuda:0'})['w']\n"
     "result = (w.is_cuda, w.sum().item())",
     "result = (True, 2.0)"),
    # pygcn: a sparse adjacency matrix moved to the GPU
    ("sparse_tensor_type_string",
     "import torch\nadj = torch.sparse_coo_tensor([[0, 1], [1, 0]], [1.0, 2.0], (2, 2)).cuda()\n"
     "result = (adj.type(), torch.sparse.mm(adj, torch.ones(2, 1, device='cuda')).sum().item())",
     "import torch\nadj = torch.sparse_coo_tensor([[0, 1], [1, 0]], [1.0, 2.0], (2, 2))\n"
     "result = ('torch.cuda.sparse.FloatTensor', torch.sparse.mm(adj, torch.ones(2, 1)).sum().item())"),
    # the PyTorch profiler recipe: CPU and CUDA activities, sorted by CUDA time
    ("torch_profiler_cuda_activity",
     "import torch, warnings\nfrom torch.profiler import profile, ProfilerActivity\n"
     "with warnings.catch_warnings(record=True) as caught:\n    warnings.simplefilter('always')\n"
     "    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:\n"
     "        torch.ones(8, device='cuda').sum()\n"
     "result = ([str(w.message) for w in caught if 'not available' in str(w.message)],\n"
     "          'aten::sum' in prof.key_averages().table(sort_by='cuda_time_total'))",
     "import torch, warnings\nfrom torch.profiler import profile, ProfilerActivity\n"
     "with warnings.catch_warnings(record=True) as caught:\n    warnings.simplefilter('always')\n"
     "    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:\n"
     "        torch.ones(8).sum()\n"
     "result = ([str(w.message) for w in caught if 'not available' in str(w.message)],\n"
     "          'aten::sum' in prof.key_averages().table(sort_by='cuda_time_total'))"),
    ("autograd_profiler_use_cuda",
     "import torch, warnings\nwith warnings.catch_warnings(record=True) as caught:\n    warnings.simplefilter('always')\n"
     "    with torch.autograd.profiler.profile(use_cuda=True) as prof:\n        torch.ones(8, device='cuda').sum()\n"
     "result = ([str(w.message) for w in caught if 'not available' in str(w.message)], len(prof.key_averages()) > 0)",
     "import torch, warnings\nwith warnings.catch_warnings(record=True) as caught:\n    warnings.simplefilter('always')\n"
     "    with torch.autograd.profiler.profile() as prof:\n        torch.ones(8).sum()\n"
     "result = ([str(w.message) for w in caught if 'not available' in str(w.message)], len(prof.key_averages()) > 0)"),
    ("cuda_profiler_module",
     "import torch\nimport torch.cuda.profiler as profiler\nwith profiler.profile():\n    y = torch.ones(1).cuda()\n"
     "profiler.start(); profiler.stop()\nresult = y.sum().item()",
     "import torch\nresult = torch.ones(1).sum().item()"),
    # apex's data prefetcher prints and compares stream handles
    ("stream_handle_and_repr",
     "import torch\ns = torch.cuda.Stream()\n"
     "result = (isinstance(s.cuda_stream, int), repr(s).startswith('<torch.cuda.Stream'), "
     "torch.cuda.current_stream().cuda_stream)",
     "result = (True, True, 0)"),
    ("memory_fraction_ipc_collect_capturing",
     "import torch\ntorch.cuda.set_per_process_memory_fraction(0.5, 0)\ntorch.cuda.empty_cache()\n"
     "torch.cuda.ipc_collect()\nresult = torch.cuda.is_current_stream_capturing()",
     "result = False"),
    # the ordinal of the tensor's GPU, reused as a device
    ("tensor_get_device_as_device",
     "import torch\nx = torch.ones(2).cuda()\nindex = x.get_device()\n"
     "y = torch.zeros(2, device=index)\nresult = (index, y.device.type)",
     "import torch\nresult = (0, 'cpu')"),
    ("dataparallel_device_attributes",
     "import torch\nm = torch.nn.DataParallel(torch.nn.Linear(2, 2)).cuda()\ny = m(torch.ones(3, 2))\n"
     "result = (m.device_ids, m.output_device, y.device.type, isinstance(m, torch.nn.DataParallel))",
     "result = ([0], 0, 'cpu', True)"),
    # -- more placement forms ---------------------------------------------------------------------
    ("tensor_literal_device", "import torch\nresult = torch.tensor([1, 2], device='cuda').tolist()",
     "import torch\nresult = torch.tensor([1, 2]).tolist()"),
    ("randn_torch_device",
     "import torch\nresult = torch.randn(2, 2, device=torch.device('cuda')).device.type",
     "import torch\nresult = torch.randn(2, 2).device.type"),
    ("arange_indexed", "import torch\nresult = torch.arange(3, device='cuda:0').sum().item()",
     "import torch\nresult = torch.arange(3).sum().item()"),
    ("integer_device_keyword", "import torch\nresult = torch.zeros(2, device=0).device.type",
     "import torch\nresult = torch.zeros(2).device.type"),
    ("to_non_blocking", "import torch\nresult = torch.ones(1).to('cuda', non_blocking=True).device.type",
     "import torch\nresult = torch.ones(1).device.type"),
    ("module_to_torch_device",
     "import torch\nm = torch.nn.Linear(2, 2).to(torch.device('cuda'))\nresult = m.weight.device.type",
     "import torch\nresult = torch.nn.Linear(2, 2).weight.device.type"),
    ("linear_device_keyword", "import torch\nresult = torch.nn.Linear(2, 2, device='cuda').weight.device.type",
     "import torch\nresult = torch.nn.Linear(2, 2).weight.device.type"),
    ("full_device", "import torch\nresult = torch.full((2,), 3.0, device='cuda').tolist()",
     "import torch\nresult = torch.full((2,), 3.0).tolist()"),
    ("as_tensor_device", "import torch\nresult = torch.as_tensor([1.0], device='cuda').device.type",
     "import torch\nresult = torch.as_tensor([1.0]).device.type"),
    ("cpu_numpy_round_trip", "import torch\nresult = torch.ones(2).cuda().cpu().numpy().tolist()",
     "import torch\nresult = torch.ones(2).numpy().tolist()"),
    ("pinned_tensor", "import torch\nresult = torch.ones(2).pin_memory().is_pinned()",
     "import torch\nresult = torch.ones(2).is_pinned()"),
    ("data_parallel_device_ids",
     "import torch\nm = torch.nn.DataParallel(torch.nn.Linear(2, 2).cuda(), device_ids=[0])\n"
     "result = tuple(m(torch.ones(3, 2, device='cuda')).shape)",
     "import torch\nm = torch.nn.DataParallel(torch.nn.Linear(2, 2))\nresult = tuple(m(torch.ones(3, 2)).shape)"),
    # dcgan's forward (pytorch/examples and its widely copied 2017 form): the functional DataParallel
    ("functional_data_parallel",
     "import torch\nnet = torch.nn.Linear(2, 2).cuda()\nx = torch.ones(3, 2).cuda()\n"
     "gpu_ids = range(1) if isinstance(x.data, torch.cuda.FloatTensor) else None\n"
     "y = torch.nn.parallel.data_parallel(net, x, gpu_ids)\nz = torch.nn.parallel.data_parallel(net, x, None)\n"
     "result = (tuple(y.shape), y.is_cuda, torch.equal(y, z), torch.equal(y, net(x)))",
     "result = ((3, 2), True, True, True)"),
    ("set_default_tensor_type_cuda",
     "import torch\ntorch.set_default_tensor_type('torch.cuda.FloatTensor')\ntry:\n"
     "    result = torch.ones(1).device.type\nfinally:\n    torch.set_default_tensor_type('torch.FloatTensor')\n"
     "    torch.set_default_device(None)",
     "result = 'cpu'"),
    # -- types, compile and pickling --------------------------------------------------------------
    ("autocast_subclass_of_genuine",
     "import torch\nresult = (isinstance(torch.cuda.amp.autocast(), torch.autocast),"
     " issubclass(torch.cuda.amp.GradScaler, torch.amp.GradScaler))",
     "result = (True, True)"),
    ("compile_application_function_with_device",
     "import torch\n@torch.compile(backend='eager')\ndef f(x):\n    return x + torch.ones(2, device='cuda')\n"
     "result = f(torch.ones(2, device='cuda')).tolist()",
     "import torch\nresult = [2.0, 2.0]"),
    ("pickle_application_config",
     "import pickle, types\nconfig = types.SimpleNamespace(device='cuda', rank=0)\n"
     "result = vars(pickle.loads(pickle.dumps(config)))",
     None),
    ("factory_kwargs_unpacked",
     "import torch\nfactory_kwargs = {'device': 'cuda', 'dtype': torch.float32}\n"
     "result = (factory_kwargs['device'], torch.empty(2, **factory_kwargs).device.type)",
     "import torch\nresult = ('cuda', 'cpu')"),
    ("partial_of_a_torch_factory",
     "import functools, torch\nzeros = functools.partial(torch.zeros, device='cuda')\nresult = zeros(2).device.type",
     "import torch\nresult = torch.zeros(2).device.type"),
    # -- framework settings stay as written inside the application ------------------------------
    ("framework_keywords_to_application_function",
     "def make_trainer(accelerator='auto', devices=1, strategy='auto'):\n    return (accelerator, devices, strategy)\n"
     "options = {'accelerator': 'gpu', 'devices': [0, 1]}\nresult = make_trainer(**options)",
     None),
    ("application_training_arguments_dataclass",
     "from dataclasses import dataclass\n@dataclass\nclass TrainingArguments:\n    fp16: bool = False\n"
     "    bf16: bool = False\n    use_cpu: bool = False\nconfig = {'fp16': True}\nresult = TrainingArguments(**config)",
     None),
    # -- found by trying public idioms as a new user would -------------------------------------
    ("load_checkpoint_saved_on_gpu_without_map_location",
     "import io, torch, torch.serialization as serialization\ntag = serialization.location_tag\n"
     "serialization.location_tag = lambda storage: 'cuda:0'  # what torch.save writes on a GPU machine\n"
     "buffer = io.BytesIO()\ntry:\n    torch.save({'w': torch.ones(2)}, buffer)\nfinally:\n"
     "    serialization.location_tag = tag\nbuffer.seek(0)\nresult = torch.load(buffer)['w'].device.type",
     "result = 'cpu'"),
    ("load_with_positional_map_location",
     "import io, torch\nbuffer = io.BytesIO()\ntorch.save(torch.ones(2, device='cuda'), buffer)\nbuffer.seek(0)\n"
     "result = torch.load(buffer, 'cuda').device.type",
     "import io, torch\nbuffer = io.BytesIO()\ntorch.save(torch.ones(2), buffer)\nbuffer.seek(0)\n"
     "result = torch.load(buffer, 'cpu').device.type"),
    ("autocast_state_queries",
     "import torch\nwith torch.autocast('cuda', dtype=torch.bfloat16):\n"
     "    result = (torch.is_autocast_enabled(), torch.is_autocast_enabled('cuda'), torch.get_autocast_dtype('cuda'))",
     "import torch\nwith torch.autocast('cpu', dtype=torch.bfloat16):\n"
     "    result = (torch.is_autocast_enabled('cpu'), torch.is_autocast_enabled('cpu'), torch.get_autocast_dtype('cpu'))"),
    ("autocast_from_its_submodule",
     "import torch\nfrom torch.cuda.amp.autocast_mode import autocast\nwith autocast(dtype=torch.bfloat16):\n"
     "    result = (torch.ones(2, 2, device='cuda') @ torch.ones(2, 2, device='cuda')).dtype",
     "import torch\nwith torch.autocast('cpu', dtype=torch.bfloat16):\n"
     "    result = (torch.ones(2, 2) @ torch.ones(2, 2)).dtype"),
    ("cuda_random_submodule_states",
     "import torch\nstates = torch.cuda.random.get_rng_state_all()\ntorch.cuda.random.set_rng_state_all(states)\n"
     "result = len(states)",
     "result = 1"),
    ("cuda_manual_seed_makes_device_draws_reproducible",
     "import torch\ntorch.cuda.manual_seed(42)\na = torch.randn(4, device='cuda')\ntorch.cuda.manual_seed(42)\n"
     "b = torch.randn(4, device='cuda')\nresult = torch.equal(a, b)",
     "import torch\ntorch.manual_seed(42)\na = torch.randn(4)\ntorch.manual_seed(42)\nb = torch.randn(4)\n"
     "result = torch.equal(a, b)"),
    ("legacy_tensor_type_without_arguments",
     "import torch\nacc = torch.cuda.FloatTensor()\nresult = (tuple(acc.shape), acc.dtype)",
     "import torch\nresult = ((0,), torch.float32)"),
    ("fork_rng_of_the_cuda_device",
     "import torch\ntorch.manual_seed(3)\nwith torch.random.fork_rng(devices=[torch.cuda.current_device()]):\n"
     "    a = torch.randn(3, device='cuda')\nb = torch.randn(3, device='cuda')\nresult = torch.equal(a, b)",
     "import torch\ntorch.manual_seed(3)\nwith torch.random.fork_rng(devices=[]):\n    a = torch.randn(3)\n"
     "b = torch.randn(3)\nresult = torch.equal(a, b)"),
    ("patching_a_torch_module_reaches_torch",
     "import sys, torch.serialization as serialization\noriginal = serialization.location_tag\n"
     "def tag(storage):\n    return original(storage)\nserialization.location_tag = tag\ntry:\n"
     "    result = sys.modules['torch.serialization'].location_tag is tag\nfinally:\n"
     "    serialization.location_tag = original",
     None),
    ("stream_entered_is_the_current_stream",
     "import torch\ns = torch.cuda.Stream()\nwith torch.cuda.stream(s):\n    inside = torch.cuda.current_stream() == s\n"
     "torch.cuda.set_stream(s)\nchosen = torch.cuda.current_stream() == s\n"
     "torch.cuda.set_stream(torch.cuda.default_stream())\nlow, high = torch.cuda.Stream.priority_range()\n"
     "result = (inside, chosen, s.device.type, s.priority, isinstance(low, int) and isinstance(high, int))",
     "result = (True, True, 'cuda', 0, True)"),
    ("safetensors_load_file_onto_the_gpu",
     "import os, tempfile, torch\nfrom safetensors.torch import load_file, save_file\n"
     "path = os.path.join(tempfile.mkdtemp(), 'w.safetensors')\nsave_file({'w': torch.arange(6.0)}, path)\n"
     "by_name = load_file(path, device='cuda')['w']\nby_ordinal = load_file(path, device=0)['w']\n"
     "from safetensors import safe_open\nwith safe_open(path, framework='pt', device='cuda') as handle:\n"
     "    opened = handle.get_tensor('w')\n"
     "result = (by_name.device.type, by_ordinal.device.type, opened.device.type,\n"
     "          by_name.tolist() == by_ordinal.tolist() == opened.tolist() == list(range(6)))",
     "import os, tempfile, torch\nfrom safetensors.torch import load_file, save_file\n"
     "path = os.path.join(tempfile.mkdtemp(), 'w.safetensors')\nsave_file({'w': torch.arange(6.0)}, path)\n"
     "by_name = load_file(path, device='cpu')['w']\nby_ordinal = load_file(path, device='cpu')['w']\n"
     "from safetensors import safe_open\nwith safe_open(path, framework='pt', device='cpu') as handle:\n"
     "    opened = handle.get_tensor('w')\n"
     "result = (by_name.device.type, by_ordinal.device.type, opened.device.type,\n"
     "          by_name.tolist() == by_ordinal.tolist() == opened.tolist() == list(range(6)))"),
    ("sync_debug_mode_set_and_read_back",
     "import torch\ntorch.cuda.set_sync_debug_mode('warn')\nduring = torch.cuda.get_sync_debug_mode()\n"
     "torch.cuda.set_sync_debug_mode(0)\nresult = (during, torch.cuda.get_sync_debug_mode())",
     "result = (1, 0)"),
    ("make_graphed_callables_warms_up_and_computes_eagerly",
     "import torch\ntorch.manual_seed(0)\nmodel = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4)).cuda()\n"
     "sample = torch.randn(8, 4, device='cuda', requires_grad=True)\n"
     "graphed = torch.cuda.make_graphed_callables(model, (sample,))\nout = graphed(torch.ones(8, 4, device='cuda'))\n"
     "out.sum().backward()\nresult = (graphed is model, [round(v, 5) for v in model[1].running_mean.tolist()], "
     "model[0].weight.grad is not None)",
     "import torch\ntorch.manual_seed(0)\nmodel = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))\n"
     "sample = torch.randn(8, 4, requires_grad=True)\nfor _ in range(3):\n    model(sample)\ngraphed = model\n"
     "out = graphed(torch.ones(8, 4))\nout.sum().backward()\n"
     "result = (graphed is model, [round(v, 5) for v in model[1].running_mean.tolist()], model[0].weight.grad is not None)"),
    ("device_type_branches_take_the_cuda_path",
     "import torch\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
     "scaler = torch.amp.GradScaler(enabled=device.type == 'cuda')\nx = torch.ones(2, device=device)\n"
     "with torch.autocast(device_type=device.type, dtype=torch.bfloat16):\n    y = x @ x\n"
     "pin = device.type == 'cuda'\nresult = (device.type, scaler.is_enabled(), y.dtype, pin, torch.device('cpu').type)",
     "import torch\nresult = ('cuda', True, torch.bfloat16, True, 'cpu')"),
    ("device_index_of_a_local_rank_device",
     "import torch\nlocal_rank = 0\ndevice = torch.device(f'cuda:{local_rank}')\n"
     "torch.cuda.set_device(device.index)\nrebuilt = f'cuda:{device.index}'\n"
     "class Frame:\n    index = 'rows'\n"
     "result = (device.index, rebuilt, torch.zeros(1, device=rebuilt).is_cuda, torch.device('cuda').index, "
     "Frame().index, [3, 4].index(4))",
     "result = (0, 'cuda:0', True, None, 'rows', 1)"),
    ("cuda_initialized_flag_after_device_work",
     "import torch\nx = torch.ones(1, device='cuda')\nresult = (torch.cuda._initialized, torch.cuda.is_initialized())",
     "result = (True, True)"),
    ("emit_nvtx_ranges_around_a_step",  # the nsys/nvprof idiom (DeepSpeed, Megatron profiling flags)
     "import torch\nfrom torch.autograd.profiler import emit_nvtx\nx = torch.ones(4, device='cuda', requires_grad=True)\n"
     "with torch.autograd.profiler.emit_nvtx(record_shapes=True):\n    with emit_nvtx(enabled=False):\n"
     "        pass\n    y = (x * 2).sum()\n    y.backward()\n"
     "result = (y.item(), x.grad.tolist(), isinstance(emit_nvtx(), torch.autograd.profiler.emit_nvtx))",
     "result = (8.0, [2.0, 2.0, 2.0, 2.0], True)"),
    ("event_timer_logged",  # DeepSpeed's CudaEventTimer objects end up in log lines
     "import torch\nstart = torch.cuda.Event(enable_timing=True)\nbefore = repr(start)\nstart.record()\n"
     "result = (before, repr(start)[:20], f'{start}'.startswith('<torch.cuda.Event 0x'), start.cuda_event != 0)",
     "result = ('<torch.cuda.Event uninitialized>', '<torch.cuda.Event 0x', True, True)"),
    ("cuda_comm_single_process_collectives",  # PyTorch-Encoding's parallel.py, DataParallel-style code
     "import torch\nimport torch.cuda.comm as comm\nx = torch.arange(6.0, device='cuda').view(3, 2)\n"
     "copies = comm.broadcast(x, devices=[0])\nparts = comm.scatter(x, devices=[0], dim=1)\n"
     "total = comm.reduce_add([x, x * 2], destination=0)\nback = comm.gather([x, x], dim=0, destination=-1)\n"
     "coalesced = comm.broadcast_coalesced([x, x[0]], [0])\n"
     "result = (copies[0] is x, parts[0].tolist(), total.tolist(), total.is_cuda, tuple(back.shape), str(back.device),\n"
     "          len(coalesced), coalesced[0][0] is x, comm.reduce_add_coalesced([[x]], 0)[0].tolist())",
     "result = (True, [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]], [[0.0, 3.0], [6.0, 9.0], [12.0, 15.0]], True, (6, 2), "
     "'cpu', 1, True, [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]])"),
    ("autocast_dtype_read_before_the_region",  # sizing buffers / choosing kernels by the amp dtype
     "import torch\nbefore = torch.get_autocast_dtype('cuda')\nwith torch.autocast('cuda'):\n"
     "    inside = torch.get_autocast_dtype('cuda')\nresult = (before, inside, torch.get_autocast_dtype('cuda'))",
     "import torch\nresult = (torch.float16, torch.float16, torch.float16)"),
    ("full_determinism_setup",  # transformers' enable_full_determinism: errors on nondeterministic ops stay errors
     "import os, torch\nos.environ['CUBLAS_WORKSPACE_CONFIG'] = ':4096:8'\ntorch.use_deterministic_algorithms(True)\n"
     "torch.backends.cudnn.deterministic = True\ntorch.backends.cudnn.benchmark = False\n"
     "result = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),\n"
     "          torch.backends.cudnn.deterministic)\ntorch.use_deterministic_algorithms(False)",
     None),
    # -- torch.device values kept where the application copies, re-wraps and saves them ----------------
    ("deepcopy_of_args_keeps_the_cuda_device",
     "import copy, torch\nargs = {'device': torch.device('cuda')}\nd = torch.device('cuda', 0)\n"
     "result = (copy.deepcopy(args)['device'].type, copy.copy(d).type, torch.device(d).type, torch.device(d).index)",
     "result = ('cuda', 'cuda', 'cuda', 0)"),
    ("torch_save_load_of_args_device_is_cuda",
     "import argparse, io, torch\nbuffer = io.BytesIO()\n"
     "torch.save({'args': argparse.Namespace(device=torch.device('cuda', 0))}, buffer)\nbuffer.seek(0)\n"
     "loaded = torch.load(buffer, weights_only=False)['args'].device\n"
     "result = (loaded == torch.device('cuda', 0), loaded.type, loaded.index)",
     "result = (True, 'cuda', 0)"),
    ("torch_load_weights_only_device_is_cuda",
     "import io, torch\nbuffer = io.BytesIO()\ntorch.save({'device': torch.device('cuda')}, buffer)\nbuffer.seek(0)\n"
     "loaded = torch.load(buffer)['device']\nresult = (loaded.type, loaded.index)",
     "result = ('cuda', None)"),
    # a region's flags read what the application asked for, as on a GPU (logged, or asserted)
    ("sdpa_kernel_flags_read_back_inside_the_region",
     "import torch\nfrom torch.nn.attention import SDPBackend, sdpa_kernel\n"
     "with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):\n"
     "    inside = (torch.backends.cuda.mem_efficient_sdp_enabled(), torch.backends.cuda.math_sdp_enabled(),\n"
     "              torch.backends.cuda.flash_sdp_enabled())\n"
     "result = (inside, torch.backends.cuda.math_sdp_enabled())",
     "result = ((True, False, False), True)"),
    # resuming from a checkpoint written on a GPU: its generator state is Philox's 16 bytes (seed, offset)
    ("cuda_set_rng_state_of_a_gpu_checkpoint",
     "import torch\nstate = torch.tensor([42, 7], dtype=torch.int64).view(torch.uint8)\n"
     "torch.cuda.set_rng_state(state)\nx = torch.rand(2, device='cuda')\nresult = (tuple(x.shape), x.dtype)",
     "import torch\nresult = ((2,), torch.float32)"),
    ("sdpa_kernel_nested_regions_read_their_own_flags",
     "import torch\nfrom torch.nn.attention import SDPBackend, sdpa_kernel\n"
     "flags = lambda: (torch.backends.cuda.math_sdp_enabled(), torch.backends.cuda.mem_efficient_sdp_enabled())\n"
     "with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):\n    with sdpa_kernel(SDPBackend.MATH):\n"
     "        inner = flags()\n    outer = flags()\nresult = (inner, outer, flags())",
     "result = ((True, False), (False, True), (True, True))"),
    # methods referenced, not called: collate helpers and Lightning-style apply_to_collection
    ("map_unbound_tensor_cuda",
     "import torch\nbatch = [torch.ones(2), torch.zeros(3)]\nresult = [t.is_cuda for t in map(torch.Tensor.cuda, batch)]",
     "result = [True, True]"),
    ("partial_unbound_tensor_to_with_device_keyword",
     "import torch\nfrom functools import partial\nmove = partial(torch.Tensor.to, device='cuda', non_blocking=True)\n"
     "result = move(torch.ones(2)).is_cuda",
     "result = True"),
    ("pytree_map_of_unbound_tensor_to",
     "import torch\nfrom functools import partial\nfrom torch.utils._pytree import tree_map\n"
     "batch = tree_map(partial(torch.Tensor.to, device='cuda:0'), {'x': torch.ones(2), 'y': [torch.zeros(1)]})\n"
     "result = (batch['x'].is_cuda, batch['y'][0].is_cuda)",
     "result = (True, True)"),
    ("unbound_tensor_to_called_with_the_tensor",
     "import torch\nfrom torch import Tensor\nresult = (torch.Tensor.to(torch.ones(2), 'cuda').is_cuda, "
     "Tensor.to(torch.ones(1), torch.device('cuda')).is_cuda)",
     "result = (True, True)"),
    ("bound_module_cuda_reference_called_later",
     "import torch\nmodel = torch.nn.Linear(2, 2)\nmove = model.cuda\nmove()\n"
     "result = (next(model.parameters()).is_cuda, getattr(torch.Tensor, 'cuda')(torch.ones(1)).is_cuda)",
     "result = (True, True)"),
    # mp.spawn ranks of a script written for more GPUs than the target has: each rank's own ordinal
    ("set_device_past_the_devices_seen_is_the_current_one",
     "import torch\ntorch.cuda.set_device(1)\nx = torch.ones(1, device='cuda')\n"
     "result = (torch.cuda.current_device(), x.is_cuda)",
     "result = (1, True)"),
    # a batch container of the project with its own cuda()/to() (detection and RL code)
    ("own_cuda_method_gets_the_arguments_as_written",
     "class Batch:\n    def cuda(self, device=None):\n        return ('cuda', device)\n"
     "result = (Batch().cuda(0), Batch().cuda(), Batch().cuda(device='cuda:1'))",
     None),
    ("to_attribute_of_other_objects_kept",
     "import torch\nclass Route:\n    to = 'home'\nresult = (Route.to, Route().to, torch.cuda.is_available())",
     "result = ('home', 'home', True)"),
    # -- a copy on the host is a copy: what `.cpu()` gives on a GPU machine ------------------------
    # early stopping keeps the best weights (the idiom of countless training scripts): on a GPU they
    # are a snapshot on the host, which training on the device goes on without
    ("best_state_snapshot_with_cpu",
     "import torch\nmodel = torch.nn.Linear(2, 1).cuda()\nbest = {k: v.cpu() for k, v in model.state_dict().items()}\n"
     "with torch.no_grad():\n    model.weight.add_(1.0)\nresult = torch.equal(best['weight'], model.weight.detach().cpu())",
     "result = False"),
    ("best_state_snapshot_with_to_cpu",
     "import torch\nmodel = torch.nn.Linear(2, 1).to('cuda')\n"
     "best = {k: v.to('cpu') for k, v in model.state_dict().items()}\n"
     "alt = {k: v.to(device=torch.device('cpu')) for k, v in model.state_dict().items()}\n"
     "with torch.no_grad():\n    model.bias.fill_(3.0)\nresult = (best['bias'].item() == 3.0, alt['bias'].item() == 3.0)",
     "result = (False, False)"),
    # thresholding predictions in numpy, then scoring the raw outputs
    ("edit_of_cpu_numpy_leaves_the_tensor",
     "import torch\nout = torch.tensor([0.2, 0.7], device='cuda')\npred = out.cpu().numpy()\npred[pred > 0.5] = 1.0\n"
     "result = out.tolist()",
     "result = [0.20000000298023224, 0.699999988079071]"),
    ("cpu_reference_copies_as_the_call",
     "import torch\nw = torch.zeros(2, device='cuda', requires_grad=True)\nhost = list(map(torch.Tensor.cpu, [w]))\n"
     "with torch.no_grad():\n    w.add_(1.0)\nresult = (host[0].tolist(), host[0].requires_grad, type(host[0]).__name__)",
     "result = ([0.0, 0.0], True, 'Tensor')"),
    # the other spellings of the same transfers: the host as a device object, the legacy type, a packed batch
    ("host_device_object_and_legacy_type_copy",
     "import torch\nfrom torch.nn.utils.rnn import pack_sequence\nx = torch.zeros(2, device='cuda')\n"
     "host = x.to(torch.device('cpu'))\nlegacy = x.type(torch.cuda.FloatTensor)\n"
     "packed = pack_sequence([torch.zeros(2, device='cuda')]).cpu()\nx.add_(1.0)\n"
     "result = (host.tolist(), legacy.tolist(), packed.data.tolist())",
     "result = ([0.0, 0.0], [0.0, 0.0], [0.0, 0.0])"),
    # a module moves in place, on a GPU too: `.cpu()` of it is the module itself
    ("module_cpu_is_the_module",
     "import torch\nmodel = torch.nn.Linear(2, 1).cuda()\nresult = (model.cpu() is model, model.to('cpu') is model)",
     "result = (True, True)"),
    # and the other way: host memory sent to the device is the device's own copy (CleanRL-style replay
    # buffers of an environment's reused observation array, in-place normalisation of a dataset slice)
    ("as_tensor_of_a_reused_buffer_is_a_copy",
     "import numpy as np, torch\nobs = np.zeros(2, dtype=np.float32)\nkept = torch.as_tensor(obs, device='cuda')\n"
     "also = torch.from_numpy(obs).to('cuda:0')\nobs[0] = 7.0\nresult = (kept.tolist(), also.tolist())",
     "result = ([0.0, 0.0], [0.0, 0.0])"),
    ("in_place_edit_of_a_batch_leaves_the_dataset",
     "import torch\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\nX = torch.ones(4, 2)\n"
     "for i in range(0, 4, 2):\n    xb = X[i:i + 2].to(device, non_blocking=True)\n    xb.sub_(1.0)\n"
     "    yb = X[i:i + 2].cuda()\n    yb.mul_(3.0)\nresult = X.sum().item()",
     "result = 8.0"),
    # the legacy sparse constructor of older graph (GCN) code: an adjacency matrix on the GPU
    ("legacy_sparse_cuda_tensor",
     "import torch\ni = torch.tensor([[0, 1], [1, 0]]).cuda()\nv = torch.tensor([3., 4.]).cuda()\n"
     "adj = torch.cuda.sparse.FloatTensor(i, v, torch.Size([2, 2]))\nempty = torch.cuda.sparse.FloatTensor(2, 3)\n"
     "result = (adj.is_cuda, adj.is_sparse, adj.to_dense().tolist(), isinstance(adj, torch.cuda.sparse.FloatTensor), "
     "isinstance(adj, torch.cuda.FloatTensor), tuple(empty.shape), adj.type())",
     "result = (True, True, [[0.0, 3.0], [4.0, 0.0]], True, False, (2, 3), 'torch.cuda.sparse.FloatTensor')"),
    # old code keeps the tensor type (and classes) in its settings, which get pickled with the run
    ("pickled_settings_holding_cuda_classes",
     "import pickle, torch\nsettings = {'tensor_type': torch.cuda.FloatTensor, 'scaler': torch.cuda.amp.GradScaler,\n"
     "            'device': torch.device}\nloaded = pickle.loads(pickle.dumps(settings))\nx = torch.ones(2).cuda()\n"
     "result = (loaded['tensor_type'].__name__, x.type(loaded['tensor_type']).type(), loaded['scaler'].__name__, "
     "loaded['device']('cpu').type)",
     "result = ('FloatTensor', 'torch.cuda.FloatTensor', 'GradScaler', 'cpu')"),
    # PyTorch 2.9's replacement for allow_tf32: a property of torch.backends' class, set on torch itself
    ("backends_fp32_precision_reaches_torch",
     "import torch\nbefore = torch.backends.fp32_precision\ntorch.backends.fp32_precision = 'tf32'\n"
     "seen = (torch.backends.fp32_precision, torch.backends.mkldnn.matmul.fp32_precision)\n"
     "torch.backends.fp32_precision = before\nresult = (before, seen, torch.backends.fp32_precision)",
     "result = ('none', ('tf32', 'tf32'), 'none')"),
    # `x.type(torch.cuda.sparse.<T>)` converts the dtype and keeps the layout (a dense tensor stays dense)
    ("legacy_sparse_type_conversion",
     "import torch\nadj = torch.sparse_coo_tensor([[0, 1], [1, 0]], [3., 4.], (2, 2)).cuda()\ndense = torch.ones(2).cuda()\n"
     "result = (adj.type(torch.cuda.sparse.DoubleTensor).type(), str(adj.type('torch.cuda.sparse.DoubleTensor').dtype), "
     "dense.type(torch.cuda.sparse.DoubleTensor).type())",
     "result = ('torch.cuda.sparse.DoubleTensor', 'torch.float64', 'torch.cuda.DoubleTensor')"),
    # `x.to(other)` takes the other tensor's device and dtype: a batch sent where the model's weights are
    ("to_another_tensor_is_a_transfer_to_its_device",
     "import torch\nmodel = torch.nn.Linear(2, 1).cuda()\nweight = next(model.parameters())\nX = torch.ones(4, 2)\n"
     "xb = X[0:2].to(weight)\nxb.sub_(1.0)\nyb = X[2:4].to(weight, non_blocking=True)\nyb.mul_(3.0)\n"
     "result = (X.sum().item(), xb.is_cuda)",
     "result = (8.0, True)"),
    # a module's weights are on the device once the model moved there: sent there again they are
    # themselves (reassigned as parameters, edited in place through the result)
    ("parameter_sent_to_the_device_again_is_itself",
     "import torch\nlin = torch.nn.Linear(2, 2).cuda()\nlin.weight = lin.weight.cuda()\nlin.bias = lin.bias.to('cuda')\n"
     "emb = torch.nn.Embedding(3, 2).to('cuda')\nwith torch.no_grad():\n    emb.weight.to('cuda')[0].zero_()\n"
     "result = (type(lin.weight).__name__, emb.weight[0].tolist())",
     "result = ('Parameter', [0.0, 0.0])"),
    # an adversarial example (PGD/FGSM) made a trainable leaf, then sent to the device: still the leaf
    ("trainable_leaf_sent_to_the_device_keeps_its_grad",
     "import torch\ndevice = torch.device('cuda')\nX = torch.randn(3, device=device)\n"
     "x_adv = X.clone().detach().requires_grad_(True).to(device)\n(x_adv * 2).sum().backward()\n"
     "result = (x_adv.is_leaf, x_adv.grad.tolist())",
     "result = (True, [2.0, 2.0, 2.0])"),
    # a module's own flag named like the method
    ("module_flag_named_cpu_is_the_flag",
     "import torch\nclass Net(torch.nn.Module):\n    def __init__(self, cpu=False):\n        super().__init__()\n"
     "        self.cpu = cpu\nnet = Net(cpu=False)\nresult = ('host' if net.cpu else 'device', callable(torch.nn.Linear(1, 1).cpu))",
     "result = ('device', True)"),
    # -- device text: the branches projects write on it ----------------------------------------------
    ("str_of_the_device_is_cuda",
     "import torch\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
     "pin = 'cuda' in str(device)\nuse_amp = str(device) == 'cuda'\n"
     "result = (pin, use_amp, f'{device}', f'{torch.device(\"cuda:0\")!s}', str(torch.device(str(device))), str(7))",
     "result = (True, True, 'cuda', 'cuda:0', 'cuda', '7')"),
    # -- device contexts of multi-GPU code: torch's class, the tensor's ordinal --------------------
    ("device_context_of_a_tensor",
     "import torch\ntorch.cuda.set_device(0)\nx = torch.zeros(2, device='cuda')\nwith torch.cuda.device(x.get_device()) as entered:\n"
     "    inner = torch.cuda.current_device()\nwith torch.cuda.device_of(x):\n    y = torch.ones(1, device='cuda')\n"
     "ctx = torch.cuda.device('cuda:0')\n"
     "result = (torch.cuda.device_of(x).idx, ctx.idx, ctx.prev_idx, entered, inner, y.get_device(),\n"
     "          isinstance(torch.cuda.device_of(x), torch.cuda.device), torch.cuda.device(-1).idx)",
     "result = (0, 0, -1, None, 0, 0, True, -1)"),
    # a module overriding cuda()/to() that calls torch's own unbound (wrappers that count or hook moves)
    ("override_calls_torchs_own_unbound",
     "import torch\nclass Net(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
     "        self.lin = torch.nn.Linear(2, 2)\n        self.moves = 0\n    def cuda(self, device=None):\n"
     "        self.moves += 1\n        return torch.nn.Module.cuda(self, device)\n    def to(self, *args, **kwargs):\n"
     "        self.moves += 10\n        return torch.nn.Module.to(self, *args, **kwargs)\n"
     "net = Net().cuda().to('cuda')\nnet = Net.cuda(net)\nresult = (net.moves, net.lin.weight.is_cuda)",
     "result = (12, True)"),
    # device-agnostic helpers take the module of the device the run chose (memory logging, seeding)
    ("get_device_module_of_the_chosen_device",
     "import torch\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
     "module = torch.get_device_module(device)\nmodule.manual_seed(0)\nmodule.reset_peak_memory_stats()\n"
     "result = (module.max_memory_allocated() >= 0, module.is_available(), torch.get_device_module('cuda:0') is module)",
     "result = (True, True, True)"),
    # offloading code stages weights in pinned host memory it registers or pins itself
    ("pinned_staging_storage_and_cudart_host_register",
     "import torch\nw = torch.randn(8)\nstaged = w.untyped_storage().pin_memory()\nbuffer = torch.empty(8)\n"
     "rc = torch.cuda.cudart().cudaHostRegister(buffer.data_ptr(), 32, 0)\n"
     "torch.cuda.cudart().cudaHostUnregister(buffer.data_ptr())\nresult = (staged.nbytes(), int(rc))",
     "result = (32, 0)"),
    # attention switched globally to the GPU's cuDNN kernel alone (modded-nanogpt)
    ("sdp_global_switches_cudnn_only",
     "import torch\nimport torch.nn.functional as F\nfrom torch.backends import cuda as flags\n"
     "flags.enable_flash_sdp(False)\nflags.enable_math_sdp(False)\nflags.enable_mem_efficient_sdp(False)\n"
     "flags.enable_cudnn_sdp(True)\ntry:\n    q = torch.ones(1, 1, 4, 8, device='cuda')\n"
     "    result = (F.scaled_dot_product_attention(q, q, q).sum().item(), flags.math_sdp_enabled(), "
     "flags.cudnn_sdp_enabled())\nfinally:\n    flags.enable_flash_sdp(True)\n    flags.enable_math_sdp(True)\n"
     "    flags.enable_mem_efficient_sdp(True)",
     "result = (32.0, False, True)"),
    # a profiler range ended by its handle (TensorRT-LLM's executor)
    ("nvtx_range_start_end",
     "import torch\nhandle = torch.cuda.nvtx.range_start('step')\nx = torch.ones(2, device='cuda').sum().item()\n"
     "torch.cuda.nvtx.range_end(handle)\nresult = x",
     "result = 2.0"),
    ("stream_context_class",
     "import torch\nside = torch.cuda.Stream()\nwith torch.cuda.StreamContext(side):\n"
     "    y = torch.ones(3, device='cuda') * 2\ntorch.cuda.current_stream().wait_stream(side)\nresult = y.sum().item()",
     "result = 6.0"),
    # a solver library chosen for CUDA's linear algebra (torch's own test suites, cuSOLVER-only fixes)
    ("preferred_linalg_library_cusolver",
     "import torch\nchosen = torch.backends.cuda.preferred_linalg_library('cusolver')\n"
     "a = torch.eye(3, device='cuda') * 2\nresult = (str(chosen), str(torch.backends.cuda.preferred_linalg_library()), "
     "torch.linalg.inv(a).diagonal().tolist())",
     "result = ('_LinalgBackend.Cusolver', '_LinalgBackend.Cusolver', [0.5, 0.5, 0.5])"),
    # bf16 gated natively (`including_emulation=False`) and by capability: one answer
    ("bf16_native_agrees_with_capability",
     "import torch\nresult = (torch.cuda.is_bf16_supported(including_emulation=False) == "
     "(torch.cuda.get_device_capability() >= (8, 0)), torch.cuda.is_bf16_supported())",
     "result = (True, True)"),
    # the GPU's profiler activity added where torch lists it (training-loop profilers)
    ("profiler_supported_activities_cuda",
     "import torch\nfrom torch.profiler import ProfilerActivity, supported_activities\n"
     "result = (ProfilerActivity.CUDA in supported_activities(), "
     "ProfilerActivity.CPU in torch.profiler.supported_activities())",
     "result = (True, True)"),
    # autocast's CUDA dtype set globally before a region without one ("A100 fix" SFT scripts)
    ("set_autocast_dtype_then_region",
     "import torch\ntorch.set_autocast_dtype('cuda', torch.bfloat16)\ntry:\n    a = torch.randn(2, 2, device='cuda')\n"
     "    with torch.autocast('cuda'):\n        y = a @ a\n        inside = torch.get_autocast_dtype('cuda')\n"
     "finally:\n    torch.set_autocast_dtype('cuda', torch.float16)\nresult = (str(y.dtype), str(inside))",
     "result = ('torch.bfloat16', 'torch.bfloat16')"),
    # autocast switched on outside any region (SAM2's tracker wrapper)
    ("set_autocast_enabled_legacy",
     "import torch\ntorch.set_autocast_enabled(True)\ntry:\n    a = torch.randn(2, 2, device='cuda')\n"
     "    result = (str((a @ a).dtype), torch.is_autocast_enabled())\nfinally:\n    torch.set_autocast_enabled(False)",
     "result = ('torch.float16', True)"),
    # yes/no questions a GPU answers (peer copies, the allocator, TF32)
    ("cuda_plain_queries",
     "import torch\nresult = (torch.cuda.can_device_access_peer(0, 0), torch.cuda.get_allocator_backend(), "
     "isinstance(torch.cuda.is_tf32_supported(), bool))",
     "result = (False, 'native', True)"),
]
