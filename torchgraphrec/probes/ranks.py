"""Statistics reduced over ranks: ``Recorder(reduce_ranks=True)``, one collective per step()."""

from __future__ import annotations

import math
from typing import Any, Optional

from torchgraphrec.probes.store import Observation, Store

__all__ = ["REDUCIBLE", "SUFFIX", "combine", "reduce_over_ranks"]

#: The statistics reduced over ranks: the sum-based ones exactly, and the extremes.
REDUCIBLE = ("mean", "rms", "l2", "min", "max")
#: What a reduced statistic's name ends with in ``frame()`` (``"l2@ranks"``).
SUFFIX = "@ranks"

Part = tuple[float, int]  # (a rank's value, its shard's element count)


def combine(stat: str, parts: list[Part]) -> float:
    """One statistic of the ranks' shards taken together, from each shard's value and size.

    >>> combine("l2", [(3.0, 1), (4.0, 1)]), combine("mean", [(1.0, 1), (4.0, 3)])
    (5.0, 3.25)
    >>> combine("rms", [(1.0, 2), (1.0, 2)]), combine("max", [(1.0, 2), (7.0, 1)])
    (1.0, 7.0)
    """
    if stat == "l2":
        return math.sqrt(sum(value * value for value, _ in parts))
    if stat == "min":
        return min(value for value, _ in parts)
    if stat == "max":
        return max(value for value, _ in parts)
    total = sum(size for _, size in parts) or 1
    if stat == "mean":
        return sum(value * size for value, size in parts) / total
    return math.sqrt(sum(value * value * size for value, size in parts) / total)


def _local(store: Store, start: int) -> dict[tuple, Part]:
    found = {}
    for index in range(start, len(store.rows)):
        seen, stat, value = store.rows[index]
        if stat in REDUCIBLE and index in store.numels:
            found[(tuple(vars(seen).values()), stat)] = (float(value), store.numels[index])
    return found


def reduce_over_ranks(store: Store, start: int, group: Optional[Any] = None) -> int:
    """Add, for the scalar rows from ``start`` on, the statistics of all ranks' tensors
    together (named ``stat@ranks``), with one ``all_gather_object`` every rank of ``group``
    makes; returns where the next step starts. A key some rank lacks is reduced over the
    ranks that have it."""
    import torch
    import torch.distributed as dist

    mine = _local(store, start)
    everyone: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(everyone, mine, group=group)
    keys = list(dict.fromkeys(key for found in everyone for key in found))
    for fields, stat in keys:
        parts = [found[(fields, stat)] for found in everyone if (fields, stat) in found]
        value = combine(stat, parts)
        store.rows.append((Observation(*fields), stat + SUFFIX,
                           torch.tensor(value, dtype=torch.float64)))
    return len(store.rows)
