"""The application's CUDA autocast regions run with CUDA's op lists on the target: softmax,
layer_norm, exp, pow and the sums compute in float32 under float16 or bfloat16, mixed inputs of
scatter_add and dot are promoted, as on a GPU, also in the regions torch opens again for them
(activation checkpointing's recomputation); the target's own autocast, used by name in the
application, keeps its own lists."""

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


@pytest.mark.parametrize("device", ["cpu", "cuda-emulated", "neuron-emulated"])
def test_cuda_regions_run_cudas_lists_on_the_target(program, device):
    result = program(REGIONS, "--device", device, "--precision", "keep")
    assert result.returncode == 0, result.stderr[-3000:]
    cuda = "float16," + ",".join(["float32"] * 9) + ",float16"
    assert result.values() == {"cuda": cuda, "cuda_amp": cuda, "kl": "float32,True", "compiled": "float32"}


def test_the_targets_own_autocast_keeps_its_lists(program):
    # code that asks for the CPU's autocast by name (a library's, or the application's own) gets the
    # CPU's lists, in which softmax and sums run in the dtype they receive
    source = """
    import torch
    h = torch.randn(4, 8).to(torch.bfloat16)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            pass
        inside = h.softmax(-1).dtype
    with torch.autocast("cpu", dtype=torch.bfloat16):
        own = (h.softmax(-1).dtype, h.sum().dtype, torch.nn.functional.mse_loss(h, h).dtype)
    print("inside=" + str(inside).replace("torch.", ""))
    print("own=" + ",".join(str(d).replace("torch.", "") for d in own))
    """
    result = program(source, "--device", "cpu", "--precision", "keep")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.values() == {"inside": "float32", "own": "bfloat16,bfloat16,float32"}


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
