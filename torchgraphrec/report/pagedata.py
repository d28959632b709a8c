"""What the report's page reads besides the drawing: node attributes, facts, colour choices."""

from __future__ import annotations

from typing import Any, Optional, Sequence

import networkx as nx

from torchgraphrec.render import labels
from torchgraphrec.render.labels import cost_text
from torchgraphrec.text import items_change, settings_text, value_text
from torchgraphrec.render.scale import INCLUSIVE, TITLES
from torchgraphrec.render.theme import SCALE, text_color

__all__ = ["node_info", "change_rows", "facts", "forward_ms", "colour_choices", "COSTS", "PLAIN_FORWARD"]

#: The cost attributes a page can colour by and tabulate, with their headings.
COSTS = {"flops": "FLOPs", "backward_flops": "backward FLOPs", "saved_bytes": "saved activations",
         "forward_ms": "forward ms", "self_ms": "self ms", "backward_ms": "backward ms",
         "num_params": "params", "param_bytes": "param bytes", "output_bytes": "output bytes"}

#: The graph attribute holding a forward timed without the recorder, where one was measured.
PLAIN_FORWARD = "plain_forward_ms"

# Already in the drawing description, or made for machines rather than readers.
_LEFT_OUT = {"kind", "parent", "depth", "seq"}


def _plain(value: Any, index: dict[str, int]) -> Any:
    """An attribute as the page reads it: node ids turned into node numbers."""
    if isinstance(value, tuple) and value and all(isinstance(v, str) and v in index for v in value):
        return [index[v] for v in value]
    return value


def _info(attrs: dict[str, Any], index: dict[str, int]) -> dict[str, Any]:
    found = {key: _plain(value, index) for key, value in attrs.items() if key not in _LEFT_OUT}
    if attrs.get("settings"):  # as the box writes it; the raw text stays under "settings"
        found["_settings"] = settings_text(attrs["type"], attrs["settings"], limit=200)
    if attrs.get("diff_changes"):
        found["_changes"] = change_rows(attrs["kind"], attrs["diff_changes"])
    return found


# The details panel's row that each changed attribute rewrites as ``old → new`` (a
# changed call's ``inputs`` and ``outputs`` there are tensor ids, for drawing side A:
# its shapes say the change).
_CHANGE_ROWS = {
    "layer": {"type": "type", "settings": "settings", "training": "mode", "num_params": "parameters",
              "input_shapes": "inputs", "input_dtypes": "inputs", "output_shapes": "outputs",
              "output_dtypes": "outputs"},
    "param": {"shape": "shape", "dtype": "shape", "requires_grad": "trainable", "buffer": "kind"},
    "op": {"name": "op", "args": "arguments", "shape": "result", "dtype": "result"},
    "tensor": {"shape": "shape", "dtype": "shape", "role": "kind", "name": "name", "nested": "nested"},
}

# Flags as the panel words them: (when false, when true).
_FLAG_WORDS = {"training": ("eval", "train"), "requires_grad": ("frozen", "trainable"),
               "buffer": ("parameter", "buffer")}


def _tupled(value: Any) -> Any:
    # a union read back from JSON holds lists where a recorded one holds tuples
    return tuple(_tupled(v) for v in value) if isinstance(value, (list, tuple)) else value


def _value(value: Any) -> str:
    value = _tupled(value)
    if isinstance(value, tuple) and value and all(isinstance(v, str) for v in value):
        return ", ".join(value)  # dtypes
    return value_text(value)


def _change_text(name: str, old: Any, new: Any) -> str:
    if name in ("settings", "args") and old and new:  # item by item, as the drawing writes it
        return items_change(old, new).replace(" -> ", " → ")
    if name in ("settings", "args"):
        return f"{old or '(none)'} → {new or '(none)'}"
    if name in _FLAG_WORDS:
        words = _FLAG_WORDS[name]
        return f"{words[bool(old)]} → {words[bool(new)]}"
    return f"{_value(old)} → {_value(new)}"


def change_rows(kind: str, changes: dict[str, Any]) -> list[list[str]]:
    """A changed node's details rows, ``[row, "old → new"]``: each names the row it
    replaces, two changes of one row (a shape and a dtype) share it.

    >>> change_rows("layer", {"settings": ("in_features=16, out_features=16, bias=True",
    ...                                    "in_features=16, out_features=2, bias=True"),
    ...                       "num_params": (272, 34), "output_shapes": (((2, 16),), ((2, 2),)),
    ...                       "outputs": ((7,), (9,))})
    [['settings', 'out_features=16 → 2'], ['parameters', '272 → 34'], ['outputs', '2×16 → 2×2']]
    >>> change_rows("param", {"shape": ([16, 16], [2, 16]), "dtype": ("float32", "float16")})
    [['shape', '16×16 → 2×16; float32 → float16']]
    """
    rows: dict[str, list[str]] = {}
    for name, (old, new) in changes.items():
        row = _CHANGE_ROWS.get(kind, {}).get(name)
        if row is not None:
            rows.setdefault(row, []).append(_change_text(name, old, new))
    return [[row, "; ".join(texts)] for row, texts in rows.items()]


