"""Where probe records go: reducers per key for raw access, scalar rows for the data frame."""

from __future__ import annotations

import warnings
from typing import Any, NamedTuple, Optional, Sequence, Union

import torch

from torchgraphrec.probes.probe import Probe
from torchgraphrec.probes.reduce import Reducer, make_reducer
from torchgraphrec.probes.shards import local_shard

__all__ = ["Observation", "Store", "table_of", "FRAME_COLUMNS"]

FRAME_COLUMNS = ["epoch", "step", "module", "type", "call_index", "site", "path", "stat", "value"]


class Observation(NamedTuple):
    """Where and when a probe saw a tensor (a tuple: one is made per tensor a probe sees)."""

    epoch: int
    step: int
    module: str
    type: str
    call_index: int
    site: str
    path: str


class Store:
    """Everything probes kept, within an optional memory limit for non-scalar values."""

    def __init__(self, memory_limit: Optional[int] = None) -> None:
        self.memory_limit = memory_limit
        self.bytes = 0
        self.full = False
        self.reducers: dict[tuple[str, str], dict[tuple[str, str], Reducer]] = {}
        self.rows: list[tuple[Observation, str, torch.Tensor]] = []
        self.memory: dict[Any, torch.Tensor] = {}  # what remembering statistics remember
        self.numels: dict[int, int] = {}  # row -> its tensor's elements (reduce_ranks)
        self.rank: Optional[int] = None  # under torch.distributed: frame() has a rank column

    def add(self, probe: Probe, seen: Observation, tensor: torch.Tensor) -> None:
        """Apply each of ``probe``'s statistics to ``tensor`` (this rank's shard of a
        ``DTensor``) and keep the results."""
        tensor = local_shard(tensor)
        for keeper in probe.keepers:
            key = (seen.module, seen.call_index, seen.site, seen.path, keeper.name)
            value = keeper(key, tensor, self.memory)
            if value.dim() == 0 and probe.reduce == "all":  # a reduction is a memory choice
                self.numels[len(self.rows)] = tensor.numel()
                self.rows.append((seen, keeper.name, value.detach()))
            elif not self._room_for(value):
                continue
            slots = self.reducers.setdefault((seen.module, seen.site), {})
            slot = slots.get((seen.path, keeper.name))
            if slot is None:
                slot = slots[(seen.path, keeper.name)] = make_reducer(probe.reduce)
            slot.add(value.detach())

    def _room_for(self, value: torch.Tensor) -> bool:
        if self.memory_limit is None:
            return True
        size = value.element_size() * value.numel()
        if self.bytes + size > self.memory_limit:
            if not self.full:
                warnings.warn(f"torchgraphrec: probes reached their memory limit of "
                              f"{self.memory_limit:,} bytes; whole tensors are no longer kept "
                              "(scalar statistics still are)", stacklevel=2)
                self.full = True
            return False
        self.bytes += size
        return True

    def get(self, module: str, site: str) -> Any:
        """What was kept for ``module`` at ``site``: see ``Recorder.__getitem__``."""
        slots = self.reducers.get((module, site))
        if not slots:
            known = sorted({f"{m!r}, {s!r}" for m, s in self.reducers})
            raise KeyError(f"nothing was recorded for ({module!r}, {site!r}); recorded: "
                           f"{known[:10]}")
        results = {key: reducer.result() for key, reducer in slots.items()}
        stats = list(dict.fromkeys(stat for _, stat in slots))
        if isinstance(next(iter(results.values())), list):
            calls = max(len(values) for values in results.values())
            return [_simplify({key: values[i] for key, values in results.items()
                               if i < len(values)}, stats) for i in range(calls)]
        return _simplify(results, stats)

    def frame(self) -> Any:
        """The scalar records as a tidy pandas DataFrame (one row per record and statistic)."""
        import pandas

        if not self.rows:
            table = pandas.DataFrame(columns=FRAME_COLUMNS)
        else:
            values = torch.stack([local_shard(value).to("cpu", torch.float64)
                                  for _, _, value in self.rows])
            records = [(*seen, stat) for seen, stat, _ in self.rows]
            table = pandas.DataFrame(records, columns=FRAME_COLUMNS[:-1])
            table["value"] = values.tolist()
        if self.rank is not None:
            table.insert(0, "rank", self.rank)
        return table


def _simplify(entry: dict[tuple[str, str], Any], stats: list[str]) -> Any:
    """Drop the path level for a single unnamed tensor, and the stat level where the key
    keeps one statistic (a stat kept for some calls only, past a memory limit, is left out
    of the others)."""
    paths = list(dict.fromkeys(path for path, _ in entry))

    def by_stat(path: str) -> Any:
        if len(stats) == 1:
            return entry[(path, stats[0])]
        return {s: entry[(path, s)] for s in stats if (path, s) in entry}
    if paths == [""]:
        return by_stat("")
    return {path: by_stat(path) for path in paths}


def table_of(store: Store, by: Optional[Union[str, Sequence[str]]],
             agg: Sequence[str]) -> Any:
    """The store's tidy frame, or with ``by`` the values grouped by ``by`` plus module,
    site, path and stat, with ``agg`` of each group (monitorch's per-epoch aggregation)."""
    table = store.frame()
    if by is None:
        return table
    keys = ([by] if isinstance(by, str) else list(by)) + ["module", "site", "path", "stat"]
    if "rank" in table.columns and "rank" not in keys:
        keys.insert(0, "rank")
    return table.groupby(keys, sort=True)["value"].agg(list(agg)).reset_index()
