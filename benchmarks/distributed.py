"""What recording a training step costs on two gloo ranks (DDP, FSDP2) beside one process.

    python benchmarks/distributed.py [steps]

Each leg trains the docs' MLP (8 -> 16 -> 8) and a wider one (512 -> 2048 -> 512) for
``steps`` SGD steps plainly and then inside a ``Recorder`` (ops, backward and its
collectives recorded), and prints the median step time of each and their ratio: one process
without torch.distributed, then DDP and FSDP2 on two ranks (rank 0's times; the ranks wait
for each other in every collective). The issue's bar: a distributed ratio no more than 0.1
above the one-process ratio of the same model.
"""

from __future__ import annotations

import datetime
import os
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent)]

import torch  # noqa: E402
from torch import nn  # noqa: E402

SIZES = {"docs MLP": (8, 16), "wide MLP": (512, 2048)}


def _model(width: int, hidden: int) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(width, hidden), nn.ReLU(), nn.Linear(hidden, width))


def _median_step(model: nn.Module, width: int, steps: int, record: bool) -> float:
    import torchgraphrec as tgr

    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(32, width)
    times = []
    with (tgr.Recorder(model, backward=True) if record else _Nothing()):
        for _ in range(steps):
            start = time.perf_counter()
            model(x).pow(2).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
            times.append(time.perf_counter() - start)
    return statistics.median(times[2:])


class _Nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *_: Any) -> None:
        return None


def _wrap(kind: str) -> Callable[[nn.Module], nn.Module]:
    if kind == "DDP":
        return nn.parallel.DistributedDataParallel
    from torch.distributed.fsdp import fully_shard

    def shard(model: nn.Module) -> nn.Module:
        fully_shard(model[0])
        fully_shard(model[2])
        return fully_shard(model)

    return shard


def _leg(wrap: Callable[[nn.Module], nn.Module], steps: int) -> dict[str, tuple[float, float]]:
    found = {}
    for name, (width, hidden) in SIZES.items():
        plain = _median_step(wrap(_model(width, hidden)), width, steps, False)
        recorded = _median_step(wrap(_model(width, hidden)), width, steps, True)
        found[name] = (plain, recorded)
    return found


def _print(label: str, found: dict[str, tuple[float, float]]) -> None:
    for name, (plain, recorded) in found.items():
        print(f"{label:<12} {name:<9} plain {plain * 1e3:7.3f} ms  recorded "
              f"{recorded * 1e3:7.3f} ms  ratio {recorded / plain:5.2f}")


def _rank(rank: int, port: int, steps: int) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)  # two ranks on two cores, as the one process runs
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=60))
    try:
        for kind in ("DDP", "FSDP2"):
            found = _leg(_wrap(kind), steps)
            if rank == 0:
                _print(f"{kind} 2 ranks", found)
    finally:
        dist.destroy_process_group()


def main() -> None:
    import torch.multiprocessing as mp

    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    torch.set_num_threads(1)
    _print("one process", _leg(lambda model: model, steps))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    mp.spawn(_rank, args=(port, steps), nprocs=2)


if __name__ == "__main__":
    main()