def node_info(graph: nx.DiGraph, order: Sequence[str]) -> list[dict[str, Any]]:
    """Each node's attributes, in ``order``, for the details panel, the search, the table
    and the timeline (``inputs`` and ``outputs`` as node numbers); what the page derives
    for people, not recorded as such, is under keys starting with ``_``.

    >>> g = nx.DiGraph()
    >>> g.add_node("t", kind="tensor", parent=None, depth=0, seq=0, shape=(2, 3))
    >>> g.add_node("l", kind="layer", parent=None, depth=0, seq=1, inputs=("t",),
    ...            type="Linear", settings="in_features=3, out_features=4, bias=True")
    >>> info = node_info(g, ["t", "l"])[1]
    >>> info["inputs"], info["_settings"]
    ([0], '3→4')
    """
    index = {node: i for i, node in enumerate(order)}
    return [_info(graph.nodes[node], index) for node in order]


def _amount(graph: nx.DiGraph, name: str) -> str:
    value = graph.graph.get(name)
    return "" if value is None else cost_text(value, name)


def _roots(graph: nx.DiGraph) -> list[dict[str, Any]]:
    return [a for _, a in sorted(graph.nodes(data=True), key=lambda n: n[1]["seq"])
            if a["kind"] == "layer" and a["parent"] is None]


def forward_ms(graph: nx.DiGraph) -> Optional[float]:
    """The forward's time as the graph holds it: the model calls' ``forward_ms`` (the
    recorder's own work left out by the clock), from their ``t_start_ns``/``t_end_ns``
    where a graph has no costs; ``None`` where nothing was timed.

    >>> g = nx.DiGraph()
    >>> g.add_node("l", kind="layer", parent=None, seq=0, forward_ms=2.5, t_start_ns=0, t_end_ns=9e9)
    >>> forward_ms(g)
    2.5
    """
    times = [a.get("forward_ms", (a["t_end_ns"] - a["t_start_ns"]) / 1e6 if "t_end_ns" in a else None)
             for a in _roots(graph)]
    times = [t for t in times if t is not None]
    return sum(times) if times else None


def facts(graph: nx.DiGraph) -> dict[str, Any]:
    """The header's facts: counts, totals, and the forward's time as the graph holds it
    (:func:`forward_ms`), beside a plain forward where one was timed; a diff's are its side
    B's (the newer run), which the header says."""
    counts = {kind: 0 for kind in ("layer", "op", "tensor", "param")}
    for _, attrs in graph.nodes(data=True):  # a diff's: side B's, as its parameters are
        if attrs.get("diff") != "removed":
            counts[attrs["kind"]] += 1
    roots = _roots(graph)
    found: dict[str, Any] = {
        "model": graph.graph.get("model", "model"),
        "params": labels.count_text(sum(a["num_params"] for a in roots[:1])) or "no parameters",
        "torch_version": graph.graph.get("torch_version", "?"),
        "forward_ms": forward_ms(graph),
        "forward_text": cost_text(forward_ms(graph), "forward_ms") if forward_ms(graph) is not None else "",
        "plain_ms": graph.graph.get(PLAIN_FORWARD),
        "counts": counts,
    }
    if found["plain_ms"] is not None:
        found["plain_text"] = cost_text(found["plain_ms"], "forward_ms")
    for name in ("flops", "backward_flops", "saved_bytes"):
        found[name] = _amount(graph, name)
    if "diff_a_model" in graph.graph:
        found["diff"] = diff_counts(graph)
    return found


_NOUNS = (("layer", "calls"), ("op", "ops"), ("param", "param tensors"))


def diff_counts(union: nx.DiGraph) -> dict[str, Any]:
    """What a diff's header counts, as its text summary does (``GraphDiff.summary``'s
    first line): calls, ops and parameter tensors added, removed and changed, and the edges
    rewired between nodes both sides have (tensors are not counted: a changed width
    changes every tensor after it).

    >>> g = nx.DiGraph(diff_a_model="M")
    >>> g.add_node("a", kind="layer", diff="added"); g.add_node("b", kind="op", diff="changed")
    >>> g.add_node("c", kind="op", diff="same"); g.add_edge("b", "c", diff="added")
    >>> diff_counts(g)
    {'parts': [['calls', [[1, 'added']]], ['ops', [[1, 'changed']]]], 'rewired': 1}
    """
    statuses = ("added", "removed", "changed")
    parts = []
    for kind, noun in _NOUNS:
        counts = [[sum(1 for _, a in union.nodes(data=True) if a["kind"] == kind
                       and a.get("diff") == status), status] for status in statuses]
        if any(n for n, _ in counts):
            parts.append([noun, [c for c in counts if c[0]]])
    rewired = sum(1 for s, t, status in union.edges(data="diff") if status in ("added", "removed")
                  and union.nodes[s].get("diff") != status and union.nodes[t].get("diff") != status)
    return {"parts": parts, "rewired": rewired}


def colour_choices(graph: nx.DiGraph, wanted: Optional[str],
                   palette: Sequence[str] = SCALE) -> dict[str, Any]:
    """What the page can colour by: the costs recorded on module calls, then every other
    number on them (probe statistics such as ``grad_output.rms``), the one to start with
    (``params`` names ``num_params``), and the drawing's scale: its ``palette``, the text
    colour on each step, and the sums that only boxes are painted by (render/scale.py)."""
    present: dict[str, None] = {}
    for _, attrs in graph.nodes(data=True):
        if attrs["kind"] != "layer":
            continue
        for key, value in attrs.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and (
                    key in COSTS or "." in key):
                present[key] = None
    names = [key for key in COSTS if key in present] + sorted(k for k in present if k not in COSTS)
    start = "num_params" if wanted == "params" else wanted
    return {"names": names, "headings": {k: TITLES.get(k, COSTS.get(k, k)) for k in names},
            "start": start if start in present else None, "scale": list(palette),
            "text": [text_color(step) for step in palette], "inclusive": sorted(INCLUSIVE)}
