"""Children started with the spawn and forkserver methods are retargeted like their parent, even
when the forkserver was started before retargeting was turned on."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

#: Application code that only works where `cuda` means the target: workers run it.
DATASET = """\
import torch


class Probe(torch.utils.data.Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, index):
        device = "cuda" if torch.cuda.is_available() else "cpu"
        value = torch.full((1,), float(index), device=device) * 2
        return {"device": device, "placed": value.device.type, "value": value.cpu(),
                "count": torch.cuda.device_count()}
"""

RUN_APP = """\
import sys
import torch
from probe import Probe


def main(method):
    loader = torch.utils.data.DataLoader(Probe(), batch_size=2, num_workers=2, multiprocessing_context=method)
    for batch in loader:
        print(method, batch["device"], batch["placed"], batch["value"].flatten().tolist(), batch["count"].tolist())


if __name__ == "__main__":
    main(sys.argv[1])
"""

SET_START_METHOD_APP = """\
import multiprocessing as mp
import torch
from probe import Probe


def work(index):
    return Probe()[index]["placed"]


if __name__ == "__main__":
    mp.set_start_method("forkserver")
    with mp.Pool(2) as pool:
        print("pool", pool.map(work, range(4)))
    loader = torch.utils.data.DataLoader(Probe(), batch_size=4, num_workers=2)
    print("loader", next(iter(loader))["placed"])
"""

#: The forkserver starts (and preloads this script, unretargeted) before `use()` turns retargeting on
#: (the first pass; `use()` then runs the script again, the forkserver already started).
STARTED_BEFORE_APP = """\
import multiprocessing as mp
import sys


def main():
    context = mp.get_context("forkserver")
    context.set_forkserver_preload(["__main__", "probe"])
    first = context.Process(target=print, args=("forkserver running",))
    first.start()
    first.join()
    import torchport

    torchport.use("cpu", precision="keep")
    import torch
    from probe import Probe

    loader = torch.utils.data.DataLoader(Probe(), batch_size=2, num_workers=2, multiprocessing_context=context)
    for batch in loader:
        print("late", batch["device"], batch["placed"], batch["value"].flatten().tolist())


if __name__ == "__main__":
    main()
"""


def _run(tmp_path, source: str, command: list[str]) -> subprocess.CompletedProcess:
    (tmp_path / "probe.py").write_text(DATASET)
    (tmp_path / "app.py").write_text(textwrap.dedent(source))
    environment = {**os.environ, "TORCHPORT_QUIET": "1"}
    return subprocess.run([sys.executable, *command], capture_output=True, text=True, cwd=tmp_path,
                          env=environment, timeout=600)


@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_dataloader_workers_started_by_spawn_or_forkserver_are_retargeted(tmp_path, method):
    result = _run(tmp_path, RUN_APP, ["-m", "torchport", "run", "--device", "cpu", "app.py", method])
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"{method} ['cuda', 'cuda'] ['cpu', 'cpu'] [0.0, 2.0] [1, 1]",
        f"{method} ['cuda', 'cuda'] ['cpu', 'cpu'] [4.0, 6.0] [1, 1]",
    ]


def test_a_forkserver_default_start_method_covers_pools_and_loaders(tmp_path):
    result = _run(tmp_path, SET_START_METHOD_APP, ["-m", "torchport", "run", "--device", "cpu", "app.py"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["pool ['cpu', 'cpu', 'cpu', 'cpu']",
                                          "loader ['cpu', 'cpu', 'cpu', 'cpu']"]


def test_children_of_a_forkserver_started_before_retargeting_are_retargeted(tmp_path):
    result = _run(tmp_path, STARTED_BEFORE_APP, ["app.py"])
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    # use() in main() runs the script again from its start (what ran above the call runs twice)
    assert lines[:2] == ["forkserver running", "forkserver running"]
    assert lines[2:] == ["late ['cuda', 'cuda'] ['cpu', 'cpu'] [0.0, 2.0]",
                         "late ['cuda', 'cuda'] ['cpu', 'cpu'] [4.0, 6.0]"]


#: Objects of the script's own classes coming back from spawned workers are pickled as
#: `__mp_main__.Class`, which the parent resolves to the script itself.
SCRIPT_CLASSES_APP = """\
import dataclasses
import torch
import torch.multiprocessing as mp


