"""Where probe records go: reducers per key for raw access, scalar rows for the data frame."""

from __future__ import annotations

import math
from typing import Any, NamedTuple, Optional, Sequence, Union

import torch

from torchgraphrec._torch import functorch_disabled, functorch_unwrapped
from torchgraphrec.errors import warn
from torchgraphrec.probes.probe import Probe
from torchgraphrec.probes.reduce import OTHER_SHAPE, Entries, Reducer, Reduction, make_reducer, \
    nbytes_of
from torchgraphrec.probes.stats import Keeper, holds_data, strided, undefined
from torchgraphrec.probes.shards import local_shard

__all__ = ["Observation", "SlotKey", "Store", "table_of", "FRAME_COLUMNS"]

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


#: A kept value's key within its ``(module, site)``: path, statistic, and the number of
#: the probe that keeps it (probes that overlap keep apart).
SlotKey = tuple[str, str, int]


class Store:
    """Everything probes kept, within an optional memory limit for non-scalar values.

    ``memory_limit`` bounds the bytes of non-scalar values held: kept tensors, the values
    reducers hold, and the copies ``cosine`` remembers. Past it, a new tensor is refused
    (``cosine`` answers ``nan`` for a record it cannot remember) but scalar statistics are
    kept, and a reducer that already holds a value keeps updating it in the same memory."""

    def __init__(self, memory_limit: Optional[int] = None) -> None:
        self.memory_limit = memory_limit
        self.bytes = 0
        self.full = False
        self.warned_shape = False  # about a value left out of a fold for its shape
        self.reducers: dict[tuple[str, str], dict[SlotKey, Reducer]] = {}
        self.rows: list[tuple[Observation, str, torch.Tensor]] = []
        self.memory: dict[Any, torch.Tensor] = {}  # what remembering statistics remember
        self.numels: dict[int, int] = {}  # row -> its tensor's elements (reduce_ranks)
        self.rank: Optional[int] = None  # under torch.distributed: frame() has a rank column
        #: each (module, site)'s calls, ``((epoch, step, call_index), repeat)``, in the order
        #: values came: the position of a ``reduce="all"`` value in its ``Entries``
        self.positions: dict[tuple[str, str], dict[tuple[tuple[int, int, int], int], int]] = {}
        self._numbers: dict[int, int] = {}  # id(probe) -> its number
        self._probes: list[Probe] = []  # what the numbers belong to (keeping their ids)
        self._floats: list[float] = []  # the rows' values as floats, as far as converted

    def number(self, probes: Sequence[Probe]) -> None:
        """Number ``probes`` in this order: where several keep values for one
        ``(module, site)``, :meth:`get` answers with the first one's."""
        for probe in probes:
            self._number_of(probe)

    def _number_of(self, probe: Probe) -> int:
        found = self._numbers.get(id(probe))
        if found is None:
            found = self._numbers[id(probe)] = len(self._probes)
            self._probes.append(probe)
        return found

    def add(self, probe: Probe, seen: Observation, tensor: torch.Tensor,
            position: Optional[int] = None) -> None:
        """Apply each of ``probe``'s statistics to ``tensor`` (this rank's shard of a
        ``DTensor``) and keep the results. ``position`` is the call's within its forward
        (what ``cosine`` compares across forwards; its call index where not given)."""
        inner = functorch_unwrapped(tensor)
        if inner:  # inside a torch.func transform: the value its wrapper holds (vmap's batch)
            with functorch_disabled():
                self._add(probe, seen, local_shard(inner[-1]), position)
        else:
            self._add(probe, seen, local_shard(tensor), position)

    def _add(self, probe: Probe, seen: Observation, tensor: torch.Tensor,
             position: Optional[int]) -> None:
        """:meth:`add` for a plain tensor (a shard, or what a transform's wrapper holds)."""
        number = self._number_of(probe)
        slots = self.reducers.setdefault((seen.module, seen.site), {})
        at = seen.call_index if position is None else position
        dense: Optional[torch.Tensor] = None  # made once, for the first statistic needing it
        for keeper in probe.keepers:
            key = (number, seen.module, at, seen.site, seen.path, keeper.name)
            if keeper.takes_any_layout:
                given = tensor
            else:  # a sparse gradient's statistics count its zeros too
                dense = given = strided(tensor) if dense is None else dense
            value = self._apply(keeper, key, given)
            slot_key = (seen.path, keeper.name, number)
            if probe.reduce == "all":
                value = undefined() if value is None else value.detach()
                self._keep(slots, slot_key, seen, value, tensor.numel())
            else:
                self._fold(slots, slot_key, probe.reduce, None if value is None
                           else value.detach(), seen)

    def reserve(self, module: str, site: str, call: tuple[int, int, int]) -> None:
        """Give a call, ``(epoch, step, call_index)``, its position in ``rec[module,
        site]`` before any value comes (a gradient may never come): one entry per call."""
        positions = self.positions.setdefault((module, site), {})
        positions.setdefault((call, 0), len(positions))

    def _apply(self, keeper: Keeper, key: Any, tensor: torch.Tensor) -> Optional[torch.Tensor]:
        """``keeper``'s value of ``tensor``, charging what it remembers under ``key``
        (``cosine``'s copy) as any tensor held; a copy with no room is forgotten."""
        held = nbytes_of(self.memory.get(key))
        value = keeper.apply(key, tensor, self.memory)
        grown = nbytes_of(self.memory.get(key)) - held
        if grown <= 0:
            self.bytes += grown
        elif not self._room_for(grown):
            del self.memory[key]
            self.bytes -= held  # the copy it replaced is gone too
        return value

    def _keep(self, slots: dict[SlotKey, Reducer], slot_key: SlotKey, seen: Observation,
              value: torch.Tensor, numel: int) -> None:
        """Keep one call's ``value`` (``reduce="all"``): a scalar as a row too, a tensor
        only where there is room (the call keeps its position: ``None`` there)."""
        slot = slots.get(slot_key)
        position = self._position(seen, slot)
        if value.dim() == 0:  # a reduction is a memory choice
            self.numels[len(self.rows)] = numel
            self.rows.append((seen, slot_key[1], value))
        elif not self._room_for(nbytes_of(value)):
            return
        if slot is None:
            slot = slots[slot_key] = Entries()
        slot.put(position, value)  # type: ignore[attr-defined]

    def _position(self, seen: Observation, slot: Optional[Reducer]) -> int:
        """Where the value ``seen`` goes in ``slot``: its call's position, shared by every
        key of the ``(module, site)`` (a call seen again, a second backward, takes a new
        one)."""
        positions = self.positions.setdefault((seen.module, seen.site), {})
        call, repeat = (seen.epoch, seen.step, seen.call_index), 0
        while True:
            position = positions.setdefault((call, repeat), len(positions))
            if slot is None or not slot.holds(position):  # type: ignore[attr-defined]
                return position
            repeat += 1

    def _fold(self, slots: dict[SlotKey, Reducer], slot_key: SlotKey, reduce: Reduction,
              value: Optional[torch.Tensor], seen: Observation) -> None:
        """Fold ``value`` into its reducer, charging what the reducer holds: a new one
        holding a tensor needs room; one already held keeps updating in its memory, and
        where it grows (a custom fold that concatenates), the growth needs room too, else
        the reducer is let go as any whole tensor past the limit. A value left out for its
        shape is warned about, once."""
        slot = slots.get(slot_key)
        fresh = slot is None
        if slot is None:
            slot = make_reducer(reduce)
        held = slot.nbytes()
        if slot.add(value) == OTHER_SHAPE:
            self._warn_shape(seen, slot_key[1], reduce, value, slot)
        grown = slot.nbytes() - held if value is not None and value.dim() else 0
        if grown <= 0:  # scalars are always kept; a fresh reducer's is then 0
            self.bytes += grown
            slots[slot_key] = slot
        elif self._room_for(grown):
            slots[slot_key] = slot
        elif not fresh:
            del slots[slot_key]
            self.bytes -= held

    def _warn_shape(self, seen: Observation, stat: str, reduce: Reduction,
                    value: Any, slot: Reducer) -> None:
        if self.warned_shape:
            return
        self.warned_shape = True
        warn(f"torchgraphrec: reduce={reduce!r} of {stat!r} at ({seen.module!r}, "
             f"{seen.site!r}) got shape {tuple(value.shape)} where its record holds "
             f"{tuple(slot.shape())} (a smaller last batch?): it folds elementwise, so values "
             "of another shape are left out (counted as 'other_shape' by reduce='running'); "
             "reduce='all' or 'last' keeps them")

    def _room_for(self, size: int) -> bool:
        """Whether ``size`` more bytes fit in the limit; they are then counted."""
        if self.memory_limit is not None and self.bytes + size > self.memory_limit:
            if not self.full:
                warn(f"torchgraphrec: probes reached their memory limit of "
                     f"{self.memory_limit:,} bytes; whole tensors are no longer kept "
                     "(scalar statistics still are)")
                self.full = True
            return False
        self.bytes += size
        return True

    def get(self, module: str, site: str) -> Any:
        """What was kept for ``module`` at ``site``: see ``Recorder.__getitem__``."""
        slots = self.reducers.get((module, site))
        if not slots:
            reserved = self.positions.get((module, site))
            if reserved:  # calls kept in place whose gradient never came: None each
                return [None] * len(reserved)
            known = sorted({f"{m!r}, {s!r}" for (m, s), kept in self.reducers.items() if kept})
            raise KeyError(f"nothing was recorded for ({module!r}, {site!r}); recorded: "
                           f"{known[:10]}")
        results = _first_probe_wins(slots)
        stats = list(dict.fromkeys(stat for _, stat in results))
        if isinstance(next(iter(results.values())), list):
            results = {key: self.in_call_order(module, site, values)
                       for key, values in results.items()}
            calls = max(len(values) for values in results.values())
            entries = ({key: values[i] for key, values in results.items()
                        if i < len(values) and values[i] is not None} for i in range(calls))
            # a call with nothing kept (no gradient reached it) keeps its place: None
            return [_simplify(entry, stats) if entry else None for entry in entries]
        return _simplify(results, stats)

    def in_call_order(self, module: str, site: str, values: list) -> list:
        """The values ``reduce="all"`` kept for ``(module, site)`` (by position: in the
        order they came) in the order of their calls: a backward site's come last call
        first. Loaded records are in call order already."""
        positions = self.positions.get((module, site))
        if not positions:
            return values
        return [values[position] if position < len(values) else None
                for _, position in sorted(positions.items())]

    def floats(self) -> list[float]:
        """Each row's value as a float (float64, this rank's shard of a ``DTensor``), in the
        rows' order. Rows are only ever appended, so each is converted once: a long run's
        steps, which read them all again, pay only for the new ones.

        >>> store = Store()
        >>> store.rows.append((None, "rms", torch.tensor(0.5, dtype=torch.float16)))
        >>> store.floats()
        [0.5]
        >>> store.rows.append((None, "rms", torch.tensor(0.5, device="meta")))
        >>> store.floats()  # a value without data (meta, or a FakeTensor) reads as NaN
        [0.5, nan]
        """
        done = len(self._floats)
        if done < len(self.rows):
            values = [local_shard(value) for _, _, value in self.rows[done:]]
            # one copy per dtype and device, not one per row (stacking mixed dtypes would
            # promote an int64 count to a float32 statistic's type, and round it)
            alike: dict[tuple[Any, Any], list[int]] = {}
            converted = [math.nan] * len(values)  # where a value has no data to read
            for position, value in enumerate(values):
                if holds_data(value):
                    alike.setdefault((value.dtype, value.device), []).append(position)
            for positions in alike.values():
                stacked = torch.stack([values[p] for p in positions]).to("cpu", torch.float64)
                for position, number in zip(positions, stacked.tolist()):
                    converted[position] = number
            self._floats += converted
        return self._floats

    def frame(self) -> Any:
        """The scalar records as a tidy pandas DataFrame (one row per record and statistic)."""
        import pandas

        if not self.rows:
            table = pandas.DataFrame(columns=FRAME_COLUMNS)
        else:
            records = [(*seen, stat) for seen, stat, _ in self.rows]
            table = pandas.DataFrame(records, columns=FRAME_COLUMNS[:-1])
            table["value"] = self.floats()
        if self.rank is not None:
            table.insert(0, "rank", self.rank)
        return table


def _first_probe_wins(slots: dict[SlotKey, Reducer]) -> dict[tuple[str, str], Any]:
    """The results by ``(path, stat)`` of the first probe (by number) that kept something
    here, with those of later probes that reduce alike and keep other statistics: a later
    probe's ``rms`` never mixes its calls into the first one's."""
    first = min(number for _, _, number in slots)
    listed = isinstance(next(r for (_, _, n), r in slots.items() if n == first).result(), list)
    results: dict[tuple[str, str], Any] = {}
    for (path, stat, _), reducer in sorted(slots.items(), key=lambda item: item[0][2]):
        result = reducer.result()
        if isinstance(result, list) == listed:
            results.setdefault((path, stat), result)
    return results


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
    functions = [agg] if isinstance(agg, str) else list(agg)
    return table.groupby(keys, sort=True)["value"].agg(functions).reset_index()
