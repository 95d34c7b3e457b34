"""torchport: run PyTorch code written for CUDA on any backend, and prove it still works.

    import torchport
    torchport.use("auto")      # first lines of an entry script
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__", "use", "compare", "compile", "TorchportError"]

from torchport.errors import TorchportError


def __getattr__(name: str):
    # Keep `import torchport` cheap: heavy parts load on first use.
    if name == "use":
        from torchport.retarget.api import use

        return use
    if name == "compile":
        # Also a callable package: torchport.compile(model, target=None, buckets="auto", ...).
        import importlib

        return importlib.import_module("torchport.compile")
    if name == "compare":
        # The package itself is callable: torchport.compare(model_factory, inputs_factory, ...).
        import importlib

        return importlib.import_module("torchport.compare")
    raise AttributeError(f"module 'torchport' has no attribute {name!r}")
