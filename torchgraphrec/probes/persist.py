"""Saving probe records to a folder and loading them back: a JSON index, kept tensors by torch.save."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import networkx as nx
import torch
from torch.utils._pytree import tree_map

from torchgraphrec.graph import from_json, to_json
from torchgraphrec.probes.reduce import Reducer
from torchgraphrec.probes.stats import holds_data
from torchgraphrec.probes.store import FRAME_COLUMNS, Observation, SlotKey, Store, table_of
from torchgraphrec.files import write_atomic

__all__ = ["save", "load", "Records"]

_FORMAT = "torchgraphrec.probes"
_SEP = "\x1f"


class _Kept(Reducer):
    """A reducer whose result was saved."""

    def __init__(self, value: Any) -> None:
        super().__init__()
        self.value = value

    def result(self) -> Any:
        return self.value


class Records:
    """Probe records loaded from disk: the same :meth:`frame` and ``[qualname, site]`` as a
    :class:`~torchgraphrec.Recorder`, and its graph."""

    def __init__(self, graph: nx.DiGraph, store: Store) -> None:
        self.graph, self.store = graph, store

    def __getitem__(self, key: tuple[str, str]) -> Any:
        return self.store.get(*key)

    def frame(self, by: Optional[Union[str, Sequence[str]]] = None,
              agg: Sequence[str] = ("mean", "std", "min", "max")) -> Any:
        return table_of(self.store, by, agg)


def save(store: Store, graph: nx.DiGraph, folder: Union[str, Path]) -> Path:
    """Write ``index.json`` (rows and the recording's graph) and ``kept.pt`` into ``folder``."""
    target = Path(folder)
    target.mkdir(parents=True, exist_ok=True)
    kept = {f"{module}{_SEP}{site}": {f"{path}{_SEP}{stat}{_SEP}{number}":
                                       tree_map(_savable, _in_call_order(store, module, site,
                                                                         reducer.result()))
                                       for (path, stat, number), reducer in slots.items()}
            for (module, site), slots in store.reducers.items()}
    rows = [[*seen, stat, _number(value)]
            for (seen, stat, _), value in zip(store.rows, store.floats())]
    # a gradient site whose calls all went without one keeps its place, a None per call
    gradless = {f"{module}{_SEP}{site}": len(calls)
                for (module, site), calls in store.positions.items()
                if calls and not store.reducers.get((module, site))}
    index = {"format": _FORMAT, "version": 1, "columns": FRAME_COLUMNS, "rows": rows,
             "gradless": gradless, "graph": json.loads(to_json(graph))}
    buffer = __import__("io").BytesIO()
    torch.save(kept, buffer)
    write_atomic(target / "kept.pt", buffer.getvalue())
    write_atomic(target / "index.json", json.dumps(index).encode())
    return target


def _in_call_order(store: Store, module: str, site: str, result: Any) -> Any:
    """A reducer's ``result``, the values of ``reduce="all"`` in the order of their calls
    (which the loaded records keep)."""
    return store.in_call_order(module, site, result) if isinstance(result, list) else result


def _savable(value: Any) -> Any:
    """``value``, but a tensor without data (a ``FakeTensor``, which cannot be pickled) as a
    meta tensor of its shape and dtype."""
    if isinstance(value, torch.Tensor) and not holds_data(value):
        return torch.empty(value.shape, dtype=value.dtype, device="meta")
    return value


def load(folder: Union[str, Path]) -> Records:
    """The records saved by ``Recorder.save`` (tensors are read with ``weights_only``)."""
    source = Path(folder)
    index = json.loads((source / "index.json").read_text(encoding="utf-8"))
    if index.get("format") != _FORMAT:
        raise ValueError(f"{source}: not saved probe records (no {_FORMAT!r} index.json)")
    store = Store()
    for *fields, stat, value in index["rows"]:
        store.rows.append((Observation(*fields), stat,
                           torch.tensor(float(value), dtype=torch.float64)))
    kept = torch.load(source / "kept.pt", weights_only=True)
    for key, slots in kept.items():
        module, site = key.split(_SEP)
        store.reducers[(module, site)] = {_slot_key(name): _Kept(value)
                                          for name, value in slots.items()}
    for key, calls in index.get("gradless", {}).items():
        module, site = key.split(_SEP)
        store.positions[(module, site)] = {((0, 0, call), 0): call for call in range(calls)}
    return Records(from_json(json.dumps(index["graph"])), store)


def _number(value: float) -> Union[float, str]:
    """``value`` as strict JSON holds it: ``nan`` and the infinities (a first cosine, the
    std of one element) as the strings ``float()`` reads back."""
    return value if math.isfinite(value) else str(value)


def _slot_key(name: str) -> SlotKey:
    """A saved slot's key; files saved before probes were numbered have no number."""
    path, stat, *number = name.split(_SEP)
    return path, stat, int(number[0]) if number else 0
