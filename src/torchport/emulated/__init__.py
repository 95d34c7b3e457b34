"""The emulated target device: a real PyTorch device (PrivateUse1, named ``emulated``) computing on the CPU.

Tensors on it are distinct from CPU tensors (mixing them fails as on a real accelerator), and the
profile object it is given (`activate`) decides what happens to dtypes (computed in a narrower type,
or refused) and which ops are recorded as host fallbacks or unsupported. `run --device X-emulated`,
`check --target X` and `compare ... X-emulated` all use it.

The package is split by concern:

- `state`: the process-wide state (active profile, recorder, switches);
- `storage`: the CPU bytes behind device tensors, and memory accounting;
- `dispatch`: the boxed fallback every op reaches, and the ops it cannot express;
- `kernels`: direct kernels per ATen op, and the device-only paths (fused RNN cells, ...) served on the host;
- `device_module`: ``torch.emulated``, the PrivateUse1 hooks and guard, torch.accelerator's calls;
- `registration`: registering the device type and switching profiles;
- `autocast`, `distributed`, `serialization`: AMP, collectives (gloo underneath), torch.save/load.

The device type is registered once per process; the profile can be switched at any time with
`activate`, so one process can rehearse several targets in turn.
"""

from __future__ import annotations

# Each submodule's `__all__` is the one list of what it exports; the package re-exports them unchanged.
from torchport.emulated import registration, state, storage
from torchport.emulated.registration import *  # noqa: F403
from torchport.emulated.state import *  # noqa: F403
from torchport.emulated.storage import *  # noqa: F403

__all__ = [*state.__all__, *registration.__all__, *storage.__all__]
