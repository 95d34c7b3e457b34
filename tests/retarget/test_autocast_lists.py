"""The application's CUDA autocast regions run with CUDA's op lists on the target: softmax,
layer_norm, exp, pow and the sums compute in float32 under float16 or bfloat16, mixed inputs of
scatter_add and dot are promoted, as on a GPU, also in the regions torch opens again for them
(activation checkpointing's recomputation) and in regions compiled before any eager one; the
emulated targets rehearse their own target's lists."""

import pytest

REGIONS = """
import torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
layer, norm = nn.Linear(8, 8).cuda(), nn.LayerNorm(8).cuda()
x = torch.randn(4, 8, device="cuda")
def dtypes(h):
    return ",".join(str(t.dtype).replace("torch.", "") for t in (
        h, h.softmax(-1), F.log_softmax(h, -1), norm(h), h.sum(), h.cumsum(-1), h.exp(), h.pow(2),
        h.logsumexp(-1), F.softplus(h), h.sum(dtype=torch.float16)))
with torch.autocast("cuda", dtype=torch.float16):
    print("cuda=" + dtypes(layer(x)))
with torch.cuda.amp.autocast():
    print("cuda_amp=" + dtypes(layer(x)))
# a VAE's KL term with a log-variance near 12: exp in float32 stays finite, as on a GPU
with torch.autocast("cuda", dtype=torch.float16):
    logvar = layer(x) * 0 + 12.0
    kl = -0.5 * torch.sum(1 + logvar - logvar.exp())
print("kl=" + str(kl.dtype).replace("torch.", "") + "," + str(bool(torch.isfinite(kl))))
compiled = torch.compile(lambda h: h.softmax(-1), backend="eager")
with torch.autocast("cuda", dtype=torch.float16):
    print("compiled=" + str(compiled(layer(x)).dtype).replace("torch.", ""))
"""


@pytest.mark.parametrize("device", ["cpu", "cuda-emulated"])
def test_cuda_regions_run_cudas_lists_on_the_target(program, device):
    result = program(REGIONS, "--device", device, "--precision", "keep")
    assert result.returncode == 0, result.stderr[-3000:]
    cuda = "float16," + ",".join(["float32"] * 9) + ",float16"
    assert result.values() == {"cuda": cuda, "cuda_amp": cuda, "kl": "float32,True", "compiled": "float32"}


def test_an_emulated_target_rehearses_its_own_lists_and_says_so(program, tmp_path):
    # on Neuron the application's CUDA regions run the target's autocast, whose lists are its own:
    # the emulated Neuron rehearses those (its profile's; the CPU's where it states none)
    report = tmp_path / "report.json"
    result = program(REGIONS, "--device", "neuron-emulated", "--precision", "keep", "--report", str(report))
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.values()["cuda"].split(",")[1] == "float16"  # softmax in the dtype it receives
    import json

    decisions = {d["topic"]: d["decision"] for d in json.loads(report.read_text())["decisions"]}
    assert "own autocast lists run" in decisions["cuda autocast op lists"]


def test_a_region_compiled_before_any_eager_one_gets_cudas_lists(program):
    source = """
    import torch
    layer = torch.nn.Linear(8, 8).cuda()
    @torch.compile(backend="aot_eager")
    def step(x):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return layer(x).softmax(-1)
    print("compiled=" + str(step(torch.randn(2, 8, device="cuda")).dtype).replace("torch.", ""))
    """
    result = program(source, "--device", "cpu", "--precision", "keep")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.values() == {"compiled": "float32"}


def test_the_cpus_autocast_follows_cudas_lists_once_a_cuda_region_ran(program):
    # one set of lists in the process, so that torch's own regions (checkpointing's recomputation)
    # agree with the forward; before any CUDA region the CPU's autocast is the CPU's
    source = """
    import torch
    h = torch.randn(4, 8).to(torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        before = h.softmax(-1).dtype
    with torch.autocast("cuda", dtype=torch.bfloat16):
        pass
    with torch.autocast("cpu", dtype=torch.bfloat16):
        after = (h.softmax(-1).dtype, torch.nn.functional.mse_loss(h, h).dtype)
    print("before=" + str(before).replace("torch.", ""))
    print("after=" + ",".join(str(d).replace("torch.", "") for d in after))
    """
    result = program(source, "--device", "cpu", "--precision", "keep")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.values() == {"before": "bfloat16", "after": "float32,float32"}


TRAINING = """
import torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.checkpoint import checkpoint
torch.manual_seed(0)
block = nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8), nn.GELU(), nn.Linear(8, 8)).cuda()
x = torch.randn(4, 8, device="cuda", requires_grad=True)
labels = torch.tensor([0, 1, 2, 3], device="cuda")
for reentrant in (False, True):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        h = checkpoint(lambda t: block(t).pow(2), x, use_reentrant=reentrant)
        loss = F.cross_entropy(h, labels)
    loss.backward()
    print(("reentrant=" if reentrant else "plain=") + str(loss.dtype).replace("torch.", "") + "," + str(x.grad is not None))
with torch.autocast("cuda", dtype=torch.bfloat16):
    messages = block[0](torch.randn(5, 8, device="cuda"))            # bfloat16
    nodes = torch.zeros(3, 8, device="cuda")                          # float32
    index = torch.tensor([0, 1, 1, 2, 2], device="cuda").unsqueeze(1).expand(5, 8)
    aggregated = nodes.scatter_add(0, index, messages)
    dotted = torch.dot(messages[0], nodes[0])
print("promoted=" + str(aggregated.dtype).replace("torch.", "") + "," + str(dotted.dtype).replace("torch.", ""))
with torch.autocast("cuda", dtype=torch.bfloat16):
    try:
        F.binary_cross_entropy(torch.sigmoid(block(x)), torch.ones(4, 8, device="cuda"))
        print("bce=ran")
    except RuntimeError as error:  # CUDA's autocast refuses it, naming the logits form
        print("bce=" + str("binary_cross_entropy_with_logits" in str(error)))
"""


@pytest.mark.parametrize("device", ["cpu", "cuda-emulated"])
def test_checkpointing_promotion_and_composite_losses_under_cuda_autocast(program, device):
    result = program(TRAINING, "--device", device, "--precision", "auto")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.values() == {"plain": "float32,True", "reentrant": "float32,True", "promoted": "float32,float32",
                               "bce": "True"}
