"""The one-line / zero-line runtime: CUDA-written code runs on the chosen device.

Scope: only the application's own modules are rewritten and see the torch facades; see scope.py.
"""

from torchport.retarget.api import activate, deactivate, use

__all__ = ["activate", "deactivate", "use"]
