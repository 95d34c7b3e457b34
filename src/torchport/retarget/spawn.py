"""Children started with the `spawn` or `forkserver` method (mp.spawn, DataLoader workers with
multiprocessing_context='spawn' or 'forkserver', a Pool after mp.set_start_method('forkserver'))
re-import the main program by themselves. Hand them spawn_main as their main: it retargets the child
the same way, then runs the real program as `__mp_main__`.

The settings travel in each child's preparation data (the last `sys.path` entry, which the child
applies before it runs its main and the bootstrap removes first), not in the environment: a
forkserver started before retargeting was turned on has the environment of that earlier moment,
while every child it forks gets its preparation data from the parent at the time it is started.
"""

from __future__ import annotations

import json
import multiprocessing.spawn
import os
import shutil
import tempfile

__all__ = ["install", "take_settings", "MARKER", "record_child", "record_then_end", "record_at_process_end",
           "collect_children"]

#: Prefix of the `sys.path` entry carrying the settings (not a folder: the import system skips it).
MARKER = "<torchport-retarget-child>"
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
        if name != "ignore":  # a child; "ignore" is the forkserver's own start, which preloads the main module
            _launched[0] += 1
        entry = MARKER + json.dumps({**settings, "main_path": main_path, "main_name": main_name,
                                     "records": _records_folder()})
        data["sys_path"] = [path for path in data.get("sys_path", []) if not path.startswith(MARKER)] + [entry]
        data["init_main_from_name"] = _BOOTSTRAP
        return data

    multiprocessing.spawn.get_preparation_data = get_preparation_data


def take_settings(path: list[str]) -> dict:
    """Remove the settings entry from `path` (a child's sys.path) and return the settings."""
    for index, entry in enumerate(path):
        if entry.startswith(MARKER):
            del path[index]
            return json.loads(entry[len(MARKER):])
    raise RuntimeError("torchport: a spawned child was started without its retargeting settings")


#: The folder where this process's spawned children leave what they recorded (made at the first child).
_records: list[str] = []
#: How many children this process started with the spawn or forkserver method.
_launched = [0]


def _records_folder() -> str:
    if not _records:
        _records.append(tempfile.mkdtemp(prefix="torchport-children-"))
    return _records[0]


#: In a spawned child: whether its record is being written or written, and a signal that came meanwhile.
_recording = {"started": False, "done": False, "signal": None}


def record_child(recorder, folder: str) -> None:
    """In a spawned child at exit: what it recorded (its own children's included), for the parent's
    report, once. A parent already gone (its folder removed) gets nothing."""
    from torchport.fileio import atomic_write

    if _recording["started"]:
        return
    _recording["started"] = True
    collect_children(recorder)
    try:
        atomic_write(os.path.join(folder, f"child-{os.getpid()}.json"), json.dumps(recorder.export()))
    except OSError:
        pass
    _recording["done"] = True
    if _recording["signal"] is not None:  # the signal that ends this process came while it wrote
        _end_by(_recording["signal"])


def record_at_process_end(recorder, folder: str) -> None:
    """Also write the record where a multiprocessing `Process` child ends: a forkserver's children
    leave by `os._exit` after their target, running no exit handler, but multiprocessing runs its
    finalizers first. Its registry is cleared when the child starts its target (after this child's
    bootstrap ran), so the finalizer is registered by an after-fork hook of this process, which a
    process forked from it later does not take as its own."""
    import multiprocessing.util

    owner = os.getpid()

    def register(recorder):
        if os.getpid() == owner:
            # a negative priority: after multiprocessing joined this child's own children, whose records it takes
            multiprocessing.util.Finalize(None, record_child, args=(recorder, folder), exitpriority=-10)

    multiprocessing.util.register_after_fork(recorder, register)


def record_then_end(recorder, folder: str):
    """A SIGTERM handler for a spawned child (a pool's workers end by it: `with Pool() as pool:`
    terminates them, running no exit handler): its record first, then the end the signal brings.
    Arriving while the exit handler writes the record, it lets that write finish first. (A Python
    handler runs once the main thread runs Python again: a worker inside a long C call ends then.)"""

    owner = os.getpid()

    def handler(number, frame):
        if os.getpid() != owner:  # a child forked from it: its record is its parent's, not its own
            _end_by(number)
            return
        if _recording["started"] and not _recording["done"]:
            _recording["signal"] = number  # the exit's write ends it, then the signal
            return
        if not _recording["started"]:
            record_child(recorder, folder)
        _end_by(number)

    return handler


def _end_by(number: int) -> None:
    import signal

    signal.signal(number, signal.SIG_DFL)
    os.kill(os.getpid(), number)


def collect_children(recorder) -> None:
    """Add what the spawned children that have ended recorded to `recorder`, when the report is
    made (the folder goes then: a child still running after it records nothing): the report of a
    run covers its processes, as torchrun's rank 0 covers its own."""
    if not _records:
        return
    folder = _records.pop()
    recorded = 0
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else ():
        if not (name.startswith("child-") and name.endswith(".json")):  # a write a signal cut short
            continue
        try:
            with open(os.path.join(folder, name), encoding="utf-8") as handle:
                data = json.load(handle)
        except (OSError, ValueError):
            continue
        recorder.absorb(data)
        recorded += 1
    shutil.rmtree(folder, ignore_errors=True)
    # a child that left no record still ran: one a pool terminated before it could record anything
    # (it had not started work), one still running (one whose start failed after its preparation data
    # was made, as an unpicklable target fails, is counted too)
    recorder.children += max(0, _launched[0] - recorded)
    _launched[0] = 0
