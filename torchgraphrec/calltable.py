"""The module calls of a recording as rows: labels, shapes, parameters counted once, costs.

The rows behind :meth:`Recording.summary <torchgraphrec.Recording.summary>` and
:meth:`Recording.costs <torchgraphrec.Recording.costs>`; nothing here imports torch.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Optional, Sequence

import networkx as nx

from torchgraphrec.text import shape_text, short_name

__all__ = ["COSTS", "call_rows", "totals"]

#: The cost attributes of layer calls that rows carry where recorded (schema "Costs").
COSTS = ("flops", "backward_flops", "saved_bytes", "forward_ms", "self_ms", "backward_ms")

Row = dict[str, Any]
_SHAPES_SHOWN = 3  # more inputs than this end in "…": a row stays one line


def _calls(graph: nx.DiGraph) -> list[tuple[str, dict]]:
    """The layer nodes in call order (a call's parent always comes before it)."""
    calls = [(node, attrs) for node, attrs in graph.nodes(data=True) if attrs["kind"] == "layer"]
    return sorted(calls, key=lambda item: item[1]["seq"])


def _depth_labels(calls: Sequence[tuple[str, dict]]) -> dict[str, str]:
    """torchinfo's ``depth-idx`` label of each call: ``2-3`` is the third call at depth 2,
    counted in call order over every depth (the root's depth 0 has none)."""
    counts: dict[int, int] = {}
    labels = {}
    for node, attrs in calls:
        depth = attrs["depth"]
        counts[depth] = counts.get(depth, 0) + 1
        labels[node] = f"{depth}-{counts[depth]}" if depth else ""
    return labels


def _shapes(graph: nx.DiGraph, ids: Iterable[str]) -> str:
    """The shapes of the tensors and parameters among ``ids`` (a call given or returning a
    parameter, a prompt's learned tokens, shows it as torchinfo does, and as its output
    bytes count it): ``2×8, 2×8``; ``-`` where there are none."""
    nodes = graph.nodes
    shapes = [shape_text(nodes[i]["shape"]) for i in ids
              if i in nodes and nodes[i]["kind"] in ("tensor", "param")]
    more = ", …" if len(shapes) > _SHAPES_SHOWN else ""
    return ", ".join(shapes[:_SHAPES_SHOWN]) + more if shapes else "-"


def _enclosing(qualname: str, among: set[str]) -> Optional[str]:
    """The nearest module above ``qualname`` (by name) among ``among``, if any."""
    while qualname:
        qualname = qualname.rpartition(".")[0]
        if qualname in among:
            return qualname
    return None


def _counted(firsts: Mapping[str, dict], key: str) -> dict[str, Optional[int]]:
    """Each module's ``key`` (``num_params``...) less what the modules below it among
    ``firsts`` hold, so that every parameter is counted once, at the deepest module shown
    that holds it: torchinfo's rule (a module's own parameters; all of them at the depth
    limit). ``None`` where the recording lacks ``key``."""
    if any(key not in attrs for attrs in firsts.values()):
        return {qualname: None for qualname in firsts}
    counted = {qualname: attrs[key] for qualname, attrs in firsts.items()}
    names = set(firsts)
    for qualname, attrs in firsts.items():
        above = _enclosing(qualname, names)
        if above is not None:
            counted[above] -= attrs[key]
    return counted


def call_rows(graph: nx.DiGraph, depth: Optional[int] = None,
              labels: Optional[Mapping[str, str]] = None) -> list[Row]:
    """One row per module call down to ``depth`` (all with ``None``), in call order.

    Each row holds ``node``, ``label`` (``depth-idx``, or from ``labels`` by qualname),
    ``name`` (the module's name in its caller), ``qualname``, ``type``, ``depth``,
    ``call_index``, ``first_call`` (the module's first call shown), ``input_shapes``, ``output_shapes``, ``params`` and
    ``trainable_params`` (the module's parameters, nested ones included), ``params_counted`` and ``trainable_counted`` (what
    the row adds to the totals: a module's parameters are counted at its first call, less
    those of the modules shown below it), ``param_bytes``, ``output_bytes`` and the
    recorded :data:`COSTS`.

    >>> g = nx.DiGraph()
    >>> g.add_node("layer:#0", kind="layer", qualname="", type="Net", depth=0, seq=0,
    ...            parent=None, call_index=0, num_params=10, inputs=(), outputs=())
    >>> g.add_node("layer:fc#0", kind="layer", qualname="fc", type="Linear", depth=1, seq=1,
    ...            parent="layer:#0", call_index=0, num_params=6, inputs=(), outputs=())
    >>> [(r["label"], r["name"], r["params"], r["params_counted"]) for r in call_rows(g)]
    [('', '(root)', 10, 4), ('1-1', 'fc', 6, 6)]
    >>> [(r["name"], r["params_counted"]) for r in call_rows(g, depth=0)]
    [('(root)', 10)]
    >>> call_rows(g, depth=-1)
    Traceback (most recent call last):
    ValueError: depth must be None or an int >= 0, got -1
    """
    if depth is not None and (type(depth) is not int or depth < 0):
        raise ValueError(f"depth must be None or an int >= 0, got {depth!r}")
    calls = _calls(graph)
    found = _depth_labels(calls)
    shown = [(node, attrs) for node, attrs in calls if depth is None or attrs["depth"] <= depth]
    firsts: dict[str, dict] = {}
    for _, attrs in shown:
        firsts.setdefault(attrs["qualname"], attrs)
    counted = _counted(firsts, "num_params")
    trainable = _counted(firsts, "trainable_params")
    nodes = graph.nodes
    rows = []
    for node, attrs in shown:
        first = firsts[attrs["qualname"]] is attrs
        parent = nodes[attrs["parent"]]["qualname"] if attrs["parent"] is not None else ""
        row: Row = {
            "node": node,
            "label": (labels or {}).get(attrs["qualname"], found[node]),
            "name": short_name(attrs["qualname"], parent) or "(root)",
            "qualname": attrs["qualname"], "type": attrs["type"], "depth": attrs["depth"],
            "call_index": attrs["call_index"], "first_call": first,
            "input_shapes": _shapes(graph, attrs.get("inputs", ())),
            "output_shapes": _shapes(graph, attrs.get("outputs", ())),
            "params": attrs["num_params"], "trainable_params": attrs.get("trainable_params"),
            "params_counted": counted[attrs["qualname"]] if first else 0,
            "trainable_counted": trainable[attrs["qualname"]] if first else 0,
            "param_bytes": attrs.get("param_bytes"), "output_bytes": attrs.get("output_bytes"),
        }
        row.update((name, attrs[name]) for name in COSTS if name in attrs)
        rows.append(row)
    return rows


def totals(graph: nx.DiGraph) -> dict[str, Any]:
    """The whole recording's numbers: ``calls``, ``params``, ``trainable_params`` (``None``
    where the recording lacks them), ``param_bytes`` (each parameter once, as ``params``),
    ``input_bytes`` (the model's inputs) and the graph's recorded cost totals (``flops``,
    ``backward_flops``, ``saved_bytes``).

    >>> g = nx.DiGraph(flops=96)
    >>> g.add_node("tensor:0@v0", kind="tensor", role="input", parent=None, shape=(8,),
    ...            bytes=32)
    >>> g.add_node("layer:#0", kind="layer", qualname="", type="Net", depth=0, seq=1,
    ...            parent=None, call_index=0, num_params=10, trainable_params=4,
    ...            param_bytes=40, inputs=("tensor:0@v0",), outputs=())
    >>> totals(g)
    {'calls': 1, 'params': 10, 'trainable_params': 4, 'param_bytes': 40, 'input_bytes': 32, 'flops': 96}
    """
    rows = call_rows(graph)
    firsts: dict[str, Row] = {}
    for row in rows:
        firsts.setdefault(row["qualname"], row)
    found: dict[str, Any] = {"calls": len(rows),
                             "params": sum(row["params_counted"] or 0 for row in rows)}
    trainable = [row["trainable_counted"] for row in rows]
    found["trainable_params"] = None if None in trainable else sum(trainable)
    found["param_bytes"] = _total_bytes(graph, firsts)
    found["input_bytes"] = sum(attrs.get("bytes", 0) for _, attrs in graph.nodes(data=True)
                               if attrs["kind"] == "tensor" and attrs["role"] == "input")
    found.update((name, graph.graph[name]) for name in ("flops", "backward_flops", "saved_bytes")
                 if name in graph.graph)
    return found


def _total_bytes(graph: nx.DiGraph, firsts: Mapping[str, Row]) -> Optional[int]:
    """The parameters' bytes, each parameter once (as the ``params`` total)."""
    if any(row["param_bytes"] is None for row in firsts.values()):
        return None
    names = set(firsts)
    return sum(row["param_bytes"] for qualname, row in firsts.items()
               if _enclosing(qualname, names) is None)