@dataclasses.dataclass
class EvalResult:
    shard: int
    loss: float


class Batch:
    def __init__(self, items):
        self.x = torch.stack(items)


def evaluate(shard):
    return EvalResult(shard, torch.ones(4, device="cuda").sum().item())


def collate(items):
    return Batch(items)


if __name__ == "__main__":
    mp.set_start_method("spawn", force=True)
    with mp.Pool(2) as pool:
        print("pool", [(result.shard, result.loss) for result in pool.map(evaluate, range(2))])
    data = [torch.full((2,), float(index)) for index in range(4)]
    loader = torch.utils.data.DataLoader(data, batch_size=2, num_workers=2, collate_fn=collate)
    print("loader", [type(batch).__name__ + str(batch.x.sum().item()) for batch in loader])
"""


def test_objects_of_the_scripts_classes_come_back_from_spawned_workers(tmp_path):
    result = _run(tmp_path, SCRIPT_CLASSES_APP, ["-m", "torchport", "run", "--device", "cpu", "app.py"])
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines() == ["pool [(0, 4.0), (1, 4.0)]", "loader ['Batch2.0', 'Batch10.0']"]


#: The parent makes the device; children get it through multiprocessing's pickling.
DEVICE_TO_CHILD_APP = """\
import sys
import multiprocessing as mp
import torch


class Holder(torch.utils.data.Dataset):
    def __init__(self, device):
        self.device = device

    def __len__(self):
        return 2

    def __getitem__(self, index):
        return f"{self.device.type}:{self.device.index}:{self.device.type == 'cuda'}"


def child(device, queue):
    use_amp = device.type == "cuda"
    queue.put(f"{device.type}:{device.index}:{use_amp}:{torch.ones(1, device=device).is_cuda}")


if __name__ == "__main__":
    context = mp.get_context(sys.argv[1])
    device = torch.device("cuda", 0)
    queue = context.Queue()
    process = context.Process(target=child, args=(device, queue))
    process.start()
    print("process", queue.get(timeout=120))
    process.join()
    loader = torch.utils.data.DataLoader(Holder(device), batch_size=2, num_workers=1, multiprocessing_context=context)
    print("loader", next(iter(loader)))
"""


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_device_the_parent_made_from_a_cuda_name_reaches_a_child_as_cuda(tmp_path, method):
    result = _run(tmp_path, DEVICE_TO_CHILD_APP, ["-m", "torchport", "run", "--device", "cpu", "app.py", method])
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["process cuda:0:True:True", "loader ['cuda:0:True', 'cuda:0:True']"]


SPAWNED_WORKERS_APP = """\
import torch
import torch.multiprocessing as mp


def worker(rank):
    x = torch.ones(2, device="cuda") * rank
    y = x.cuda().sum()
    print(f"worker {rank} {y.item()} {x.is_cuda}", flush=True)  # one write: the ranks' lines do not interleave


if __name__ == "__main__":
    torch.cuda.is_available()
    mp.spawn(worker, nprocs=2)
"""


def test_the_report_covers_the_children_mp_spawn_started(tmp_path):
    # PyTorch's DDP tutorial starts its ranks with mp.spawn: the report held the parent's one usage
    import json

    result = _run(tmp_path, SPAWNED_WORKERS_APP,
                  ["-m", "torchport", "run", "--device", "cpu", "--report", "report.json", "app.py"])
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.splitlines()) == ["worker 0 0.0 True", "worker 1 2.0 True"]
    report = json.loads((tmp_path / "report.json").read_text())
    counts = {(entry["api"], int(entry["site"].rsplit(":", 1)[1])): entry["count"] for entry in report["redirected"]}
    assert counts[("device=", 6)] == 2 and counts[(".cuda()", 7)] == 2
    assert counts[("torch.cuda.is_available", 12)] == 1
    assert report["child_processes"] == 2


POOL_APP = """
import time
import multiprocessing as mp
import torch


