"""Google TPU and other PJRT devices through torch_xla (lazy tensors, one compile per shape)."""

from __future__ import annotations

import os

from torchport.backends import register
from torchport.backends.base import Backend, Probe, package_installed


@register
class XLABackend(Backend):
    name = "xla"
    aliases = ("tpu", "pjrt")
    description = "Google TPU (or XLA on CPU/GPU) through torch_xla and PJRT"

    def probe(self) -> Probe:
        if not package_installed("torch_xla"):
            return Probe(
                False,
                "torch_xla is not installed",
                "Run scripts/setup-xla-env.sh (a separate environment with torch 2.9 + torch_xla), "
                "or pip install torch_xla on a TPU VM.",
            )
        if not os.environ.get("PJRT_DEVICE") and not os.environ.get("TPU_NAME"):
            return Probe(
                True,
                "torch_xla installed; PJRT_DEVICE unset (torch_xla will pick TPU, else CPU)",
            )
        return Probe(True, f"torch_xla installed, PJRT_DEVICE={os.environ.get('PJRT_DEVICE')}")

    def device_module(self):
        """torch_xla registers no `torch.xla`; this namespace answers what torch.<device> would (one per
        backend, as torch.<device> is one module: its generator is the same object on every read)."""
        module = self.__dict__.get("_device_module")
        if module is None:
            module = self.__dict__["_device_module"] = self._build_device_module()
        return module

    def _build_device_module(self):
        import types

        import torch_xla.core.xla_model as xm

        def device_count() -> int:
            return len(xm.get_xla_supported_devices() or [])

        def get_device_name(index: int = 0) -> str:
            return f"XLA:{xm.xla_device_hw(self.device(index))}"

        class Generator:
            """torch_xla's one generator per process, with torch.Generator's state methods (torch has
            no generator object for XLA): `torch.cuda.default_generators[i]`."""

            device = property(lambda generator: self.device(None))
            get_state = staticmethod(xm.get_rng_state)
            initial_seed = staticmethod(xm.get_rng_state)

            def set_state(self, new_state) -> None:
                xm.set_rng_state(int(new_state))

            def manual_seed(self, seed):
                xm.set_rng_state(int(seed))
                return self

        return types.SimpleNamespace(
            default_generators=(Generator(),),
            manual_seed=xm.set_rng_state,
            manual_seed_all=xm.set_rng_state,
            seed=lambda: None,
            initial_seed=xm.get_rng_state,
            get_rng_state=xm.get_rng_state,
            set_rng_state=xm.set_rng_state,
            device_count=device_count,
            get_device_name=get_device_name,
            synchronize=lambda index=None: self.synchronize(index),
            empty_cache=lambda: None,
        )

    #: torch_xla's 'xla' process group rendezvouses through the PJRT runtime; with torch's env://
    #: default DDP's first collective sees no parameters on the other ranks.
    dist_init_method = "xla://"

    def device(self, index: int | None = None):
        """The process's XLA device, or device `index` of those it has (an ordinal past them, as
        torchrun's local ranks are where each process has one device, shares them)."""
        import torch_xla.core.xla_model as xm

        if index is None:
            return xm.xla_device()
        count = self.device_count()
        return xm.xla_device(index % count if count else index)

    def generator_device(self, device):
        """The host: torch_xla makes no `torch.Generator` for XLA devices ("XLA device type not an
        accelerator"), and its random ops take a host generator."""
        import torch

        return torch.device("cpu")

    def current_index(self) -> int:
        """torch_xla's current device (torch.accelerator answers for CUDA in a CUDA build of torch)."""
        return self.device().index or 0

    def set_current_index(self, index: int) -> None:
        """One XLA device per process (PJRT): the process's device is the current one; another index is
        what xla_device(index) places on."""

    def on_activate(self) -> list[str]:
        """Lazy tensors build one graph until a step boundary: cut it after every optimizer step,
        as torch_xla's own GPU->XLA guide asks users to do by hand with xm.mark_step()."""
        import torch_xla.core.xla_model as xm
        from torch.optim.optimizer import register_optimizer_step_post_hook

        register_optimizer_step_post_hook(lambda *args: xm.mark_step())
        return ["xm.mark_step() after every optimizer step"]

    def _memory_info(self, index: int | None) -> dict:
        """torch_xla's memory report for the device; empty where its runtime keeps none."""
        import torch_xla.core.xla_model as xm

        try:
            return xm.get_memory_info(self.device(index))
        except Exception:
            return {}

    def total_memory(self, index: int = 0) -> int:
        """What torch_xla's runtime reports for the device (`bytes_limit`, or `kb_total` in older
        releases); 0 where it reports nothing (the CPU runtime: "GetAllocatorStats is not supported")."""
        info = self._memory_info(index)
        if "bytes_limit" in info:
            return int(info["bytes_limit"])
        return int(info.get("kb_total", 0)) * 1024

    def memory_stat(self, stat: str, index: int | None = None) -> int:
        """Only the current allocation is known to torch_xla; peaks and reservations read 0."""
        if stat != "memory_allocated":
            return 0
        info = self._memory_info(index)
        if "bytes_used" in info:
            return int(info["bytes_used"])
        return int(info.get("kb_total", 0) - info.get("kb_free", 0)) * 1024

    def synchronize(self, index: int | None = None) -> None:
        import torch_xla.core.xla_model as xm

        xm.mark_step()
        xm.wait_device_ops()
