"""Children started with the `spawn` or `forkserver` method (mp.spawn, DataLoader workers with
multiprocessing_context='spawn') re-import the main program by themselves. Hand them this module as
their main: it retargets the child the same way, then runs the real program as `__mp_main__`.
"""

from __future__ import annotations

import json
import multiprocessing.spawn
import os

__all__ = ["install", "ENV_CHILD"]

#: How the parent tells its spawned children what to retarget to (JSON).
ENV_CHILD = "TORCHPORT_SPAWNED_CHILD"
_BOOTSTRAP = "torchport.retarget.spawn_main"
_original_preparation_data = multiprocessing.spawn.get_preparation_data


def install(device: str, precision: str, strict: bool, scope: list[str], narrowed: list[str] = ()) -> None:
    """Make spawned children retarget like this process (idempotent)."""
    settings = {"device": device, "precision": precision, "strict": strict, "scope": scope,
                "no_scope": list(narrowed)}

    def get_preparation_data(name):
        data = _original_preparation_data(name)
        main_path = data.pop("init_main_from_path", None)
        main_name = data.pop("init_main_from_name", None)
        if main_path is None and main_name is None:
            return data
        os.environ[ENV_CHILD] = json.dumps({**settings, "main_path": main_path, "main_name": main_name})
        data["init_main_from_name"] = _BOOTSTRAP
        return data

    multiprocessing.spawn.get_preparation_data = get_preparation_data