def work(i):
    time.sleep(0.05)
    return torch.zeros(2, device="cuda").is_cuda


def forks_a_pool():
    # a spawned child whose own forked pool inherits what it recorded: not counted again
    torch.zeros(1, device="cuda")
    with mp.get_context("fork").Pool(2) as pool:
        print(sum(pool.map(abs, range(4))), flush=True)


if __name__ == "__main__":
    for _ in range(2):
        with mp.get_context("spawn").Pool(2) as pool:  # leaving the block terminates the workers
            print(sum(pool.map(work, range(6), chunksize=1)))
    child = mp.get_context("spawn").Process(target=forks_a_pool)
    child.start()
    child.join()
"""


def test_the_report_covers_the_workers_a_pool_block_terminates(tmp_path):
    # a pool's workers end by SIGTERM, which can cut the record they write at exit or come before it
    import json

    result = _run(tmp_path, POOL_APP, ["-m", "torchport", "run", "--device", "cpu", "--report", "report.json", "app.py"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["6", "6", "6"]
    report = json.loads((tmp_path / "report.json").read_text())
    counts = {(entry["api"], int(entry["site"].rsplit(":", 1)[1])): entry["count"] for entry in report["redirected"]}
    assert counts[("device=", 9)] == 12 and counts[("device=", 14)] == 1, counts
    assert report["child_processes"] == 5


PROCESS_APP = """
import sys
import torch
import torch.multiprocessing as mp


def child(rank, queue):
    x = torch.ones(3, device="cuda") * (rank + 1)
    queue.put((rank, x.is_cuda, x.sum().item()))


if __name__ == "__main__":
    context = mp.get_context(sys.argv[1])
    queue = context.Queue()
    processes = [context.Process(target=child, args=(rank, queue)) for rank in range(2)]
    for process in processes:
        process.start()
    print(sorted(queue.get() for _ in processes))
    for process in processes:
        process.join()
"""


def _reported(tmp_path, app: str, method: str) -> tuple[subprocess.CompletedProcess, dict]:
    """`torchport run --report` of `app` with the start method as its argument: (the run, its report)."""
    import json

    result = _run(tmp_path, app, ["-m", "torchport", "run", "--device", "cpu", "--report", "report.json", "app.py",
                                  method])
    assert result.returncode == 0, result.stderr
    return result, json.loads((tmp_path / "report.json").read_text())


@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_the_report_covers_process_children_of_either_start_method(tmp_path, method):
    # a forkserver's Process children leave by os._exit, running no exit handler
    result, report = _reported(tmp_path, PROCESS_APP, method)
    assert result.stdout.splitlines() == ["[(0, True, 3.0), (1, True, 6.0)]"]
    counts = {(entry["api"], int(entry["site"].rsplit(":", 1)[1])): entry["count"] for entry in report["redirected"]}
    assert counts[("device=", 8)] == 2 and report["child_processes"] == 2, (counts, report["child_processes"])


GRANDCHILD_APP = """
import sys, time
import torch
import multiprocessing as mp


def grandchild():
    time.sleep(0.5)
    torch.ones(3, device="cuda")


def child():
    torch.ones(3, device="cuda")
    mp.get_context("spawn").Process(target=grandchild).start()  # joined by multiprocessing at the child's exit


if __name__ == "__main__":
    process = mp.get_context(sys.argv[1]).Process(target=child)
    process.start()
    process.join()
"""


@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_a_childs_record_includes_the_children_it_left_running(tmp_path, method):
    _, report = _reported(tmp_path, GRANDCHILD_APP, method)
    lines = sorted(int(entry["site"].rsplit(":", 1)[1]) for entry in report["redirected"])
    assert lines == [9, 13] and report["child_processes"] == 2, (lines, report["child_processes"])
