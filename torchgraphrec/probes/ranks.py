"""Statistics reduced over ranks: ``Recorder(reduce_ranks=True)``, one collective per step()."""

from __future__ import annotations

import hashlib
import math
from typing import Any, Optional

from torchgraphrec.errors import warn
from torchgraphrec.probes.store import Observation, Store

__all__ = ["REDUCIBLE", "SUFFIX", "combine", "fingerprint", "capacity", "pack",
           "reduce_over_ranks"]

#: The statistics reduced over ranks: the sum-based ones exactly, and the extremes.
REDUCIBLE = ("mean", "rms", "l2", "min", "max")
#: What a reduced statistic's name ends with in ``frame()`` (``"l2@ranks"``).
SUFFIX = "@ranks"

Part = tuple[float, int]  # (a rank's value, its shard's element count)
_HEADER = 2  # a packet's row count and fingerprint, before its rows


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
            found[(tuple(seen), stat)] = (float(value), store.numels[index])
    return found


def fingerprint(keys: list[tuple]) -> int:
    """A 48-bit digest of the rows' keys, in order (exact in a float64; the same in every
    process, as Python's own ``hash`` of a string is not).

    >>> fingerprint([(("m",), "l2")]) == fingerprint([(("m",), "l2")]) != fingerprint([])
    True
    """
    return int.from_bytes(hashlib.blake2b(repr(keys).encode(), digest_size=6).digest(), "big")


def capacity(rows: int) -> int:
    """The rows a packet holds: a power of two from 8, so that ranks whose row counts differ
    a little still send packets of one size, and learn that from the headers.

    >>> capacity(0), capacity(8), capacity(9)
    (8, 8, 16)
    """
    return max(8, 1 << max(0, rows - 1).bit_length())


def pack(found: dict[tuple, Part]) -> Any:
    """``found`` as one float64 tensor: the row count and :func:`fingerprint` of the keys,
    then each row's value and element count (both exact in a float64), zeros after them."""
    import torch

    packet = torch.zeros(_HEADER + 2 * capacity(len(found)), dtype=torch.float64)
    packet[0], packet[1] = len(found), fingerprint(list(found))
    if found:
        packet[_HEADER:_HEADER + 2 * len(found)] = torch.tensor(
            [number for part in found.values() for number in part], dtype=torch.float64)
    return packet


def reduce_over_ranks(store: Store, start: int, group: Optional[Any] = None) -> int:
    """Add, for the scalar rows from ``start`` on, the statistics of all ranks' tensors
    together (named ``stat@ranks``), with one ``all_gather`` of a float64 tensor every rank
    of ``group`` makes; returns where the next step starts.

    Every rank records the same probes on the same modules, so every rank has the same rows
    in the same order, and the packet's size follows from their number (:func:`capacity`).
    Where a rank's rows differ (the header's count and fingerprint tell), nothing is added
    and a warning names the ranks; row counts that differ across a power of two make packets
    of two sizes, which the backend fails as any mismatched collective (gloo aborts the
    process: one collective per step cannot first agree on a size)."""
    import torch
    import torch.distributed as dist

    mine = _local(store, start)
    packet = pack(mine)
    everyone = [torch.empty_like(packet) for _ in range(dist.get_world_size(group))]
    dist.all_gather(everyone, packet, group=group)
    differ = [rank for rank, found in enumerate(everyone) if not torch.equal(found[:_HEADER],
                                                                            packet[:_HEADER])]
    if differ:
        warn(f"torchgraphrec: reduce_ranks: the probe rows of ranks {differ} differ from this "
             "rank's (another module call or probe); this step's statistics are not reduced "
             "over ranks")
        return len(store.rows)
    values = torch.stack(everyone)[:, _HEADER:_HEADER + 2 * len(mine)].tolist()
    for position, (fields, stat) in enumerate(mine):
        parts = [(found[2 * position], int(found[2 * position + 1])) for found in values]
        store.rows.append((Observation(*fields), stat + SUFFIX,
                           torch.tensor(combine(stat, parts), dtype=torch.float64)))
    return len(store.rows)
