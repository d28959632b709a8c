"""Draw the Distributed page's pictures from its examples, on two gloo ranks.

    python docs/distributed_pictures.py    # rewrites docs/_static/distributed-*.png

The page shows the example functions below as they are (``literalinclude``); each runs on
every rank, and rank 0's recording is drawn.
"""

from __future__ import annotations

import datetime
import os
import socket
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's, in every rank
import torchgraphrec as tgr  # noqa: E402

__all__ = ["ddp_example", "fsdp2_example", "tensor_parallel_example", "main"]

STATIC = Path(__file__).resolve().parent / "_static"


def ddp_example() -> tgr.Recorder:
    """DDP: every rank holds the whole model and records its own graph."""
    model = nn.parallel.DistributedDataParallel(
        nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    probes = [tgr.probe("output", keep=["l2", "rms"])]
    with tgr.Recorder(model, backward=True, probes=probes, reduce_ranks=True) as rec:
        model(torch.randn(4, 8)).sum().backward()  # each step's forward is one more call
        optimizer.step()
        optimizer.zero_grad()
        rec.step()  # every rank: one collective, for reduce_ranks
    return rec


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(8, 16), nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(self.fc1(x).relu())


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp, self.out = nn.Linear(8, 8), nn.Linear(8, 4)
        self.blocks = nn.ModuleList([Block(), Block()])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.inp(x)
        for block in self.blocks:
            x = block(x)
        return self.out(x)


def fsdp2_example() -> tgr.Recorder:
    """FSDP2: each block is a unit, the root another (it gathers ``inp`` and ``out``)."""
    from torch.distributed.fsdp import fully_shard

    model = Net()
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    with tgr.Recorder(model, backward=True) as rec:
        model(torch.randn(4, 8)).sum().backward()
    return rec


def tensor_parallel_example() -> tgr.Recorder:
    """Tensor parallel: the first Linear split by columns, the second by rows."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, \
        parallelize_module

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    model = parallelize_module(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8)),
                               mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    with tgr.Recorder(model, backward=True, flops=True, memory=True) as rec:
        model(torch.ones(4, 8)).sum().backward()
    return rec


#: Each example, and how its picture is drawn.
PICTURES = {"ddp": (ddp_example, {}), "fsdp2": (fsdp2_example, {}),
            "fsdp2-all-ops": (fsdp2_example, {"include_ops": "all"}),
            "tensor-parallel": (tensor_parallel_example, {"show_costs": True})}


def _rank(rank: int, port: int, folder: str) -> None:
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=60))
    try:
        for name, (example, options) in PICTURES.items():
            torch.manual_seed(0)
            rec = example()
            if rank == 0:
                tgr.Recording(rec.graph).render(Path(folder) / f"distributed-{name}.png",
                                                **options)
    finally:
        dist.destroy_process_group()


def main(folder: Path = STATIC) -> list[Path]:
    """Run the examples on two spawned ranks and write rank 0's drawings into ``folder``."""
    import torch.multiprocessing as mp

    folder.mkdir(parents=True, exist_ok=True)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    mp.start_processes(_rank, args=(port, str(folder)), nprocs=2, start_method="spawn")
    return [folder / f"distributed-{name}.png" for name in PICTURES]


if __name__ == "__main__":
    for path in main():
        print(path)
    sys.exit(0)
