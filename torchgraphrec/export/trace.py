"""The Chrome trace event format (Perfetto, chrome://tracing): one slice per module call and op."""

from __future__ import annotations

import json
from typing import Any, NamedTuple, Optional

import networkx as nx

from torchgraphrec.export.times import span
from torchgraphrec.graph import backward_passes

__all__ = ["to_trace", "TRACKS"]

#: The tracks (thread ids) of the forward and the backward; a slice whose times would put
#: it under another call than its parent, or out of its parent, on a track (it overlaps a
#: neighbour without nesting in it) goes to a further track of its own direction.
TRACKS = {"forward": 1, "backward": 2}

_TIMES = {"forward": ("t_start_ns", "t_end_ns"),
          "backward": ("t_backward_start_ns", "t_backward_end_ns")}
# Attributes that say where a node sits or when it ran: the event itself says that.
_HIDDEN = frozenset({"kind", "label", "parent", "depth", "seq", "inputs", "outputs",
                     "probe_series", "collapsed", "t_backward_spans_ns", *_TIMES["forward"],
                     *_TIMES["backward"]})


class _Slice(NamedTuple):
    start: int
    end: int
    depth: int
    seq: int
    node: str


def _name(attrs: dict) -> str:
    if attrs["kind"] == "op":
        return attrs["name"]
    title = f"{attrs['qualname']}: {attrs['type']}" if attrs["qualname"] else attrs["type"]
    return f"{title} #{attrs['call_index']}" if attrs["call_index"] else title


def _args(graph: nx.DiGraph, node: str) -> dict[str, Any]:
    """What the side panel shows: the node's id, shapes in and out for a call, then every
    attribute that is not placement or time (shapes, settings, costs, probe statistics)."""
    attrs = graph.nodes[node]
    found: dict[str, Any] = {"id": node}
    for side in ("inputs", "outputs"):
        if side in attrs:
            found[f"{side[:-1]}_shapes"] = [graph.nodes[n]["shape"] for n in attrs[side]
                                            if n in graph and "shape" in graph.nodes[n]]
    found.update((key, value) for key, value in sorted(attrs.items()) if key not in _HIDDEN)
    return found


def _slices(graph: nx.DiGraph, direction: str) -> list[_Slice]:
    """The calls and ops timed in ``direction``, in the order a trace viewer reads them:
    by start, the longer first (an enclosing call before what it holds), then outermost."""
    start, end = _TIMES[direction]
    found = []
    for node, attrs in graph.nodes(data=True):
        times = span(attrs, start, end) if attrs["kind"] in ("layer", "op") else None
        if times is None:  # an end before the start is no time: left out, as unrecorded
            continue
        # a slice per backward pass through it, the time between them left out
        pieces = backward_passes(attrs) if direction == "backward" else [times]
        found += [_Slice(first, last, attrs["depth"], attrs["seq"], node)
                  for first, last in pieces if first <= last]
    return sorted(found, key=lambda s: (s.start, -s.end, s.depth, s.seq))


def _parents(graph: nx.DiGraph, slices: list[_Slice]) -> dict[str, Optional[str]]:
    """Each slice's parent: the nearest call above its node (the graph's ``parent``
    relation) that has a slice too."""
    timed = {piece.node for piece in slices}
    found: dict[str, Optional[str]] = {}
    for piece in slices:
        up = graph.nodes[piece.node]["parent"]
        while up is not None and up not in timed:
            up = graph.nodes[up]["parent"]
        found[piece.node] = up
    return found


def _closes(open_: _Slice, piece: _Slice) -> bool:
    """Whether a viewer reading the track ends ``open_`` where ``piece`` starts. Perfetto
    reads a slice as closed at its start and open at its end: a call that ends at the
    instant another slice starts does not hold it; instants at one time stack."""
    if open_.end != piece.start:
        return open_.end < piece.start
    return not (open_.start == open_.end and piece.start == piece.end)


def _lanes(graph: nx.DiGraph, slices: list[_Slice]) -> list[int]:
    """A lane for each slice such that, read as a viewer nests a track, every slice sits
    directly under its parent, or under nothing: its parent's lane where the parent is
    the innermost slice open there and holds it, else the first lane with nothing open.
    Where times tie, the parent relation decides; only times that would put a slice under
    another call (or out of its parent) move it to a further lane."""
    parents = _parents(graph, slices)
    stacks: list[list[_Slice]] = []
    lanes = []
    for piece in slices:
        for stack in stacks:
            while stack and _closes(stack[-1], piece):
                stack.pop()
        index = _lane(stacks, piece, parents[piece.node])
        if index == len(stacks):
            stacks.append([])
        stacks[index].append(piece)
        lanes.append(index)
    return lanes


def _lane(stacks: list[list[_Slice]], piece: _Slice, parent: Optional[str]) -> int:
    """The lane where ``parent`` is the innermost open slice and holds ``piece``, else
    the first with nothing open (a new one where every lane has something open)."""
    for index, stack in enumerate(stacks):
        if stack and stack[-1].node == parent and piece.end <= stack[-1].end:
            return index
    return next((i for i, stack in enumerate(stacks) if not stack), len(stacks))


def _microseconds(ns: int) -> float:
    # Float microseconds keep every nanosecond: no rounding can push a child out of its
    # parent's interval, and ts * 1000 gives back the recorded time.
    return ns / 1000


def _thread(direction: str, lane: int) -> tuple[int, Optional[str]]:
    base = TRACKS[direction]
    if lane == 0:
        return base, direction
    return 10 * (lane + 1) + base, f"{direction} (overlapping {lane})"


def _events(graph: nx.DiGraph, direction: str) -> tuple[list[dict], dict[int, str]]:
    slices = _slices(graph, direction)
    events, threads = [], {}
    for piece, lane in zip(slices, _lanes(graph, slices)):
        tid, thread = _thread(direction, lane)
        threads[tid] = thread
        attrs = graph.nodes[piece.node]
        events.append({"name": _name(attrs), "cat": f"{attrs['kind']},{direction}", "ph": "X",
                       "ts": _microseconds(piece.start),
                       "dur": _microseconds(piece.end - piece.start), "pid": 1, "tid": tid,
                       "args": _args(graph, piece.node)})
    return events, threads


def _metadata(graph: nx.DiGraph, threads: dict[int, str]) -> list[dict]:
    found = [{"name": "process_name", "ph": "M", "pid": 1, "tid": 0,
              "args": {"name": str(graph.graph.get("model", "model"))}}]
    for tid, name in sorted(threads.items()):
        found.append({"name": "thread_name", "ph": "M", "pid": 1, "tid": tid,
                      "args": {"name": name}})
        found.append({"name": "thread_sort_index", "ph": "M", "pid": 1, "tid": tid,
                      "args": {"sort_index": tid}})
    return found


def to_trace(graph: nx.DiGraph) -> str:
    """The recording as Chrome trace event JSON, which Perfetto (ui.perfetto.dev) and
    chrome://tracing open: a complete event (``"ph": "X"``, ``ts`` and ``dur`` in
    microseconds since the recording started) per module call and per op, the forward on
    one track and the backward (where recorded) on another, each slice nested in its
    parent call (a call that ends at the instant a slice starts does not hold it, as
    Perfetto reads a track); ``args`` hold the node's id, its shapes and its other
    attributes (costs included). Stamps whose end comes before their start are no time:
    that slice is left out, as if not recorded.

    >>> g = nx.DiGraph(model="Tiny")
    >>> g.add_node("op:relu#0", kind="op", label="relu", parent=None, depth=0, seq=0,
    ...            name="relu", args="", grad_fn=None, t_start_ns=1500, t_end_ns=4250,
    ...            t_backward_start_ns=9000, t_backward_end_ns=8000)
    >>> [(e["name"], e["ts"], e["dur"]) for e in json.loads(to_trace(g))["traceEvents"]
    ...  if e["ph"] == "X"]
    [('relu', 1.5, 2.75)]
    """
    events, threads = [], {}
    for direction in TRACKS:
        found, named = _events(graph, direction)
        events += found
        threads.update(named)
    threads.setdefault(TRACKS["forward"], "forward")
    document = {"traceEvents": _metadata(graph, threads) + events, "displayTimeUnit": "ms",
                "otherData": {key: str(value) for key, value in sorted(graph.graph.items())}}
    return json.dumps(document, ensure_ascii=False, separators=(",", ":"))
